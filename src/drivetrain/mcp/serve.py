"""``drivetrain mcp serve``: drivetrain's own tools (Read, Write, Edit, Bash, Grep, Glob) as a stdio MCP server.

Another agent uses them under the same control as drivetrain's own runs: every call passes the gate (PreToolUse
hooks, the permission rules and mode of the settings files and flags; nobody is there to approve, so what
would ask is denied), Bash runs in the sandbox when it is on, and each call is in the audit log of a session of
its own (``drivetrain sessions show ID``; the id is printed on stderr). The protocol is the ``mcp`` SDK's.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import mcp_types
from mcp.server import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from drivetrain.control.approval import Allow, Deny
from drivetrain.control.gate import Gate
from drivetrain.control.hooks import Hooks
from drivetrain.control.permissions import MODES, Policy, load_settings, make_sandbox
from drivetrain.host.procs import keep_environment_private
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.events import PermissionDecided, ToolFinished, ToolStarted
from drivetrain.messages import ToolResultBlock, ToolUseBlock
from drivetrain.sessions.audit import AuditLog
from drivetrain.sessions.log import SessionLog
from drivetrain.sessions.open import open_store
from drivetrain.tools import builtin_tools
from drivetrain.tools.base import Tool, ToolContext, ToolResult


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--permission-mode",
        choices=MODES,
        default=None,
        help="default: the settings files' defaultMode, else default",
    )
    p.add_argument(
        "--allowedTools",
        "--allowed-tools",
        dest="allowed_tools",
        nargs="+",
        action="extend",
        default=[],
        metavar="RULE",
    )
    p.add_argument(
        "--disallowedTools",
        "--disallowed-tools",
        dest="disallowed_tools",
        nargs="+",
        action="extend",
        default=[],
        metavar="RULE",
    )
    p.add_argument("--add-dir", dest="add_dir", nargs="+", action="extend", default=[], metavar="DIR")
    p.add_argument("--sandbox", action="store_true", help="run Bash inside bubblewrap")


class ToolServer:
    """The built-in tools behind a gate and an audit log, answering MCP tool calls."""

    def __init__(self, args: argparse.Namespace, cwd: Path):
        settings = load_settings(cwd)
        self.policy = Policy.load(
            cwd,
            mode=args.permission_mode,
            allowed_tools=args.allowed_tools,
            disallowed_tools=args.disallowed_tools,
            add_dirs=args.add_dir,
            interactive=False,
            settings=settings,
        )
        sandbox = make_sandbox(args.sandbox, cwd, self.policy.additional_dirs, settings)
        self.tools: dict[str, Tool] = {t.name: t for t in builtin_tools(sandbox, settings.env_passthrough)}
        self.gate = Gate(Hooks.from_settings(settings.raw, settings.env_passthrough), self.policy, None)
        self.session_id = str(uuid.uuid4())
        store = open_store()
        SessionLog(store, self.session_id).begin(cwd=str(cwd), model="", provider="mcp serve")
        self.audit = AuditLog(store, self.session_id)
        self.context = ToolContext(
            cwd=cwd,
            roots=self.policy.roots(cwd),
            read_filter=self.policy.search_filter(cwd),
            session_id=self.session_id,
        )

    def listing(self) -> list[mcp_types.Tool]:
        return [
            mcp_types.Tool(name=t.name, description=t.description, input_schema=t.input_schema)
            for t in self.tools.values()
        ]

    async def call(self, name: str, arguments: JsonObject) -> mcp_types.CallToolResult:
        call = ToolUseBlock(f"mcp_{uuid.uuid4().hex[:16]}", name, arguments)
        payload = {"session_id": self.session_id, "cwd": str(self.context.cwd), "hook_event_name": "PreToolUse"}
        verdict = await self.gate.decide(call, self.tools, self.context, payload, lambda event, outcome: None)
        if not isinstance(verdict, Allow):  # a Defer is a denial too: nobody is here to approve it later
            deny = verdict if isinstance(verdict, Deny) else Deny("Not run: it needs an approval.", by="harness")
            self.audit.observe(PermissionDecided(call, "deny", deny.by, deny.message))
            return _answer(ToolResult(deny.message, is_error=True))
        self.audit.observe(PermissionDecided(call, "allow", verdict.by, verdict.reason))
        tool_input = verdict.updated_input if verdict.updated_input is not None else arguments
        self.audit.observe(ToolStarted(call, tool_input, verdict.by))
        started = time.monotonic()
        try:
            result = await self.tools[name].call(tool_input, replace(self.context, tool_use_id=call.id))
        except Exception as e:
            result = ToolResult(f"{type(e).__name__}: {e}", is_error=True)
        self.audit.observe(
            ToolFinished(
                call,
                ToolResultBlock(call.id, result.content, result.is_error),
                (time.monotonic() - started) * 1000,
                result.meta or {},
            )
        )
        return _answer(result)


def _answer(result: ToolResult) -> mcp_types.CallToolResult:
    blocks: list[JsonObject] = (
        [{"type": "text", "text": result.content}] if isinstance(result.content, str) else result.content
    )
    content: list[mcp_types.ContentBlock] = []
    for b in blocks:
        if b.get("type") == "image":
            content.append(
                mcp_types.ImageContent(type="image", data=b["source"]["data"], mime_type=b["source"]["media_type"])
            )
        else:
            content.append(mcp_types.TextContent(type="text", text=b.get("text", "")))
    return mcp_types.CallToolResult(content=content, is_error=result.is_error)


async def serve(args: argparse.Namespace) -> int:
    keep_environment_private()
    tools = ToolServer(args, Path.cwd())
    print(
        f"drivetrain mcp serve: tools {', '.join(tools.tools)}; audit log: drivetrain sessions show {tools.session_id}",
        file=sys.stderr,
        flush=True,
    )

    async def list_tools(
        ctx: ServerRequestContext, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=tools.listing())

    async def call_tool(ctx: ServerRequestContext, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        return await tools.call(params.name, dict(params.arguments or {}))

    server = Server("drivetrain", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
    return 0

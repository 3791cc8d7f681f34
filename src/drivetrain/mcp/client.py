"""MCP servers as tools, on the official ``mcp`` SDK: connect, list, call; failures become is_error results.

Each server's connection lives in a task of its own (the SDK's transports are context managers that must be
left in the task that entered them); tool calls from the loop's tasks go through its session. A server that
fails to start, crashes mid-call, times out or answers with something unreadable gives the model an is_error
result saying which, and the person one line (``note``); the run goes on. A stdio server that crashed is
started again on its next call, once per run, then marked failed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import httpx2
import mcp_types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client import Transport
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from drivetrain.errors import ConfigError
from drivetrain.home import drivetrain_home, safe_name
from drivetrain.host.procs import watch_group
from drivetrain.jsontypes import JsonObject
from drivetrain.mcp.config import ServerSpec
from drivetrain.tools.base import ToolContext, ToolResult

if TYPE_CHECKING:
    from mcp.client._transport import TransportStreams  # what a transport yields: the SDK names it only here

START_TIMEOUT_S = 30.0  # MCP_TIMEOUT, in ms as Claude Code reads it
TOOL_TIMEOUT_S = 60.0  # MCP_TOOL_TIMEOUT, in ms
RESTARTS = 1  # a crashed stdio server is started again this many times per run


def timeouts() -> tuple[float, float]:
    """(start, tool call) timeouts in seconds, from ``MCP_TIMEOUT`` and ``MCP_TOOL_TIMEOUT`` (milliseconds)."""

    def seconds(name: str, default: float) -> float:
        raw = os.environ.get(name)
        try:
            return int(raw) / 1000 if raw else default
        except ValueError:
            raise ConfigError(f"{name}={raw!r}: give a whole number of milliseconds") from None

    return seconds("MCP_TIMEOUT", START_TIMEOUT_S), seconds("MCP_TOOL_TIMEOUT", TOOL_TIMEOUT_S)


class ServerFailed(Exception):
    """The server cannot serve a call now: the message says why, for the model and the person."""


class Connection:
    """One server, connected by a task that holds its SDK ``Client`` open until ``close``."""

    def __init__(
        self, spec: ServerSpec, cwd: Path, note: Callable[[str], None], start_timeout: float, call_timeout: float
    ):
        self.spec, self.cwd, self.note = spec, cwd, note
        self.start_timeout, self.call_timeout = start_timeout, call_timeout
        self.tools: list[mcp_types.Tool] = []
        self.failed = ""  # why it cannot be used (empty while it can)
        self.restarts = 0
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._lock = asyncio.Lock()  # one restart at a time, however many calls find it down

    async def start(self) -> bool:
        """Connect and list the tools, within the start timeout. False (with ``failed`` set) if it could not."""
        self._closing = asyncio.Event()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # a failure after the timeout is not news
        self._task = asyncio.create_task(self._hold(ready), name=f"mcp:{self.spec.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.start_timeout)
            return True
        except TimeoutError:
            why = f"did not start within {self.start_timeout:g} s (MCP_TIMEOUT)"
        except Exception as e:
            why = f"failed to start: {_describe(e)}"
        await self.close()
        self.failed = f"MCP server {self.spec.name!r} {why}"
        self.note(f"{self.failed}; its tools are not available.{self._log_hint()}")
        return False

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        try:
            async with Client(
                self._target(), client_info=mcp_types.Implementation(name="drivetrain", version="0.1")
            ) as client:
                _watch_children()
                self.tools = await _list_all(client)
                self._client = client
                ready.set_result(None)
                await self._closing.wait()
        except Exception as e:
            if not ready.done():
                ready.set_exception(e)
        except BaseException:
            if not ready.done():
                ready.cancel()
            raise
        finally:
            self._client = None

    def _target(self) -> Transport:
        s = self.spec.expanded()
        if s.transport == "stdio":
            return _stdio(
                StdioServerParameters(command=s.command, args=list(s.args), env=dict(s.env), cwd=self.cwd),
                self._log_path(),
            )
        if s.transport == "sse":
            return sse_client(s.url, headers=dict(s.headers))
        return _http(s.url, dict(s.headers))

    def _log_path(self) -> Path:
        return drivetrain_home() / "logs" / f"mcp-{safe_name(self.spec.name)}.log"

    def _log_hint(self) -> str:
        return f" Its stderr is in {self._log_path()}." if self.spec.transport == "stdio" else ""

    async def call(self, tool: str, arguments: JsonObject) -> mcp_types.CallToolResult:
        """The server's answer; ``ServerFailed`` when it is down, crashed or too slow (the message says which)."""
        client = await self._ready()
        try:
            return await asyncio.wait_for(client.call_tool(tool, arguments), self.call_timeout)
        except TimeoutError:
            why = f"did not answer within {self.call_timeout:g} s (MCP_TOOL_TIMEOUT)"
            self.note(f"MCP server {self.spec.name!r}: {tool} {why}.")
            raise ServerFailed(f"MCP server {self.spec.name!r} {why}; the call was abandoned.") from None
        except MCPError as e:
            if e.error.code != mcp_types.CONNECTION_CLOSED:
                raise ServerFailed(f"MCP server {self.spec.name!r} refused the call: {e.error.message}") from None
            crashed = f"MCP server {self.spec.name!r} crashed during {tool} (the connection closed)"
        except (OSError, httpx2.HTTPError) as e:
            crashed = f"MCP server {self.spec.name!r} failed during {tool}: {_describe(e)}"
        except Exception as e:
            why = f"MCP server {self.spec.name!r} sent a malformed answer to {tool} ({_describe(e)})"
            self.note(f"{why}.")
            raise ServerFailed(f"{why}.") from None
        await self.close()  # what is left of it
        again = self.spec.transport == "stdio" and self.restarts < RESTARTS
        self.failed = crashed
        self.note(
            f"{crashed}; {'it will be started again on its next call' if again else 'no more calls go to it'}."
            f"{self._log_hint()}"
        )
        raise ServerFailed(
            f"{crashed}. "
            + (
                "It will be restarted on the next call; the call may have had partial effects."
                if again
                else "It is no longer available."
            )
        )

    async def _ready(self) -> Client:
        async with self._lock:
            client = self._client
            if client is not None:
                return client
            if self.failed and (self.spec.transport != "stdio" or self.restarts >= RESTARTS or not self.tools):
                raise ServerFailed(f"{self.failed}; it is not available in this run.")
            self.restarts += 1
            if not await self.start():
                self.restarts = RESTARTS  # a server that cannot start again stays down
                raise ServerFailed(f"{self.failed}; it is not available in this run.")
            self.failed = ""
            self.note(f"MCP server {self.spec.name!r} restarted.")
            assert self._client is not None
            return self._client

    async def close(self) -> None:
        """Leave the connection (the SDK ends a stdio server's process group) and wait for its task; one still
        starting is cancelled, so a server that never answers costs no more than its start timeout."""
        self._closing.set()
        task, self._task = self._task, None
        if task is None or task.done():
            return
        if self._client is None:
            task.cancel()
        if not (await asyncio.wait({task}, timeout=10))[0]:
            task.cancel()  # a server that will not close: its process is left to the watchdog


@asynccontextmanager
async def _stdio(params: StdioServerParameters, log_path: Path) -> AsyncIterator[TransportStreams]:
    """The SDK's stdio transport, the server's stderr kept in a log file instead of drawn over the terminal."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as streams:
            yield streams


@asynccontextmanager
async def _http(url: str, headers: dict[str, str]) -> AsyncIterator[TransportStreams]:
    """The SDK's streamable HTTP transport with the configured headers (its own HTTP client, closed with it)."""
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


async def _list_all(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools


def _watch_children() -> None:
    """The SDK starts a stdio server in a session of its own, so nothing ends it if drivetrain is killed: hand
    every child that leads its own group to the watchdog (``procs.watch_group``), as Bash does its commands."""
    for children in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        try:
            pids = [int(p) for p in children.read_text().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                if os.getpgid(pid) == pid:
                    watch_group(pid)
            except OSError:
                pass


def _describe(e: BaseException) -> str:
    if isinstance(e, ExceptionGroup):
        return "; ".join(_describe(x) for x in e.exceptions)
    if isinstance(e, MCPError):
        return e.error.message
    if isinstance(e, FileNotFoundError):
        return f"command not found: {e.filename or e}"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


class McpTool:
    """One server tool, offered as ``mcp__SERVER__TOOL`` with the server's description and input schema."""

    def __init__(self, connection: Connection, tool: mcp_types.Tool):
        self.connection, self.remote = connection, tool.name
        self.name = f"mcp__{connection.spec.name}__{tool.name}"
        self.description = tool.description or tool.title or tool.name
        self.input_schema = dict(tool.input_schema or {"type": "object", "properties": {}})

    async def call(self, input: JsonObject, ctx: ToolContext) -> ToolResult:
        try:
            result = await self.connection.call(self.remote, input)
        except ServerFailed as e:
            return ToolResult(str(e), is_error=True)
        try:
            content = result_content(result)
        except (ValueError, TypeError, KeyError) as e:
            why = f"MCP server {self.connection.spec.name!r} returned content drivetrain cannot read ({e})"
            self.connection.note(f"{why}.")
            return ToolResult(why + ".", is_error=True)
        return ToolResult(content, is_error=bool(result.is_error))


def result_content(result: mcp_types.CallToolResult) -> str | list[JsonObject]:
    """MCP content as tool_result content: text blocks joined as text (so output caps apply), images as image
    blocks, resources by their text or link, structured content as JSON when nothing else was sent."""
    blocks: list[JsonObject] = []
    for c in result.content:
        if isinstance(c, mcp_types.TextContent):
            blocks.append({"type": "text", "text": c.text})
        elif isinstance(c, mcp_types.ImageContent):
            base64.b64decode(c.data, validate=True)  # malformed data is the server's fault, said as such
            blocks.append({"type": "image", "source": {"type": "base64", "media_type": c.mime_type, "data": c.data}})
        elif isinstance(c, mcp_types.EmbeddedResource):
            r = c.resource
            text = r.text if isinstance(r, mcp_types.TextResourceContents) else None
            blocks.append(
                {
                    "type": "text",
                    "text": text if text is not None else f"[resource {r.uri} ({r.mime_type or 'binary'}), not shown]",
                }
            )
        elif isinstance(c, mcp_types.ResourceLink):
            blocks.append({"type": "text", "text": f"[resource {c.uri}: {c.name}]"})
        else:
            blocks.append({"type": "text", "text": f"[{c.type} content, not shown]"})
    if not blocks and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    if all(b["type"] == "text" for b in blocks):
        return "\n".join(b["text"] for b in blocks)
    return blocks

"""``drivetrain mcp``: the MCP servers drivetrain uses, and drivetrain's own tools as one.

Usage (Claude Code's commands and scopes)::

    drivetrain mcp list                                  # every configured server, with its state
    drivetrain mcp get NAME
    drivetrain mcp add NAME [-e KEY=VALUE …] -- CMD ARGS…   # a stdio server
    drivetrain mcp add --transport http NAME URL [-H "Header: value" …]
    drivetrain mcp remove NAME
    drivetrain mcp serve [--allowedTools … --permission-mode … --sandbox]

``--scope local`` (default: this project, only for you: ``.drivetrain/settings.local.json``), ``project``
(``.mcp.json``, shared with the repository) or ``user`` (``$DRIVETRAIN_HOME/settings.json``, every project).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from drivetrain.errors import HarnessError
from drivetrain.jsontypes import JsonObject
from drivetrain.mcp.config import (
    SCOPES,
    TRANSPORTS,
    FileScope,
    ServerSpec,
    configured,
    parse_server,
    project_verdict,
    read_json,
    scope_file,
    write_json,
)
from drivetrain.mcp.group import McpServers


def build_parser() -> argparse.ArgumentParser:
    from drivetrain.mcp.serve import add_serve_arguments

    p = argparse.ArgumentParser(prog="drivetrain mcp", description="The MCP servers drivetrain uses.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every configured server, connected to check it works")
    get = sub.add_parser("get", help="one server's configuration")
    get.add_argument("name")
    add = sub.add_parser("add", help="add a server: NAME -- CMD ARGS…, or --transport http NAME URL")
    add.add_argument("--transport", "-t", choices=TRANSPORTS, default="stdio")
    add.add_argument("--scope", "-s", choices=SCOPES, default="local")
    add.add_argument("--env", "-e", action="append", default=[], metavar="KEY=VALUE")
    add.add_argument("--header", "-H", action="append", default=[], metavar="'NAME: VALUE'")
    add.add_argument("name")
    add.add_argument("target", nargs="*", help="the URL (http, sse); a stdio server's command comes after --")
    remove = sub.add_parser("remove", help="remove a server")
    remove.add_argument("--scope", "-s", choices=SCOPES, default=None)
    remove.add_argument("name")
    add_serve_arguments(sub.add_parser("serve", help="drivetrain's tools as a stdio MCP server"))
    return p


def main(argv: list[str]) -> int:
    command: list[str] = []
    if "--" in argv:  # what follows is the server's command line, never drivetrain's flags
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1 :]
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            from drivetrain.mcp.serve import serve

            return asyncio.run(serve(args))
        if args.command == "list":
            return asyncio.run(_list(Path.cwd()))
        if args.command == "get":
            return _get(Path.cwd(), args.name)
        if args.command == "add":
            return _add(Path.cwd(), args, command)
        return _remove(Path.cwd(), args.name, args.scope)
    except HarnessError as e:
        print(f"drivetrain mcp: {e}", file=sys.stderr)
        return 1


def _every(cwd: Path) -> list[ServerSpec]:
    found = configured(cwd)
    return found.servers + found.unapproved


async def _list(cwd: Path) -> int:
    found = configured(cwd)
    if not found.servers and not found.unapproved:
        print("No MCP servers configured. Add one with: drivetrain mcp add NAME -- CMD ARGS…", file=sys.stderr)
        return 0
    servers = McpServers(found.servers, cwd, note=lambda line: None)
    async with servers:
        for c in servers.connections:
            state = f"✗ {c.failed}" if c.failed else f"✓ connected, {len(c.tools)} tool(s)"
            print(f"{c.spec.name}: {c.spec.command_line()} ({c.spec.scope}) - {state}")
    for spec in found.unapproved:
        print(
            f"{spec.name}: {spec.command_line()} (project) - not approved: not started (set "
            f'"enabledMcpjsonServers": ["{spec.name}"] in {scope_file("local", cwd)})'
        )
    return 0


def _get(cwd: Path, name: str) -> int:
    spec = next((s for s in _every(cwd) if s.name == name), None)
    if spec is None:
        print(f"drivetrain mcp: no MCP server named {name!r} (drivetrain mcp list shows them)", file=sys.stderr)
        return 1
    print(f"{spec.name}:\n  Scope: {spec.scope} ({spec.source})\n  Type: {spec.transport}")
    if spec.transport == "stdio":
        print(f"  Command: {spec.command}\n  Args: {' '.join(spec.args)}")
        for k, v in spec.env.items():
            print(f"  Env: {k}={v}")
    else:
        print(f"  URL: {spec.url}")
        for k, v in spec.headers.items():
            print(f"  Header: {k}: {v}")
    if spec.scope == "project":
        mine = (read_json(scope_file("local", cwd)), read_json(scope_file("user", cwd)))
        verdict = project_verdict(spec.name, mine)
        print(f"  Approved: {'yes' if verdict else 'refused' if verdict is False else 'not yet'}")
    return 0


def _add(cwd: Path, args: argparse.Namespace, command: list[str]) -> int:
    if args.transport == "stdio":
        if not command:
            raise HarnessError("a stdio server's command goes after --: drivetrain mcp add NAME -- CMD ARGS…")
        env = dict(_pair(e, "=", "--env KEY=VALUE") for e in args.env)
        entry: JsonObject = {"type": "stdio", "command": command[0], "args": command[1:], "env": env}
    else:
        if len(args.target) != 1 or command:
            raise HarnessError(
                f"an {args.transport} server takes one URL: drivetrain mcp add --transport {args.transport} NAME URL"
            )
        headers = dict(_pair(h, ":", "--header 'Name: value'") for h in args.header)
        entry = {"type": args.transport, "url": args.target[0], "headers": headers}
    path = scope_file(args.scope, cwd)
    parse_server(args.name, entry, str(path), args.scope)  # the same checks as when it is read
    data = read_json(path)
    servers = data.setdefault("mcpServers", {})
    if args.name in servers:
        raise HarnessError(f"{path} already has an MCP server named {args.name!r}; remove it first")
    servers[args.name] = entry
    write_json(path, data)
    print(f"Added {args.transport} MCP server {args.name} to {args.scope} config ({path})")
    return 0


def _pair(text: str, sep: str, form: str) -> tuple[str, str]:
    key, found, value = text.partition(sep)
    if not found or not key.strip():
        raise HarnessError(f"{text!r}: write it as {form}")
    return key.strip(), value.strip()


def _remove(cwd: Path, name: str, scope: FileScope | None) -> int:
    holding = [scope] if scope else [s for s in SCOPES if name in read_json(scope_file(s, cwd)).get("mcpServers", {})]
    if not holding:
        raise HarnessError(f"no MCP server named {name!r} in the {scope or 'local, project or user'} config")
    if len(holding) > 1:
        raise HarnessError(f"{name!r} is in the {' and '.join(holding)} configs: say which with --scope")
    path = scope_file(holding[0], cwd)
    data = read_json(path)
    if name not in data.get("mcpServers", {}):
        raise HarnessError(f"no MCP server named {name!r} in {path}")
    del data["mcpServers"][name]
    write_json(path, data)
    print(f"Removed MCP server {name} from {holding[0]} config ({path})")
    return 0

"""Which MCP servers a run may use: Claude Code's ``{"mcpServers": {NAME: {...}}}`` from every place it is kept.

Places, highest precedence first (a name defined twice takes the first):

- ``--mcp-config FILE_OR_JSON`` (repeatable): trusted, the person named them.
- the local scope: ``.drivetrain/settings.local.json`` in the project (private to this person and project);
- the project scope: ``.mcp.json`` at the project root: shared, so possibly from a cloned repository. Its
  servers start only once approved: ``enabledMcpjsonServers`` / ``enableAllProjectMcpServers`` in the user's
  or the local settings (a project's own ``.drivetrain/settings.json`` cannot approve itself), or interactively.
  ``disabledMcpjsonServers`` refuses them;
- the user scope: ``mcpServers`` in ``$DRIVETRAIN_HOME/settings.json``.

``--strict-mcp-config`` keeps only the ``--mcp-config`` servers. ``${VAR}`` and ``${VAR:-default}`` expand in
command, args, env, url and headers when a server starts.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from drivetrain.errors import ConfigError
from drivetrain.home import drivetrain_home
from drivetrain.jsontypes import JsonObject

FileScope = Literal["local", "project", "user"]  # the scopes kept in a file (``mcp add --scope``)
Scope = Literal["flag", FileScope]
SCOPES: tuple[FileScope, ...] = get_args(FileScope)
TransportType = Literal["stdio", "http", "sse"]  # a server's "type"
TRANSPORTS: tuple[TransportType, ...] = get_args(TransportType)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


@dataclass(frozen=True)
class ServerSpec:
    """One server as configured (before ``${VAR}`` expansion)."""

    name: str
    transport: TransportType
    scope: Scope
    source: str  # the file (or flag) it came from
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)

    def command_line(self) -> str:
        """What will run (or be reached), for a person deciding whether to trust it."""
        if self.transport != "stdio":
            return f"{self.transport} {self.url}"
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return " ".join(filter(None, [env, _quote(self.command), *map(_quote, self.args)]))

    def to_json(self) -> JsonObject:
        if self.transport == "stdio":
            return {"type": "stdio", "command": self.command, "args": list(self.args), "env": dict(self.env)}
        return {"type": self.transport, "url": self.url, "headers": dict(self.headers)}

    def expanded(self, environ: Mapping[str, str] | None = None) -> ServerSpec:
        """``${VAR}`` and ``${VAR:-default}`` replaced; raises ConfigError naming a variable that is not set."""
        env = os.environ if environ is None else environ

        def sub(text: str) -> str:
            def one(m: re.Match[str]) -> str:
                default: str | None = m.group(2)
                if m.group(1) in env:
                    return env[m.group(1)]
                if default is not None:
                    return default
                raise ConfigError(
                    f"MCP server {self.name!r} ({self.source}) uses ${{{m.group(1)}}}, which is not "
                    f"set: set it, or write ${{{m.group(1)}:-default}}"
                )

            return _VAR.sub(one, text)

        return ServerSpec(
            self.name,
            self.transport,
            self.scope,
            self.source,
            sub(self.command),
            tuple(map(sub, self.args)),
            {k: sub(v) for k, v in self.env.items()},
            sub(self.url),
            {k: sub(v) for k, v in self.headers.items()},
        )


def _quote(word: str) -> str:
    return word if word and re.fullmatch(r"[\w@%+=:,./-]+", word) else json.dumps(word)


def parse_servers(data: object, source: str, scope: Scope) -> list[ServerSpec]:
    """The servers of one ``{"mcpServers": {...}}`` object; ConfigError naming ``source`` on a malformed one."""
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers", {}), dict):
        raise ConfigError(
            f'{source}: MCP configuration must be an object like {{"mcpServers": {{"NAME": '
            f'{{"command": "...", "args": []}}}}}}'
        )
    return [parse_server(name, entry, source, scope) for name, entry in data.get("mcpServers", {}).items()]


def parse_server(name: str, entry: object, source: str, scope: Scope) -> ServerSpec:
    where = f"{source}: MCP server {name!r}"
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ConfigError(f"{where}: a name may hold only letters, digits, '_' and '-' (it becomes mcp__{name}__…)")
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be an object")
    transport = entry.get("type", "stdio" if "command" in entry else "http" if "url" in entry else None)
    if transport == "streamable-http":
        transport = "http"
    if transport not in TRANSPORTS:
        raise ConfigError(
            f'{where}: "type" must be one of {", ".join(TRANSPORTS)} (a stdio server needs '
            f'"command", an http server "url")'
        )
    if transport == "stdio":
        command, args, env = entry.get("command"), entry.get("args", []), entry.get("env", {})
        if not isinstance(command, str) or not command:
            raise ConfigError(f'{where}: a stdio server needs "command", a string')
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ConfigError(f'{where}: "args" must be a list of strings')
        return ServerSpec(name, transport, scope, source, command, tuple(args), _strings(env, "env", where))
    url = entry.get("url")
    if not isinstance(url, str) or not url:
        raise ConfigError(f'{where}: an {transport} server needs "url", a string')
    return ServerSpec(
        name, transport, scope, source, url=url, headers=_strings(entry.get("headers", {}), "headers", where)
    )


def _strings(value: object, key: str, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f'{where}: "{key}" must be an object of strings')
    return dict(value)


def from_flag(value: str) -> list[ServerSpec]:
    """One ``--mcp-config`` value: JSON text (it starts with ``{``) or a file holding it."""
    if value.lstrip().startswith("{"):
        source, text = "--mcp-config", value
    else:
        source = value
        try:
            text = Path(value).expanduser().read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(
                f"--mcp-config {value}: cannot read it ({e.strerror or e}); give a file or JSON "
                "text like '{\"mcpServers\": {...}}'"
            ) from None
    return parse_servers(_json(text, source), source, "flag")


def _json(text: str, source: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{source} is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None


def read_json(path: Path) -> JsonObject:
    try:
        data = _json(path.read_text(encoding="utf-8"), str(path))
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object")
    return data


def scope_file(scope: FileScope, cwd: Path) -> Path:
    """Where a scope's servers are kept (``drivetrain mcp add --scope``)."""
    return {
        "local": cwd / ".drivetrain" / "settings.local.json",
        "project": cwd / ".mcp.json",
        "user": drivetrain_home() / "settings.json",
    }[scope]


@dataclass
class Configured:
    """The servers a run may start, and the project servers waiting for approval."""

    servers: list[ServerSpec]
    unapproved: list[ServerSpec]  # from .mcp.json, neither approved nor refused yet


def configured(cwd: Path, flags: Sequence[str] = (), strict: bool = False) -> Configured:
    """Every server for a run in ``cwd``, highest precedence first; raises ConfigError on a malformed entry."""
    found: list[ServerSpec] = [s for value in flags for s in from_flag(value)]
    unapproved: list[ServerSpec] = []
    if not strict:
        local, user = read_json(scope_file("local", cwd)), read_json(scope_file("user", cwd))
        found += parse_servers(local, str(scope_file("local", cwd)), "local")
        project = scope_file("project", cwd)
        for spec in parse_servers(read_json(project), str(project), "project"):
            verdict = project_verdict(spec.name, (local, user))
            if verdict is True:
                found.append(spec)
            elif verdict is None:
                unapproved.append(spec)
        found += parse_servers(user, str(scope_file("user", cwd)), "user")
    servers: dict[str, ServerSpec] = {}
    for spec in found:
        servers.setdefault(spec.name, spec)  # the first definition of a name wins
    return Configured(list(servers.values()), [s for s in unapproved if s.name not in servers])


def project_verdict(name: str, settings: tuple[JsonObject, ...]) -> bool | None:
    """Approved (True), refused (False) or not decided (None), by the person's own settings."""
    if any(name in _names(data, "disabledMcpjsonServers") for data in settings):
        return False
    if any(
        data.get("enableAllProjectMcpServers") is True or name in _names(data, "enabledMcpjsonServers")
        for data in settings
    ):
        return True
    return None


def _names(data: JsonObject, key: str) -> list[str]:
    names = data.get(key, [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f'"{key}" in the settings must be a list of server names, like ["calc"]')
    return names


def remember_approval(cwd: Path, name: str, approved: bool) -> None:
    """An interactive answer, kept in the local settings so the person is asked once per server."""
    path = scope_file("local", cwd)
    data = read_json(path)
    key = "enabledMcpjsonServers" if approved else "disabledMcpjsonServers"
    data[key] = sorted({*_names(data, key), name})
    write_json(path, data)


def write_json(path: Path, data: JsonObject) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)  # never a half-written settings file

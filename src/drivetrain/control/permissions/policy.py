"""The decision: may this tool use run now (allow), only after a person says yes (ask), or never (deny)?

Order, for every tool: deny rules, then the tool's own settings (always asked before a
write, in every mode), then ask rules, then allow rules, then the mode. Read/Grep/Glob are
reads (``file_path`` / ``path``, default the working directory), Write/Edit are edits
(``file_path``), Bash is parsed into its parts and every part must be allowed on its own;
WebFetch matches ``domain:`` rules; any other tool falls to bare-name rules, then the mode.
Every decision says why: the rule and the file it came from, or the mode.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlparse

from drivetrain.home import drivetrain_home
from drivetrain.host.paths import Resolved, confining_root, expand, is_within, real_roots, resolve
from drivetrain.jsontypes import JsonValue
from drivetrain.tools.base import ToolContext

from .bash_policy import decide_bash
from .decision import Decision, _by_rule
from .rules import Behavior, Rule, parse_rule, split_tool_list
from .search import SearchFilter
from .settings import MODES, PermissionMode, Settings, check_mode, load_settings

READ_TOOLS = ("Read", "Grep", "Glob")
EDIT_TOOLS = ("Edit", "Write")
DELEGATING_TOOLS = ("Task",)  # a subagent's own calls pass this same policy, so starting one asks nothing


@dataclass
class Policy:
    mode: PermissionMode = "default"
    rules: list[Rule] = field(default_factory=list)
    additional_dirs: list[Path] = field(default_factory=list)
    interactive: bool = True  # False: every "ask" becomes "deny" (nobody is there to answer)
    home: Path = field(default_factory=Path.home)
    drivetrain_home: Path | None = None  # the tool's own folder (default ~/.drivetrain)
    project_dir: Path | None = None  # where /path patterns of rules added later start (default: cwd)

    def __post_init__(self) -> None:
        check_mode(self.mode, "the permission mode")
        self.home = Path(self.home)
        self.drivetrain_home = Path(self.drivetrain_home or self.home / ".drivetrain")

    @classmethod
    def load(
        cls,
        project_dir: str | os.PathLike[str],
        *,
        mode: str | None = None,
        allowed_tools: Iterable[str] = (),
        disallowed_tools: Iterable[str] = (),
        add_dirs: Iterable[str | os.PathLike[str]] = (),
        interactive: bool = True,
        env: Mapping[str, str] | None = None,
        home: str | os.PathLike[str] | None = None,
        settings: Settings | None = None,
    ) -> Policy:
        """Settings files (or ``settings`` already loaded from them) + ``--allowedTools``/``--disallowedTools``/
        ``--add-dir``/``--permission-mode``."""
        project = Path(project_dir).absolute()
        home_p = Path(home) if home is not None else Path.home()
        settings = settings if settings is not None else load_settings(project, env, home_p)
        rules = [
            parse_rule(t, "deny", "--disallowedTools", project, home_p)
            for t in split_tool_list(disallowed_tools, "--disallowedTools")
        ]
        rules += [
            parse_rule(t, "allow", "--allowedTools", project, home_p)
            for t in split_tool_list(allowed_tools, "--allowedTools")
        ]
        dirs = [Path(os.path.normpath(project / str(expand(d, project, home_p)))) for d in add_dirs]
        return cls(
            mode=check_mode(mode, "--permission-mode") if mode else settings.default_mode or "default",
            rules=rules + settings.rules,
            additional_dirs=dirs + settings.additional_dirs,
            interactive=interactive,
            home=home_p,
            drivetrain_home=drivetrain_home(env, home_p),
            project_dir=project,
        )

    # ------------------------------------------------------------ entry points

    def allow_rule(self, text: str, source: str = "session") -> Rule:
        """Add an allow rule while running ("yes, and don't ask again"). Raises RuleError if malformed."""
        rule = parse_rule(text, "allow", source, Path(self.project_dir or Path.cwd()), self.home)
        if rule not in self.rules:
            self.rules.append(rule)
        return rule

    def decide(self, tool_name: str, input: JsonValue, ctx: ToolContext | str | os.PathLike[str]) -> Decision:
        """``input`` is the tool's input (an object; anything else is taken as empty); ``ctx`` is the call's
        ToolContext or the working directory itself."""
        cwd = Path(ctx if isinstance(ctx, (str, os.PathLike)) else ctx.cwd).absolute()
        # this session's saved tool outputs (context.py)
        outputs = ctx.outputs if isinstance(ctx, ToolContext) else None
        d = self._decide(tool_name, input if isinstance(input, Mapping) else {}, cwd, outputs)
        if d.behavior == "ask" and not self.interactive:
            d = replace(d, behavior="deny", reason=d.reason + "; not interactive, so nobody can approve it")
        return d

    def roots(self, cwd: Path) -> list[Path]:
        """The workspace: the working directory and the additional directories, symlinks resolved."""
        return real_roots([cwd, *self.additional_dirs])

    def search_filter(self, cwd: str | os.PathLike[str]) -> SearchFilter:
        """For Grep and Glob: the files a search of an allowed folder must skip (Read deny rules…)."""
        return SearchFilter(self, Path(cwd).absolute())

    def _decide(self, tool: str, input: Mapping[str, JsonValue], cwd: Path, outputs: Path | None = None) -> Decision:
        if tool in READ_TOOLS:
            key = "file_path" if tool == "Read" else "path"
            # an empty optional path means the default, as the tools take it
            path = input.get(key) or (None if tool == "Read" else ".")
            if tool == "Glob" and isinstance(path, str) and isinstance(input.get("pattern"), str):
                prefix = glob_literal_prefix(input["pattern"])  # Glob searches from path/prefix
                path = os.path.join(path, prefix) if prefix else path
            return self._file(tool, path, cwd, edit=False, outputs=outputs)
        if tool in EDIT_TOOLS:
            return self._file(tool, input.get("file_path"), cwd, edit=True)
        if tool == "Bash":
            command = input.get("command")
            if not isinstance(command, str):
                return Decision("deny", "Bash needs a command string", "builtin")
            return self._bash(command, cwd)
        return self._other(tool, input)

    # ------------------------------------------------------------ rules

    def _first(self, behavior: Behavior, tool: str, pred: Callable[[Rule], bool] = lambda r: True) -> Rule | None:
        return next((r for r in self.rules if r.behavior == behavior and r.covers_tool(tool) and pred(r)), None)

    def _file_rule(self, behavior: Behavior, tool: str, res: Resolved, cwd: Path) -> Rule | None:
        # deny and ask match what the path says or where it leads; allow only where it leads
        views = res.views() if behavior != "allow" else (res.real,)
        return self._first(
            behavior,
            tool,
            lambda r: (
                (r.pattern is None and r.bare)
                or (r.pattern is not None and any(r.pattern.matches(v, cwd) for v in views))
            ),
        )

    def protected(self, res: Resolved) -> bool:
        """The tool's own settings: .drivetrain/settings*.json anywhere, and everything in ~/.drivetrain."""
        for v in res.views():
            if v.name == ".drivetrain" or (self.drivetrain_home is not None and is_within(v, self.drivetrain_home)):
                return True
            if v.parent.name == ".drivetrain" and re.fullmatch(r"settings.*\.json", v.name):
                return True
        return False

    # ------------------------------------------------------------ file tools

    def _file(self, tool: str, raw: JsonValue, cwd: Path, edit: bool, outputs: Path | None = None) -> Decision:
        if not isinstance(raw, str) or not raw:
            return Decision("deny", f"{tool} needs a path string", "builtin")
        res = resolve(raw, cwd, self.home)
        mode_src = f"mode:{self.mode}"
        if rule := self._file_rule("deny", tool, res, cwd):
            return _by_rule("deny", rule, f"{tool} of {res.lexical} is denied")
        if edit and self.protected(res):
            return Decision("ask", f"{res.lexical} is drivetrain's own settings: always asked", "builtin")
        if rule := self._file_rule("ask", tool, res, cwd):
            return _by_rule("ask", rule, f"{tool} of {res.lexical} needs approval")
        if not edit and outputs is not None and is_within(res.real, os.path.realpath(outputs)):
            return Decision("allow", f"{res.real} is a saved output of this session", "builtin")
        if edit and self.mode == "plan":
            return Decision("deny", "plan mode is read-only: no edits", mode_src)
        if rule := self._file_rule("allow", tool, res, cwd):
            return _by_rule("allow", rule, f"{tool} of {res.real} is allowed")
        if self.mode == "bypassPermissions":
            return Decision("allow", "bypassPermissions allows everything", mode_src)
        if confining_root(res.real, self.roots(cwd)) is None:
            return Decision("ask", f"{res.real} is outside the workspace", mode_src)
        if not edit:
            return Decision("allow", "reads inside the workspace are allowed", mode_src)
        if self.mode == "acceptEdits":
            if ".git" in res.real.parts or ".git" in res.lexical.parts:
                return Decision("ask", "files under .git can make git run programs: always asked", "builtin")
            return Decision("allow", "acceptEdits allows edits inside the workspace", mode_src)
        return Decision("ask", f"{self.mode} mode asks before editing files", mode_src)

    def _other(self, tool: str, input: Mapping[str, JsonValue]) -> Decision:
        host = ""
        if tool == "WebFetch":
            try:
                host = (urlparse(str(input.get("url", ""))).hostname or "").lower()
            except ValueError:
                host = ""

        def hit(r: Rule) -> bool:
            if r.domain is None:
                return r.bare
            d = r.domain
            return bool(host) and (host == d or (d.startswith("*.") and host.endswith(d[1:])))

        for behavior in ("deny", "ask", "allow"):
            if rule := self._first(behavior, tool, hit):
                return _by_rule(behavior, rule, f"{tool}{f' of {host}' if host else ''}: {behavior}")
        if tool in DELEGATING_TOOLS:
            return Decision(
                "allow", f"{tool} needs no permission: each call it makes is decided by this policy", "builtin"
            )
        if self.mode == "bypassPermissions":
            return Decision("allow", "bypassPermissions allows everything", f"mode:{self.mode}")
        return Decision("ask", f"no rule allows {tool}; {self.mode} mode asks", f"mode:{self.mode}")

    # ------------------------------------------------------------ shell

    def _bash(self, command: str, cwd: Path) -> Decision:
        return decide_bash(self, command, cwd)


def glob_literal_prefix(pattern: str) -> str:
    """The folders a Glob pattern starts with (``../../etc/*`` → ``../../etc``), as the Glob tool
    walks from there (keep in step with ``drivetrain.tools.glob.split_literal_prefix``)."""
    parts = pattern.removeprefix("./").split("/")
    i = 0
    while i < len(parts) - 1 and not re.search(r"[*?\[{]", parts[i]):
        i += 1
    prefix = "/".join(parts[:i])
    return prefix or ("/" if pattern.removeprefix("./").startswith("/") else "")


__all__ = ["MODES", "Decision", "Policy"]

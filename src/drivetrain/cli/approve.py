"""Asking a person in the terminal: show the call (a diff for edits), then Claude Code's numbered choices: allow
once, for the session, always for this project (a rule in .drivetrain/settings.local.json), or deny with what the
model should do instead.

"Don't ask again" is offered only with a rule that is checked first: it parses as the settings loader will
parse it, and the policy with it added allows this very call. A rule that did not parse, once saved, would
make every later start in the project fail.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

from drivetrain.control.approval import Allow, Deny, PendingCall, Verdict
from drivetrain.control.permissions import Policy, RuleError, SettingsError, load_settings_file
from drivetrain.jsontypes import JsonValue
from drivetrain.messages import ToolUseBlock

Choice = Literal["once", "session", "project", "no"]  # what the person allows: once, for the session, always, not


def suggest_rule(call: PendingCall, cwd: Path) -> str:
    """The narrowest rule, in Claude Code's syntax, that would allow this exact call again."""
    inp = call.input
    if call.name == "Bash":
        return f"Bash({inp.get('command', '').strip()})"
    if call.name in ("Edit", "Write", "Read") and inp.get("file_path"):
        path = Path(os.path.expanduser(inp["file_path"]))
        path = path if path.is_absolute() else cwd / path
        try:
            shown = path.resolve().relative_to(cwd.resolve()).as_posix()
        except ValueError:
            shown = "/" + path.resolve().as_posix()  # `//abs` in rule syntax: an absolute path
        return f"{'Edit' if call.name != 'Read' else 'Read'}({shown})"
    return call.name


def checked_rule(call: PendingCall, policy: Policy, cwd: Path) -> tuple[str | None, str]:
    """The rule to offer for "don't ask again", or None and why no rule can allow exactly this call."""
    rule = suggest_rule(call, cwd)
    trial = dataclasses.replace(policy, rules=list(policy.rules))  # the real policy learns it only if chosen
    try:
        trial.allow_rule(rule, source="check")
    except RuleError as e:
        return None, f"{rule} is not a valid rule ({e.why})"
    decision = trial.decide(call.name, call.input, cwd)
    if decision.behavior != "allow":
        return None, f"{rule} would not allow it ({decision.reason})"
    return rule, ""


def describe(call: PendingCall, cwd: Path) -> str:
    """What the person sees: the tool, why it asks, and its input (a unified diff for file edits)."""
    head = f"{call.name} wants to run" + (f" ({call.reason})" if call.reason else "") + ":"
    inp = call.input
    if call.name == "Bash":
        body = f"  $ {inp.get('command', '')}"
    elif call.name in ("Edit", "Write") and "file_path" in inp:
        body = file_diff(call, cwd)
    else:
        body = "  " + json.dumps(inp, indent=2, ensure_ascii=False).replace("\n", "\n  ")
    return f"{head}\n{body}"


def file_diff(call: PendingCall | ToolUseBlock, cwd: Path) -> str:
    """The unified diff a Write or Edit would make to its file as the file is now."""
    inp = call.input
    path = Path(os.path.expanduser(inp["file_path"]))
    path = path if path.is_absolute() else cwd / path
    try:
        before = path.read_text()
    except (OSError, UnicodeDecodeError):
        before = ""
    if call.name == "Write":
        after = inp.get("content", "")
    else:
        old, new = inp.get("old_string", ""), inp.get("new_string", "")
        after = before.replace(old, new) if inp.get("replace_all") else before.replace(old, new, 1)
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        f"a/{inp['file_path']}",
        f"b/{inp['file_path']}",
    )
    return "".join(lines).rstrip("\n") or f"  (no change to {inp['file_path']})"


def add_project_rule(cwd: Path, rule: str, home: Path) -> Path:
    """Add an allow rule to .drivetrain/settings.local.json, keeping everything else in it.

    The new file is read back with the settings loader before it atomically replaces the old one, so a file
    the next start could not load is never left behind. Raises SettingsError or OSError saying why.
    """

    def add(allow: list[JsonValue]) -> None:
        if rule not in allow:
            allow.append(rule)

    return _edit_allow_rules(cwd, home, add)


def remove_project_rule(cwd: Path, rule: str, home: Path) -> Path:
    """Take an allow rule out of .drivetrain/settings.local.json (``/permissions``), as safely as it was added."""
    return _edit_allow_rules(cwd, home, lambda allow: allow.remove(rule) if rule in allow else None)


def _edit_allow_rules(cwd: Path, home: Path, change: Callable[[list[JsonValue]], None]) -> Path:
    path = local_settings(cwd)
    current = load_settings_file(path, home)  # the file as it is now must load too: it is kept whole
    data = current.raw[0][1] if current is not None else {}
    change(data.setdefault("permissions", {}).setdefault("allow", []))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".settings.", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        if current is not None:
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        try:
            load_settings_file(Path(tmp), home)
        except SettingsError as e:
            raise SettingsError(f"the file would not load ({e})") from None
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def local_settings(cwd: Path) -> Path:
    return cwd / ".drivetrain" / "settings.local.json"


class ApprovalUI(Protocol):
    """Where the approver asks: the terminal's screen and keys (``cli/terminal.py``), or a test's script."""

    def show_call(self, call: PendingCall, text: str) -> None: ...

    def say(self, text: str) -> None: ...

    async def choose(self, options: list[str]) -> int | None: ...  # the index picked; None: Esc

    async def ask(self, question: str) -> str: ...


def options(rule: str | None) -> list[tuple[Choice, str]]:
    """(what it does, label) in Claude Code's order; without a checked rule only yes and no."""
    yes: list[tuple[Choice, str]] = [("once", "Yes")]
    if rule is not None:
        yes += [
            ("session", f"Yes, and don't ask again for {rule} this session"),
            ("project", f"Yes, and always allow {rule} in this project"),
        ]
    return yes + [("no", "No, and tell the model what to do differently")]


class TerminalApprover:
    """An Approver that asks a person; a rule they choose is learnt by ``policy`` at once."""

    def __init__(self, ui: ApprovalUI, cwd: Path, policy: Policy):
        self.ui, self.cwd, self.policy = ui, cwd, policy
        self.session_rules: set[str] = set()

    async def __call__(self, call: PendingCall) -> Verdict:
        rule, why_not = checked_rule(call, self.policy, self.cwd)
        if rule is not None and rule in self.session_rules:
            return Allow(by=f"person (session rule {rule})")
        self.ui.show_call(call, describe(call, self.cwd))
        if rule is None:
            self.ui.say(f"(No rule can allow exactly this call again: {why_not}. It can be allowed once.)")
        choices = options(rule)
        picked = await self.ui.choose([label for _, label in choices])
        what: Choice = choices[picked][0] if picked is not None else "no"
        if what == "once":
            return Allow(by="person")
        if what == "session" and rule is not None:  # offered only with a rule
            self.session_rules.add(rule)
            self.policy.allow_rule(rule)
            return Allow(by=f"person (for this session: {rule})")
        if what == "project" and rule is not None:
            return self._add_to_project(rule)
        # Esc is "no" with nothing to add; the digit or Enter asks what to do instead
        message = "" if picked is None else (await self.ui.ask("What should the model do instead? ")).strip()
        return Deny(
            f"The user denied this {call.name} call." + (f" They said: {message}" if message else ""), by="person"
        )

    def _add_to_project(self, rule: str) -> Verdict:
        try:
            path = add_project_rule(self.cwd, rule, self.policy.home)
        except Exception as e:  # a full disk, a read-only folder, a settings file edited meanwhile
            self.ui.say(f"Could not add {rule} to {local_settings(self.cwd)}: {e}. Allowed once instead.")
            return Allow(by="person")
        self.policy.allow_rule(rule, source=str(path))
        self.ui.say(f"Added {rule} to {path}")
        return Allow(by=f"person (project rule {rule})")

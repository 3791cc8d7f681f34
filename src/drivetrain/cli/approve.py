"""Asking a person in the terminal: show the call (a diff for edits), then allow once, for the session,
always for this project (a rule in .drivetrain/settings.local.json), or deny with a message for the model.

"Don't ask again" is offered only with a rule that is checked first: it parses as the settings loader will
parse it, and the policy with it added allows this very call. A rule that did not parse, once saved, would
make every later start in the project fail.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import shlex
import stat
import tempfile
from pathlib import Path
from typing import Awaitable, Callable

from drivetrain.control.approval import Allow, Deny, PendingCall, Verdict
from drivetrain.control.permissions import Policy, RuleError, SettingsError, load_settings_file

Ask = Callable[[str], Awaitable[str]]  # shows a question, returns the answer line
Say = Callable[[str], None]

CHOICES = "[y] allow once  [s] allow for this session  [p] always allow in this project  [n] deny"
ONCE_CHOICES = "[y] allow once  [n] deny"


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
        body = _diff(call, cwd)
    else:
        body = "  " + json.dumps(inp, indent=2, ensure_ascii=False).replace("\n", "\n  ")
    return f"{head}\n{body}"


def _diff(call: PendingCall, cwd: Path) -> str:
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
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 f"a/{inp['file_path']}", f"b/{inp['file_path']}")
    return "".join(lines).rstrip("\n") or f"  (no change to {inp['file_path']})"


def add_project_rule(cwd: Path, rule: str, home: Path) -> Path:
    """Add an allow rule to .drivetrain/settings.local.json, keeping everything else in it.

    The new file is read back with the settings loader before it atomically replaces the old one, so a file
    the next start could not load is never left behind. Raises SettingsError or OSError saying why.
    """
    path = cwd / ".drivetrain" / "settings.local.json"
    current = load_settings_file(path, home)  # the file as it is now must load too: it is kept whole
    data = current.raw[0][1] if current is not None else {}
    allow = data.setdefault("permissions", {}).setdefault("allow", [])
    if rule not in allow:
        allow.append(rule)
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


class TerminalApprover:
    """An Approver that asks a person; a rule they choose is learnt by ``policy`` at once."""

    def __init__(self, ask: Ask, say: Say, cwd: Path, policy: Policy):
        self.ask, self.say, self.cwd, self.policy = ask, say, cwd, policy
        self.session_rules: set[str] = set()

    async def __call__(self, call: PendingCall) -> Verdict:
        rule, why_not = checked_rule(call, self.policy, self.cwd)
        if rule is not None and rule in self.session_rules:
            return Allow(by=f"person (session rule {rule})")
        self.say(describe(call, self.cwd))
        if rule is None:
            self.say(f"(No rule can allow exactly this call again: {why_not}. It can be allowed once.)")
        choices, letters = (CHOICES, "y, s, p or n") if rule is not None else (ONCE_CHOICES, "y or n")
        while True:
            answer = (await self.ask(f"{choices}\n> ")).strip().lower()
            if answer in ("y", "yes"):
                return Allow(by="person")
            if answer == "s" and rule is not None:
                self.session_rules.add(rule)
                self.policy.allow_rule(rule)
                return Allow(by=f"person (for this session: {rule})")
            if answer == "p" and rule is not None:
                return self._add_to_project(rule)
            if answer in ("n", "no"):
                message = (await self.ask("Message for the model (optional): ")).strip()
                return Deny(f"The user denied this {call.name} call." + (f" They said: {message}" if message else ""),
                            by="person")
            self.say(f"Please answer {letters} (got {shlex.quote(answer)}).")

    def _add_to_project(self, rule: str) -> Verdict:
        try:
            path = add_project_rule(self.cwd, rule, self.policy.home)
        except Exception as e:  # a full disk, a read-only folder, a settings file edited meanwhile
            self.say(f"Could not add {rule} to {self.cwd / '.drivetrain' / 'settings.local.json'}: {e}. "
                     "Allowed once instead.")
            return Allow(by="person")
        self.policy.allow_rule(rule, source=str(path))
        self.say(f"Added {rule} to {path}")
        return Allow(by=f"person (project rule {rule})")

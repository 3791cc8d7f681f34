"""Asking a person in the terminal: show the call (a diff for edits), then allow once, for the session,
always for this project (a rule in .drivetrain/settings.local.json), or deny with a message for the model."""

from __future__ import annotations

import difflib
import json
import os
import shlex
import tempfile
from pathlib import Path
from typing import Awaitable, Callable

from drivetrain.approval import Allow, Deny, PendingCall, Verdict

Ask = Callable[[str], Awaitable[str]]  # shows a question, returns the answer line
Say = Callable[[str], None]

CHOICES = "[y] allow once  [s] allow for this session  [p] always allow in this project  [n] deny"


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


def add_project_rule(cwd: Path, rule: str) -> Path:
    """Append an allow rule to .drivetrain/settings.local.json, keeping everything else in it."""
    path = cwd / ".drivetrain" / "settings.local.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    allow = data.setdefault("permissions", {}).setdefault("allow", [])
    if rule not in allow:
        allow.append(rule)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".settings.")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path


class TerminalApprover:
    """An Approver that asks a person; remembers session allowances by suggested rule."""

    def __init__(self, ask: Ask, say: Say, cwd: Path, on_rule: Callable[[str], None] | None = None):
        self.ask, self.say, self.cwd = ask, say, cwd
        self.session_rules: set[str] = set()
        self.on_rule = on_rule  # lets the policy learn a rule at once (session or project)

    async def __call__(self, call: PendingCall) -> Verdict:
        rule = suggest_rule(call, self.cwd)
        if rule in self.session_rules:
            return Allow(by=f"person (session rule {rule})")
        self.say(describe(call, self.cwd))
        while True:
            answer = (await self.ask(f"{CHOICES}\n> ")).strip().lower()
            if answer in ("y", "yes"):
                return Allow(by="person")
            if answer == "s":
                self.session_rules.add(rule)
                self._learn(rule)
                return Allow(by=f"person (for this session: {rule})")
            if answer == "p":
                path = add_project_rule(self.cwd, rule)
                self._learn(rule)
                self.say(f"Added {rule} to {path}")
                return Allow(by=f"person (project rule {rule})")
            if answer in ("n", "no"):
                message = (await self.ask("Message for the model (optional): ")).strip()
                return Deny(f"The user denied this {call.name} call." + (f" They said: {message}" if message else ""),
                            by="person")
            self.say(f"Please answer y, s, p or n (got {shlex.quote(answer)}).")

    def _learn(self, rule: str) -> None:
        if self.on_rule is not None:
            self.on_rule(rule)

"""Checks before stopping: what the harness can verify about any task, sent back as the only feedback.

A small model often says it is done when it is not: the file the task names was never written, a
placeholder was written instead of a value, the answer and the file disagree, "the tests pass" was
said without running them, or a file was rewritten from memory without being read. None of this
needs to know the task: the prompt, the workspace before and after, and the calls made are enough.

``WorkChecks`` watches through plain hooks (UserPromptSubmit to see the task, PostToolUse to watch
the calls) and checks as a node of the loop entered at ``end_turn`` (``nodes.py``), the mechanism a
user's own ``Verify`` node uses: it sends the model back at most ``limit`` times, then lets the run end.
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from drivetrain.home import drivetrain_home
from drivetrain.hooks import Hooks
from drivetrain.nodes import NodeContext, NodeResult, Proceed, SendBack
from drivetrain.procs import run_command

SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".drivetrain", ".mypy_cache", ".pytest_cache"}
MAX_FILES = 2000
MAX_BYTES = 256 * 1024
TEST_RUN_TIMEOUT_S = 120

_FILE_NAME = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:txt|md|json|csv|tsv|py|ya?ml|toml|ini|cfg|log|sh|js|ts|"
                        r"html|css|xml|sql|rs|go|c|h|cpp|java|rb|out))\b")
_WRITE_VERBS = re.compile(r"\b(write|save|create|put|store|output|record|generate|produce|make|add)\b", re.I)
_TEST_WORDS = re.compile(r"\btests?\b|\bfailing\b", re.I)
_TEST_CMD = re.compile(r"\b(pytest|unittest|npm (run )?test|make (check|test)|go test|cargo test|tox)\b|"
                       r"(^|[\s/])(test_\w+|\w+_test)\.py\b")
_PLACEHOLDER = re.compile(
    r"<(?:your[ _-]?)?[a-z][a-z _-]{0,24}>|\{(?:total|count|result|value|answer|sum|number|n)\}|"
    r"\$\{?(?:total|count|result|value|answer|sum)\}?|\b(?:PLACEHOLDER|TBD|FIXME: fill)\b|\[insert [^\]]*\]", re.I)
_HTML_TAGS = {"html", "head", "body", "div", "span", "p", "a", "b", "i", "ul", "li", "ol", "br", "hr", "table",
              "tr", "td", "th", "title", "script", "style", "pre", "code", "h1", "h2", "h3", "em", "strong"}
_ASKS_NUMBER = re.compile(r"\bhow (many|much|long|big)\b|\b(count|total|sum|number of)\b.*\b(report|tell|say|answer)", re.I)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]*\d)")


def snapshot(cwd: Path, known: dict[str, tuple[tuple[int, int], bytes]] | None = None) -> dict[str, bytes]:
    """Relative path -> content, for the workspace's ordinary files (bounded in count and size).

    ``known`` (updated in place) remembers each file's size and mtime with its content, so a file that has
    not changed since the last snapshot is not read again: this runs after every tool call.
    """
    known = {} if known is None else known
    out: dict[str, bytes] = {}
    own = os.path.realpath(drivetrain_home())  # drivetrain's own files (session logs …) are not the work
    for root, dirs, files in os.walk(cwd):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and os.path.realpath(os.path.join(root, d)) != own)
        for name in sorted(files):
            path = Path(root, name)
            rel = str(path.relative_to(cwd))
            try:
                st = path.lstat()
                if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
                    continue
                key = (st.st_size, st.st_mtime_ns)
                if rel not in known or known[rel][0] != key:
                    known[rel] = (key, path.read_bytes())
                out[rel] = known[rel][1]
            except OSError:
                continue
            if len(out) >= MAX_FILES:
                return out
    return out


@dataclass
class _Call:
    text: str  # the call's input and its output, as the model saw them
    command: str = ""
    failed: bool = False


@dataclass
class WorkChecks:
    cwd: Path
    limit: int = 2  # … at most this many times a run (after that, the stop is let through)
    prompt: str = ""
    before: dict[str, bytes] = field(default_factory=dict)
    calls: list[_Call] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # existing files changed before their content was shown
    _last: dict[str, bytes] = field(default_factory=dict)
    _known: dict = field(default_factory=dict)  # snapshot's cache of unchanged files

    name: str = "WorkChecks"  # a node of the loop (nodes.py), entered when the model wants to stop …
    at: str = "end_turn"

    def install(self, hooks: Hooks) -> WorkChecks:
        """Watch the prompt and every tool call (hooks); the checks themselves run as a node: add it to
        ``Agent.nodes``."""
        hooks.add("UserPromptSubmit", self.on_prompt)
        hooks.add("PostToolUse", self.on_tool)
        return self

    # -- hooks

    async def on_prompt(self, payload: dict) -> None:
        self.prompt = payload.get("prompt", "")
        self.before = await asyncio.to_thread(snapshot, self.cwd, self._known)
        self._last = dict(self.before)

    async def on_tool(self, payload: dict) -> None:
        tool_input = payload.get("tool_input") or {}
        response = payload.get("tool_response") or {}
        now = await asyncio.to_thread(snapshot, self.cwd, self._known)
        for path, content in now.items():
            if path in self.before and self._last.get(path) != content and not self._shown(path):
                if path not in self.unread:
                    self.unread.append(path)
        self._last = now
        command = str(tool_input.get("command", "")) if payload.get("tool_name") == "Bash" else ""
        self.calls.append(_Call(f"{tool_input}\n{response.get('content', '')}", command,
                                bool(response.get("is_error"))))

    async def run(self, ctx: NodeContext) -> NodeResult:
        """The node: what fails of the checks goes back to the model (at most ``limit`` times a run)."""
        failures = await self.failures(ctx.answer)
        if not failures:
            return Proceed()
        return SendBack("Before you finish, fix this:\n" + "\n".join(f"- {f}" for f in failures))

    # -- the checks

    async def failures(self, answer: str) -> list[str]:
        now = await asyncio.to_thread(snapshot, self.cwd, self._known)
        changed = {p: c for p, c in now.items() if self.before.get(p) != c}
        out = self._missing_outputs(now) + self._placeholders(changed) + self._mismatch(changed, answer)
        out += self._more_than_the_value(changed, answer)
        if _ASKS_NUMBER.search(self.prompt) and not _NUMBER.search(answer):
            out.append("The task asks for a number, and your answer gives none. Answer with the number.")
        unread, self.unread = [p for p in self.unread if p in changed], []  # said once per file
        out += [f"You changed {p} without looking at its content first, so what you wrote may be invented. "
                f"Show it (cat -n {p}), check your change against what was there, and fix it if needed."
                for p in unread]
        out += await self._tests()
        return out

    def _missing_outputs(self, now: dict[str, bytes]) -> list[str]:
        if not _WRITE_VERBS.search(self.prompt):
            return []
        out = []
        for name in dict.fromkeys(m.group(1) for m in _FILE_NAME.finditer(self.prompt)):
            if self.before.get(name):
                continue  # it had content before the run: an input, or a file to change
            if name not in now and not (self.cwd / name).exists():
                out.append(f"The task asks for {name}, but it does not exist. Create it with the right content.")
            elif name in now and not now[name].strip():
                out.append(f"{name} is empty. Write the result the task asks for into it.")
        return out

    @staticmethod
    def _placeholders(changed: dict[str, bytes]) -> list[str]:
        out = []
        for path, content in changed.items():
            text = content.decode("utf-8", "replace")
            for m in _PLACEHOLDER.finditer(text):
                inner = m.group(0).strip("<>/ ").lower()
                if m.group(0).startswith("<") and (inner in _HTML_TAGS or not path.endswith((".txt", ".md", ".csv"))
                                                   and len(text) > 200):
                    continue
                out.append(f"{path} contains the placeholder {m.group(0)!r} instead of a real value. Compute the "
                           "value with a command and write it.")
                break
        return out

    @staticmethod
    def _mismatch(changed: dict[str, bytes], answer: str) -> list[str]:
        said = set(_NUMBER.findall(answer))
        out = []
        for path, content in changed.items():
            value = content.decode("utf-8", "replace").strip()
            if not _NUMBER.fullmatch(value) or value in said:
                continue
            if said:
                out.append(f"You wrote {value} to {path}, but your answer says {', '.join(sorted(said))}. Find out "
                           "which is right (recompute it), fix the file or the answer, then answer again.")
            else:
                out.append(f"Your answer does not give the value you wrote to {path} ({value}). Check it, then "
                           "answer with the value.")
        return out

    def _more_than_the_value(self, changed: dict[str, bytes], answer: str) -> list[str]:
        """The answer reports one value, and the output file the task named holds it among other text
        (typically a command's whole output, such as wc's per-file lines and its total)."""
        said = _NUMBER.findall(answer)
        if len(set(said)) != 1:
            return []
        value = said[0]
        out = []
        for name in dict.fromkeys(m.group(1) for m in _FILE_NAME.finditer(self.prompt)):
            text = changed.get(name, b"").decode("utf-8", "replace").strip()
            if self.before.get(name) or not text or text == value or value not in _NUMBER.findall(text):
                continue
            if len(text.splitlines()) <= 20:
                out.append(f"You reported {value}, but {name} holds more than that value:\n{text}\nIf the task "
                           f"asks for the value, write only the value to {name}.")
        return out

    async def _tests(self) -> list[str]:
        ran = [c for c in self.calls if c.command and _TEST_CMD.search(c.command)]
        if not ran:
            if _TEST_WORDS.search(self.prompt) and self._has_tests():
                return ["The task is about tests, but you have not run them. Run them and make sure they pass."]
            return []
        command = ran[-1].command
        code, output = await _run(command, self.cwd)
        if code == 0:
            return []
        return [f"The test command `{command}` fails now (exit code {code}):\n{output[-1500:]}"]

    def _has_tests(self) -> bool:
        return any(re.search(r"(^|/)(test_\w+|\w+_test)\.py$|(^|/)tests?/", p) for p in self.before)

    def _shown(self, path: str) -> bool:
        """Was the file's original content (some line of it) in an earlier call or result?"""
        lines = [ln.strip() for ln in self.before[path].decode("utf-8", "replace").splitlines() if len(ln.strip()) >= 6]
        if not lines:
            return any(Path(path).name in c.text for c in self.calls)
        return any(ln in c.text for c in self.calls for ln in lines[:50])


async def _run(command: str, cwd: Path) -> tuple[int, str]:
    return await run_command(command, cwd, TEST_RUN_TIMEOUT_S)  # like a Bash call: no credentials, ends with us

"""Checks before stopping: what the harness can verify about any task, sent back as the only feedback.

A small model often says it is done when it is not: the file the task names was never written, a
placeholder was written instead of a value, the answer and the file disagree, "the tests pass" was
said without running them, a file was rewritten from memory without being read, nothing changed
although the task asked for a fix, a rename was left half done, the path:line cited is not where the
name is, or the script the task says fails still fails. None of this needs to know the particular
task, nor the language it is written in: the files and commands the task names (ASCII in any language), the
literals it quotes, the workspace before and after, and the calls made and what they printed are enough. A check
that cannot tell what the task wants does nothing rather than guess from the task's wording.

``WorkChecks`` watches through plain hooks (UserPromptSubmit to see the task, PostToolUse to watch
the calls) and checks as a node of the loop entered at ``end_turn`` (``loop/nodes.py``), the mechanism a
user's own ``Verify`` node uses: it sends the model back to work at most ``work_limit`` times (and for a
better answer at most ``answer_limit`` times more), then lets the run end.
"""

from __future__ import annotations

import asyncio
import difflib
import os
import re
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Literal, Protocol

from drivetrain.control.hooks import Hooks
from drivetrain.host.procs import run_command
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.nodes import DraftContext, NodeResult, Proceed, SendBack
from drivetrain.loop.state import NodePoint
from drivetrain.messages import Message
from drivetrain.small.answer import disagreements, facts
from drivetrain.small.changes import describe, snapshot
from drivetrain.small.codeact import HELD_ALREADY, denied_programs, file_block, to_block
from drivetrain.small.effects import dangling_imports, left_behind, named_calls, shown_not_written
from drivetrain.small.fragments import TOP_DEF, definitions
from drivetrain.small.prompts import EXTENSIONS, FILE_NAME
from drivetrain.small.readings import (
    _INTERPRETERS,
    _RUNNERS,
    _TEST_RUNNER,
    _arithmetic,
    _bare_test_file,
    _fence,
    _header_hint,
    _indent_hint,
    _looks_runnable,
    _no_tests_run,
    _normal,
    _not_citations,
    _parse_error,
    _printed_by,
    _program,
    _rewritten,
    _set_apart,
    _shows,
    _the_part,
)

Runner = Callable[[str], Awaitable[tuple[int | None, str]]]  # a command -> (exit code or None if not run, output)
SendBackKind = Literal["work", "answer"]  # back to work, or only to write the answer again
TEST_RUN_TIMEOUT_S = 120
CORPUS_FILE_BYTES = 64 * 1024  # of each file, for what the answer may report

_TEST_CMD = re.compile(_RUNNERS + r"|(^|[\s/])(test_\w+|\w+_test)\.py\b")  # a runner, or a test file
_PLACEHOLDER = re.compile(
    r"<(?:your[ _-]?)?[a-z][a-z _-]{0,24}>|\{(?:total|count|result|value|answer|sum|number|n)\}|"
    r"\$\{?(?:total|count|result|value|answer|sum)\}?|\b(?:PLACEHOLDER|TBD|FIXME: fill)\b|\[insert [^\]]*\]|"
    r"\b(?:your|add|insert|put) (?:own )?(?:implementation|code|logic) here\b",
    re.I,
)  # a stub: "# Your implementation here"
_STUB = re.compile(r"\b(?:your|add|insert|put) (?:own )?(?:implementation|code|logic) here\b", re.I)
_CODE_FILES = (".py", ".js", ".ts", ".sh", ".rb", ".go", ".rs", ".c", ".h", ".cpp", ".java", ".html", ".css", ".sql")
_HTML_TAGS = {
    "html",
    "head",
    "body",
    "div",
    "span",
    "p",
    "a",
    "b",
    "i",
    "ul",
    "li",
    "ol",
    "br",
    "hr",
    "table",
    "tr",
    "td",
    "th",
    "title",
    "script",
    "style",
    "pre",
    "code",
    "h1",
    "h2",
    "h3",
    "em",
    "strong",
}
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]*\d)")
# A command the task names: in backticks, or a script run by its interpreter, or a test runner.
# Unquoted, a runner takes only options and paths: in "The pytest suite fails" the command is `pytest`, not the prose.
_NAMED_CMD = re.compile(
    r"`([^`\n]+)`|(?<![A-Za-z0-9_])((?:python3?|bash|sh|node)\s+[A-Za-z0-9_./-]+\.(?:py|sh|js)"
    r"(?:[ \t]+(?:-{1,2}[A-Za-z0-9_=-]+|-?\d+(?:\.\d+)?|[A-Za-z0-9_./-]+\.[A-Za-z0-9]+))*"
    r"|pytest(?:[ \t]+(?:-{1,2}[A-Za-z0-9_=-]+|[A-Za-z0-9_.-]*(?:/|\.py\b|::)[A-Za-z0-9_./:-]*))*(?![\w-]|\.\w))"
)
_CITATION = re.compile(
    rf"(?<![A-Za-z0-9_/.-])((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_-]+\.{EXTENSIONS}):(\d+)(?![A-Za-z0-9_])"
)
# The format token a task uses for a list of places, in any language ("以 path:line 格式")
_ASKS_CITATION = re.compile(r"(?<![A-Za-z])(?:path|file(?:name)?):line(?![A-Za-z])", re.I)
_IN_PLACE = re.compile(r"\bsed\s+(-\w*\s+)*-\w*i|\bperl\s+-\w*i")  # sed -i, perl -pi
# A command the answer quotes: what it says the command showed is checked against what the command printed
_QUOTED_CMD = re.compile(r"`([^`\n]{2,200})`")
# Literals the task quotes, in any language's quotation marks: an exact output it expects
_QUOTED = re.compile(
    r'"([^"\n]{1,200})"|“([^”\n]{1,200})”|「([^」\n]{1,200})」|『([^』\n]{1,200})』|'
    r"(?<![A-Za-z0-9])'([^'\n]{1,200})'(?![A-Za-z0-9])|`([^`\n]{1,200})`"
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"[A-Za-z0-9_.:/-]+")  # one name, number or path: no line of output by itself
_SCRIPT_RUN = re.compile(r"(?:python3?|node|bash|sh)\s+[\w./-]+(?:\s+[\w./=-]+)*")
_DEFINED = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_]\w*)", re.M)
_IDENT = re.compile(
    r"`([A-Za-z_][\w.]*)`|(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*_[A-Za-z0-9_]*|[a-z]+[A-Z][A-Za-z0-9_]*)(?![A-Za-z0-9_])"
)


class Seen(Protocol):
    """What the checks read of the node's context: the answer and the history (all a test's stand-in has); only
    the loop's own context (``loop.nodes.DraftContext``) also runs the commands the checks make."""

    @property
    def answer(self) -> str: ...

    @property
    def history(self) -> list[Message]: ...


@dataclass
class _Call:
    text: str  # the call's input and its output, as the model saw them
    command: str = ""
    failed: bool = False
    output: str = ""  # a Bash call's output
    unchanged: str = ""  # the file an Edit would have changed, had the file not already held the new text


# (the names in the task, the names defined before the run, the run's (old, new) name swaps): WorkChecks._swaps
Swaps = tuple[set[str], set[str], dict[tuple[str, str], None]]


def _renamed(renames: list[tuple[str, str, list[str], str]]) -> list[str]:
    """A rename the run began is finished: the old name is gone from the workspace's text files."""
    return [
        f"You renamed {old} to {new}, but {old} still occurs at {', '.join(places[:8])}"
        f"{' …' * (len(places) > 8)}. This changes every one of them:\n{_fence(fix)}\nThen check again."
        for old, new, places, fix in renames
    ]


def _line_count(output: str) -> int:
    return len([ln for ln in output.splitlines() if ln.strip()])


@dataclass
class WorkChecks:
    cwd: Path
    work_limit: int = 2  # sent back to work at most this many times a run (after that, the stop is let through) …
    answer_limit: int = 2  # … and asked at most this many times more for an answer that only lacks what is done
    prompt: str = ""
    before: dict[str, bytes] = field(default_factory=dict)
    calls: list[_Call] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # existing files rewritten before their content was shown
    _last: dict[str, bytes] = field(default_factory=dict)
    # snapshot's cache of unchanged files
    _known: dict[str, tuple[tuple[int, int], bytes]] = field(default_factory=dict)
    report_changes: bool = True  # add to each call's result what it changed (changes.py)
    file_blocks: bool = False  # the model writes files as code blocks naming them (hints take that form)
    agree: bool = True  # the answer must agree with the run (small/answer.py), else it is written again from the facts
    shown: str = ""  # what was shown with the task (the files it names): counts as seen for ``_shown``

    _sent: dict[SendBackKind, int] = field(default_factory=dict)  # send-backs this prompt
    _writers: dict[str, str] = field(default_factory=dict)  # file -> the input of the call that last changed it
    _said: str = ""  # what the harness said of the last call (an Edit's or Write's report, its note): not an answer
    _sent_back: list[str] = field(default_factory=list)  # what the checks sent back this prompt: not an answer either

    name: str = "WorkChecks"  # a node of the loop (nodes.py), entered when the model wants to stop …
    at: NodePoint = "end_turn"

    @property
    def limit(self) -> int:  # … at most this many times a run
        return self.work_limit + self.answer_limit

    def install(self, hooks: Hooks) -> WorkChecks:
        """Watch the prompt and every tool call (hooks); the checks themselves run as a node: add it to
        ``Agent.nodes``."""
        hooks.add("UserPromptSubmit", self.on_prompt)
        hooks.add("PostToolUse", self.on_tool)
        return self

    # -- hooks

    async def on_prompt(self, payload: JsonObject) -> None:
        """A new prompt is a new task: what the checks saw of the last one is left behind."""
        self.prompt, self._sent, self.calls, self.unread = payload.get("prompt", ""), {}, [], []
        self._writers, self._said, self._sent_back = {}, "", []
        self.before = await asyncio.to_thread(snapshot, self.cwd, self._known)
        self._last = dict(self.before)

    async def on_tool(self, payload: JsonObject) -> JsonObject | None:
        tool_input = payload.get("tool_input") or {}
        response = payload.get("tool_response") or {}
        now = await asyncio.to_thread(snapshot, self.cwd, self._known)
        command = str(tool_input.get("command", "")) if payload.get("tool_name") == "Bash" else ""
        in_place = bool(_IN_PLACE.search(command))  # a substitution changes what is there: nothing is invented
        for path, content in now.items():
            if (
                not in_place
                and path in self.before
                and self._last.get(path) != content
                and _rewritten(self._last.get(path), content)
                and not self._shown(path)
            ):
                if path not in self.unread:
                    self.unread.append(path)
        last, self._last = self._last, now
        self._writers.update({p: str(tool_input) for p, c in now.items() if last.get(p) != c})
        output = str(response.get("content", ""))
        held = payload.get("tool_name") == "Edit" and response.get("is_error") and output.startswith(HELD_ALREADY)
        self.calls.append(
            _Call(
                f"{tool_input}\n{output}",
                command,
                bool(response.get("is_error")),
                output if command else "",
                str(tool_input.get("file_path", "")) if held else "",
            )
        )
        note = describe(last, now, command) if self.report_changes else ""
        note += "".join(
            f"\n{p} no longer parses: {error}."
            for p, c in now.items()
            if last.get(p) != c and (error := _parse_error(p, c)) and not (p in last and _parse_error(p, last[p]))
        )
        hint = (
            (_header_hint(command, output, now) or _indent_hint(output, self.cwd))
            if response.get("is_error")
            else _no_tests_run(command, now)
        )
        note = "\n\n".join(n for n in (note, hint) if n)
        own = output if payload.get("tool_name") in ("Edit", "Write") else ""  # the harness's tools' own words
        self._said = "\n\n".join(n for n in (own, note) if n)
        return {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": note}} if note else None

    async def run(self, ctx: Seen) -> NodeResult:
        """The node: what fails of the checks goes back to the model, to work at most ``work_limit`` times, and for
        an answer that only lacks what the work holds (the value it wrote, say) at most ``answer_limit`` times more:
        that costs one turn without tools, and an answer that contradicts the work is worse than no answer."""
        # a denied call never reaches PostToolUse: what the policy denied is read from the history
        work, answer = await self.sorted_failures(
            ctx.answer, frozenset(denied_programs(ctx.history)), ctx.run if isinstance(ctx, DraftContext) else None
        )
        kind: SendBackKind | None = (
            "work"
            if work and self._sent.get("work", 0) < self.work_limit
            else "answer"
            if answer and self._sent.get("answer", 0) < self.answer_limit
            else None
        )
        if kind is None:
            return Proceed()
        self._sent[kind] = self._sent.get(kind, 0) + 1
        failures = work + answer if kind == "work" else answer
        text = "Before you finish, fix this:\n" + "\n".join(f"- {f}" for f in failures)
        if kind == "answer" and self.agree and (done := facts(self.before, self._last, self.calls)):
            text += "\n\n" + done  # the answer is written again with what the run did in front of it
        self._sent_back.append(text)
        return SendBack(text, answer_only=kind == "answer")

    # -- the checks

    async def failures(self, answer: str, denied: frozenset[str] = frozenset(), run: Runner | None = None) -> list[str]:
        work, answer_only = await self.sorted_failures(answer, denied, run)
        return work + answer_only

    async def sorted_failures(
        self,
        answer: str,
        denied: frozenset[str] = frozenset(),
        run: Runner | None = None,
    ) -> tuple[list[str], list[str]]:
        """(what needs more work, what needs only a better answer), from one look at the workspace. ``denied``:
        programs the policy denied; ``run``: how a command is run again (in a run, the harness's own Bash call:
        ``NodeContext.run``)."""
        run = run or self._run_here
        now = await asyncio.to_thread(snapshot, self.cwd, self._known)
        changed = {p: c for p, c in now.items() if self.before.get(p) != c}
        out = self._missing_outputs(now, answer) + self._placeholders(changed) + self._mismatch(changed, answer)
        out += self._citation_lists(changed) + self._missing_paths(changed) + self._uncomputed(changed)
        unread, self.unread = [p for p in self.unread if p in changed], []  # said once per file
        out += [
            f"You rewrote {p} without looking at its content first, so what you wrote may be invented. "
            f"Show it (cat -n {p}), check your change against what was there, and fix it if needed."
            for p in unread
        ]
        swaps = self._swaps(changed)  # one reading of the run's renames, for three checks
        renames = self._renames(now, swaps)
        out += self._broken(changed) + _renamed(renames) + self._misnamed(now, swaps)
        out += self._citations(now, answer) + self._strays(now)
        named = [m.group(1) for m in FILE_NAME.finditer(self.prompt)]
        out += left_behind(named, self.before, now) + (
            shown_not_written(named, self.before, now, self.calls) if not changed else []
        )
        out += await self._dangling(run, now)
        out += (
            await self._tests(run, changed) + await self._named_commands(run, changed) + await self._exact_output(run)
        )
        written = named_calls(self.prompt, now)  # the calls the task writes out, read once for both checks
        unrun = self._unrun_calls(written)
        out += [await self._run_call(run, text, command) for text, command in unrun]
        out += self._claimed(answer, denied) + _arithmetic(answer)
        if not changed:  # the run's own calls meant a change, and none was made
            out += [
                f"Your change to {p} wrote what it already held, and this run changed no file. If the task asks "
                f"for a change, write the lines of {p} as they must be (not as they are now)."
                for p in dict.fromkeys(c.unchanged for c in self.calls if c.unchanged)
            ]
        answer_only = self._unreported(changed, answer)
        if not changed:  # after a change, what a call printed before it may no longer be what it returns
            answer_only += self._unanswered_calls([w for w in written if w not in unrun], answer)  # not said twice
        if self.agree and not out and not answer_only:  # once the work holds, the answer must agree with it
            said = [self._said, *self._sent_back]  # an answer copying any of it is no answer
            answer_only = disagreements(self.prompt, answer, self._corpus(now), bool(changed), now, said)
        return out, answer_only

    def _corpus(self, now: dict[str, bytes]) -> str:
        """Everything the run saw: the task, what was shown with it, each call and its result, the files as they are."""
        files = (f"{p}\n{c[:CORPUS_FILE_BYTES].decode('utf-8', 'replace')}" for p, c in now.items())
        return "\n".join([self.prompt, self.shown, *(c.text for c in self.calls), *files])

    async def _run_here(self, command: str) -> tuple[int | None, str]:
        """Outside a run (a check called by itself), a command runs as a plain child process of the workspace."""
        return await run_command(command, self.cwd, TEST_RUN_TIMEOUT_S)

    def _outputs(self) -> list[str]:
        """The files the task names that had no content before the run, and that no file of the workspace is known
        by (``utils.py`` for ``src/utils.py``): what it asks to write. One with content is an input, or a file to
        change."""
        names = dict.fromkeys(m.group(1) for m in FILE_NAME.finditer(self.prompt))
        known = {PurePath(p).name for p in self.before}
        return [n for n in names if not self.before.get(n) and (n in self.before or PurePath(n).name not in known)]

    def _unwritten(self, name: str, now: dict[str, bytes]) -> bool:
        """An output the task asks for is missing, or empty."""
        return not now[name].strip() if name in now else not (self.cwd / name).exists()

    def _missing_outputs(self, now: dict[str, bytes], answer: str) -> list[str]:
        out = []
        for name in self._outputs():
            if not self._unwritten(name, now):
                continue
            what = (
                f"{name} is empty. Write the result the task asks for into it."
                if name in now
                else f"The task asks for {name}, but it does not exist. Create it with the right content."
            )
            out.append(what + self._hint(name, answer))
        return out

    def _hint(self, name: str, answer: str) -> str:
        """For a missing output: the block that writes it, when the model's code or answer already holds it."""
        known = self._content(name, answer)
        if not known:
            fix = self._cite_into(name)
            return f" Your search found them; this writes them as path:line:\n{_fence(fix)}" if fix else ""
        why, content = known
        if self.file_blocks:  # the form the model is made to write a missing file in (models/codeact.py)
            return f" {why}\n{file_block(name, content)}"
        lines = content.splitlines()
        command = f"echo {lines[0]} > {name}" if len(lines) == 1 else f"printf '%s\\n' {' '.join(lines)} > {name}"
        return f" {why}\n{_fence(command)}"

    def _content(self, name: str, answer: str) -> tuple[str, str] | None:
        """(the hint's words, content) of a missing output the model's code or answer already holds."""
        return self._from_script(name) or self._from_new_file(name) or self._from_answer(name, answer)

    def _from_script(self, name: str) -> tuple[str, str] | None:
        """A .py file asked for, and the model's last python block only defined functions (it ran, and wrote
        nothing): the same code, in the file (a block naming it; see models/fragments.py)."""
        last = next((c for c in reversed(self.calls) if c.command), None)
        if not self.file_blocks or not name.endswith(".py") or last is None or last.failed:
            return None
        lang, code = to_block(last.command)
        if lang != "python" or not definitions(code):
            return None
        return "Your last python block only defined it, and wrote no file. This writes it:", code

    def _from_new_file(self, name: str) -> tuple[str, str] | None:
        """A .py file asked for, and the run created one other .py file that only defines functions or classes:
        the code went to the wrong file."""
        if not self.file_blocks or not name.endswith(".py"):
            return None
        made = [
            (p, c.decode("utf-8", "replace"))
            for p, c in self._last.items()
            if p not in self.before and p != name and p.endswith(".py")
        ]
        if len(made) != 1 or not definitions(made[0][1]):
            return None
        return f"You wrote the code to {made[0][0]}, not {name}. This writes it:", made[0][1].rstrip("\n")

    def _from_answer(self, name: str, answer: str) -> tuple[str, str] | None:
        """When the answer already holds what the file should (the path:line list asked for, or the one
        number): a small model that answered often does not connect the two."""
        cited = [f"{p}:{n}" for p, n in dict.fromkeys(_CITATION.findall(answer))]
        if cited and _ASKS_CITATION.search(self.prompt):
            return "If your answer is right, this writes it:", "\n".join(cited)
        # the value, not the parts it came from: "18 (app.py:9, config.py:3, util.py:6)"
        numbers = set(_NUMBER.findall(_CITATION.sub(" ", answer)))
        if len(numbers) == 1 and self._computed(value := numbers.pop()):
            return "If your answer is right, this writes it:", value
        return None

    def _computed(self, value: str) -> bool:
        """A command the model ran printed the value, or as many lines (the files ``find`` listed): its answer's
        number is a result, not a guess."""
        return any(
            _shows(value, c.output) or value == str(_line_count(c.output))
            for c in self.calls
            if c.command and not c.failed
        )

    def _uncomputed(self, changed: dict[str, bytes]) -> list[str]:
        """A number the run wrote alone in a file is one a command printed, or the count of the lines one printed,
        or one the task gives: else it was made up (asked how many ERROR lines, the 1.5B saw six and wrote 4)."""
        out = []
        for path, value in self._written_values(changed).items():
            if not _shows(value, self._writers.get(path, "")) or self._computed(value) or _shows(value, self.prompt):
                continue  # a command wrote it (wc -l < a.py > total.txt), or a command printed it
            last = next((c for c in reversed(self.calls) if c.command and not c.failed and c.output.strip()), None)
            seen = f" (`{last.command.strip()}` printed {_line_count(last.output)} lines)" if last else ""
            out.append(
                f"You wrote {value} to {path}, but no command of this run printed {value}, or {value} "
                f"lines{seen}. Compute it with a command that prints the number, then write that."
            )
        return out

    def _placeholders(self, changed: dict[str, bytes]) -> list[str]:
        out = []
        for path, content in changed.items():
            text, was = content.decode("utf-8", "replace"), self.before.get(path, b"").decode("utf-8", "replace")
            # in code, {n} and <x> are code (an f-string, a comparison); only a stub is a placeholder there
            for m in (_STUB if path.endswith(_CODE_FILES) else _PLACEHOLDER).finditer(text):
                inner = m.group(0).strip("<>/ ").lower()
                if m.group(0) in was or (
                    m.group(0).startswith("<")
                    and (inner in _HTML_TAGS or (not path.endswith((".txt", ".md", ".csv")) and len(text) > 200))
                ):
                    continue  # (one the file had before is not the run's)
                if inner.endswith(" here"):
                    out.append(
                        f"{path} contains the stub {m.group(0)!r} instead of real code. Write the code, or "
                        "remove what you added if the task does not need it."
                    )
                else:
                    out.append(
                        f"{path} contains the placeholder {m.group(0)!r} instead of a real value. Compute the "
                        "value with a command and write it."
                    )
                break
        return out

    def _missing_paths(self, changed: dict[str, bytes]) -> list[str]:
        """A file the run wrote that holds just a path (one line, with a ``/`` or a file name's extension) names a
        file that exists: in the folder, or, if absolute, on the machine."""
        out = []
        for path, content in changed.items():
            value = content.decode("utf-8", "replace").strip()
            if not (
                re.fullmatch(r"[\w./-]{1,200}", value)
                and re.search(r"[A-Za-z]", value)
                and (FILE_NAME.fullmatch(PurePath(value).name) or "/" in value)
            ):
                continue  # not a path: a value, a URL, a list, a date
            if not ((self.cwd / value).exists() if not value.startswith("/") else Path(value).exists()):
                near = [p for p in self._last if PurePath(p).name == PurePath(value).name]
                out.append(
                    f"{path} holds {value!r}, but there is no such file"
                    + (
                        f" (the folder has {', '.join(near[:3])}: a path from the folder has no leading /)"
                        if near
                        else ""
                    )
                    + ". Write the path of a file that exists."
                )
        return out

    @staticmethod
    def _written_values(changed: dict[str, bytes]) -> dict[str, str]:
        """Files the run wrote that hold just one number."""
        values = {p: c.decode("utf-8", "replace").strip() for p, c in changed.items()}
        return {p: v for p, v in values.items() if _NUMBER.fullmatch(v)}

    def _mismatch(self, changed: dict[str, bytes], answer: str) -> list[str]:
        said = set(_NUMBER.findall(answer))
        if len(said) > 3:
            return []  # an answer quoting output (dates, line numbers): which number is its result is not known
        return [
            f"You wrote {value} to {path}, but your answer says {', '.join(sorted(said))}. Find out which is "
            "right (recompute it), fix the file or the answer, then answer again."
            for path, value in self._written_values(changed).items()
            if said and value not in said
        ]

    def _unreported(self, changed: dict[str, bytes], answer: str) -> list[str]:
        if _NUMBER.search(answer):
            return []
        return [
            f"Your answer does not give the value you wrote to {path} ({value}). Answer again, with the value."
            for path, value in self._written_values(changed).items()
        ]

    def _citation_lists(self, changed: dict[str, bytes]) -> list[str]:
        """The task wants a list of path:line in a file: each line holds just that (grep -n prints more)."""
        if not _ASKS_CITATION.search(self.prompt):
            return []
        out = []
        for name in self._outputs():
            extra = _not_citations(changed.get(name, b""))
            if extra:
                fix = self._cite_into(name) or f"grep -rn PATTERN . | cut -d: -f1,2 > {name}"
                out.append(
                    f"Each line of {name} should be just path:line (like a.py:4), but it has {extra!r}. "
                    f"Write only path:line on each line, e.g.:\n{_fence(fix)}"
                )
        return out

    def _cite_into(self, name: str) -> str:
        """The command writing the path:line list a task asks for into ``name``: the model's own last search, cut
        to path:line ("" when it made none)."""
        search = self._search()
        if not search or not _ASKS_CITATION.search(self.prompt):
            return ""
        # the list is not searched while it is written (grep -rn . read the half-written TODO_LIST.txt)
        return f"grep --exclude={PurePath(name).name} {search.removeprefix('grep ')} | cut -d: -f1,2 > {name}"

    def _search(self) -> str:
        """The model's own last ``grep -n`` over files whose output was path:line:text ("" when none)."""
        for call in reversed(self.calls):
            c = call.command.strip()
            if (
                re.match(r"grep\s(.*\s)?-\w*n", c)
                and not re.search(r"[|>;&\n]", c)
                and re.search(r"\n(\./)?[\w./-]+:\d+:", call.text)
            ):
                return c
        return ""

    def _renames(self, now: dict[str, bytes], swaps: Swaps) -> list[tuple[str, str, list[str], str]]:
        """Renames the run began and left half done, read from the run, not the task's words: in a file the run
        changed, a line where one name replaced another that the workspace defined (``def``/``class``) before the
        run, one of the two named in the task (the old one, when the task names any name defined before), and the old
        name still occurs as a word. (old, new, where it is left as path:line, the command that replaces it there)"""
        asked, defined, pairs = swaps
        out = []
        for old, new in pairs:
            if old not in defined or not ({old, new} & asked):
                continue
            if old not in asked and (asked & defined) - {new}:
                continue  # the task names the defined name it means, and not this one: not the rename it asks for
            word = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(old)}(?![A-Za-z0-9_])")
            places = [
                f"{path}:{i}"
                for path, content in now.items()
                for i, line in enumerate(content.decode("utf-8", "replace").splitlines(), 1)
                if word.search(line)
            ]
            if places:
                files = " ".join(dict.fromkeys(p.rsplit(":", 1)[0] for p in places))
                out.append((old, new, places, f"perl -pi -e 's/\\b{old}\\b/{new}/g' {files}"))
        return out

    def _swaps(self, changed: dict[str, bytes]) -> Swaps:
        """(the names in the task, the names the workspace defined before the run, the (old, new) name swaps of the
        run's changed lines: a line where one name replaced another)."""
        asked = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", FILE_NAME.sub(" ", self.prompt)))  # main.py: not main
        defined = {n for c in self.before.values() for n in _DEFINED.findall(c.decode("utf-8", "replace"))}
        pairs: dict[tuple[str, str], None] = {}
        for path, content in changed.items():
            if path not in self.before:
                continue
            old_lines = self.before[path].decode("utf-8", "replace").splitlines()
            new_lines = content.decode("utf-8", "replace").splitlines()
            for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes():
                for a, b in zip(old_lines[i1:i2], new_lines[j1:j2]) if op == "replace" else ():
                    ta, tb = _WORD.findall(a), _WORD.findall(b)
                    swaps = {(x, y) for x, y in zip(ta, tb) if x != y} if len(ta) == len(tb) else set()
                    if len(swaps) == 1:
                        pairs[swaps.pop()] = None
        return asked, defined, pairs

    def _misnamed(self, now: dict[str, bytes], swaps: Swaps) -> list[str]:
        """The run gave a name the task names to a defined name the task does not name, while the defined name the
        task names is still there: it renamed another function than the one the task means."""
        asked, defined, pairs = swaps
        meant = sorted((asked & defined) - {new for _, new in pairs})
        text = "\n".join(c.decode("utf-8", "replace") for c in now.values())
        left = [m for m in meant if re.search(rf"(?<!\w){re.escape(m)}(?!\w)", text)]
        out = []
        for new in dict.fromkeys(new for old, new in pairs if new in asked and old in defined and old not in asked):
            olds = [old for old, n in pairs if n == new and old in defined and old not in asked]
            if left:
                out.append(
                    f"You renamed {' and '.join(olds)} to {new}, but the task does not name "
                    f"{'them' if len(olds) > 1 else 'it'}: it names {', '.join(left)}, which is still there. "
                    f"Put {' and '.join(olds)} back as {'they were' if len(olds) > 1 else 'it was'}, and make "
                    f"the change the task asks for to {', '.join(left)}."
                )
        return out

    def _broken(self, changed: dict[str, bytes]) -> list[str]:
        """A .py, .json or .toml file the run changed no longer parses (and did before): a dropped comma, a
        bad indent. The error says where."""
        out = []
        for path, content in changed.items():
            error = _parse_error(path, content)
            if error and not (path in self.before and _parse_error(path, self.before[path])):
                out.append(
                    f"{path} no longer parses after your change: {error}. Show it (cat -n {path}) and fix that line."
                )
        return out

    def _strays(self, now: dict[str, bytes]) -> list[str]:
        """A new .py file the task does not name defines what an existing file defines: the change went to a new
        file instead of that one."""
        out = []
        for path in now.keys() - self.before.keys():
            if not path.endswith(".py") or path in self.prompt:
                continue
            names = set(TOP_DEF.findall(now[path].decode("utf-8", "replace")))
            for old, content in self.before.items():
                common = (
                    sorted(names & set(TOP_DEF.findall(content.decode("utf-8", "replace"))))
                    if old.endswith(".py") and old in now
                    else []
                )
                if common:
                    how = f" (a block naming {old})" if self.file_blocks else ""
                    out.append(
                        f"You created {path}, but {', '.join(common)} is defined in {old}: the task is "
                        f"about that file. Make the change in {old}{how}, and remove {path}."
                    )
                    break
        return out

    def _citations(self, now: dict[str, bytes], answer: str) -> list[str]:
        """Each path:line the answer cites exists and mentions what the task asks about."""
        cited = list(dict.fromkeys(_CITATION.findall(answer)))
        if not cited:
            if _ASKS_CITATION.search(self.prompt) and not self._outputs():  # asked for in that very format
                return [
                    "The task asks for path:line, and your answer cites none. Find it (grep -n) and answer "
                    "as path:line."
                ]
            return []
        texts = {p: c.decode("utf-8", "replace") for p, c in now.items()}
        subjects = [
            w
            for m in _IDENT.finditer(self.prompt)
            if (w := m.group(1) or m.group(2)) and any(w in t for t in texts.values())
        ]
        out = []
        for path, number in cited[:5]:
            key = os.path.normpath(path)  # ./storage.py is storage.py (grep -rn . prints it so)
            lines = texts[key].splitlines() if key in texts else None
            n = int(number)
            if lines is None:
                out.append(f"You cite {path}:{n}, but there is no file {path}. Find the right place with grep -n.")
            elif not 1 <= n <= len(lines):
                out.append(f"You cite {path}:{n}, but {path} has {len(lines)} lines. Find the right line with grep -n.")
            elif subjects and not any(s in lines[n - 1] for s in subjects):
                out.append(
                    f"You cite {path}:{n}, but that line is {lines[n - 1].strip()!r}, which does not mention "
                    f"{' or '.join(subjects[:3])}. Find the right line with grep -n."
                )
        return out

    async def _tests(self, run: Runner, changed: dict[str, bytes]) -> list[str]:
        """Once the run has changed files, or when their last run failed, the tests the model ran pass when run
        again; tests the task names (a test file or runner: ASCII in any language) were run at all. A file of test
        functions run by a bare interpreter ran no test."""
        ran = [c for c in self.calls if c.command and self._runs_tests(c.command)]
        if not ran:
            if _TEST_CMD.search(self.prompt) and self._has_tests():
                named = next((f" (`{c}`)" for c in self._named() if _TEST_CMD.search(c)), "")
                return [f"The task is about tests, but you have not run them. Run them{named} and make sure they pass."]
            return []
        command = _the_part(ran[-1].command, _TEST_CMD)
        if not changed and not ran[-1].failed:
            return []
        code, output = await run(command)
        if code is None or code == 0:  # did not run (denied, say): nothing is known
            return []
        if not changed:  # a run that changed nothing may have been asked only why they fail
            return [
                f"The test command `{command}` still fails (exit code {code}), and this run changed no file:\n"
                f"{output[-1500:]}\nIf the task is to make the tests pass, change the code they test (not the "
                "tests) and run them again. If it only asks about them, answer that they fail, and why."
            ]
        return [f"The test command `{command}` fails now (exit code {code}):\n{output[-1500:]}"]

    def _runs_tests(self, command: str) -> bool:
        """A test runner, or an interpreter running a test file that runs its own tests (one of bare pytest-style
        functions runs none); a command that only shows a test file runs nothing."""
        if _TEST_RUNNER.search(command):
            return True
        run_by = any(
            _program(part).split()[0] in _INTERPRETERS and _TEST_CMD.search(part)
            for part in re.split(r"&&|\|\|?|;|\n", command)
            if part.strip()
        )
        return run_by and not _bare_test_file(command, self._last)  # `cat -n tests/test_x.py` ran no test

    def _claimed(self, answer: str, denied: frozenset[str]) -> list[str]:
        """A command the answer quotes (its check of the result, in any language) is one the model ran, and a
        number the answer gives right after it is one the command printed: a claimed check that never ran, or
        printed something else, hides a wrong value."""
        ran = {
            _program(part)
            for c in self.calls
            if c.command and not c.failed
            for part in re.split(r"&&|\|\|?|;|\n", c.command)
        }
        out = []
        for m in _QUOTED_CMD.finditer(answer):
            command = m.group(1).strip()
            program = _program(command)
            if not program or not (shutil.which(program.split()[0]) or _looks_runnable(command, self.cwd)):
                continue  # `total.txt`, `fetch_account`: not a command
            if program in denied:  # a denied program cannot have shown anything
                out.append(
                    f"Your answer says what `{command}` showed, but {program} is denied here and never ran. "
                    "Do not claim it: check the value another way (print the value of each part), then answer "
                    "with what that showed."
                )
                continue
            same = [c for c in self.calls if c.command and not c.failed and _normal(command) in _normal(c.command)]
            if program not in ran and not same:
                out.append(
                    f"Your answer says what `{command}` showed, but you did not run {program} (or it failed). "
                    "Check the result with a command that runs, then answer with what it showed."
                )
                continue
            said = _NUMBER.findall(re.split(r"[.;。；\n)）]\s*", answer[m.end() : m.end() + 80])[0])
            last = same[-1] if same else None
            if last is not None and said and not any(_shows(v, last.output) for v in said):
                shown = last.output.strip()[:300]
                out.append(
                    f"Your answer says `{command}` gave {', '.join(dict.fromkeys(said))}, but it printed "
                    + (f"{shown!r}" if shown else "nothing")
                    + ". Answer with what it printed, or run what "
                    "shows the value."
                )
        return out

    def _named(self) -> list[str]:
        """The commands the task names: in backticks, or a workspace script run by its interpreter, or a runner."""
        named = dict.fromkeys((m.group(1) or m.group(2)).strip() for m in _NAMED_CMD.finditer(self.prompt))
        return [c for c in named if _looks_runnable(c, self.cwd)]

    def _made(self, text: str) -> _Call | None:
        """The last command of the run that made the call ``text`` (any quotes) and printed something."""
        same: Callable[[str], str] = lambda t: _normal(t).replace('\\"', '"').replace('"', "'")
        return next(
            (
                c
                for c in reversed(self.calls)
                if c.command
                and not c.failed
                and c.output.strip()
                and not c.output.startswith("(no output)")
                and same(text) in same(c.command)
            ),
            None,
        )

    def _unrun_calls(self, written: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The calls the task writes out of functions the workspace defines that no command of the run made and
        printed something (what a function returns is known by running it, not by reading it; a script that calls
        it and prints nothing shows nothing)."""
        return [(text, command) for text, command in written if self._made(text) is None]

    def _unanswered_calls(self, written: list[tuple[str, str]], answer: str) -> list[str]:
        """A call the task writes out that the run made, and that printed one short line: the answer gives that
        value (shown 'gmaam' by the harness, the 1.5B answered 'agm'). Only asked of a run that changed no file: after
        a change, what the call printed before it may no longer be what it returns."""
        out = []
        for text, _ in written:
            call = self._made(text)
            lines = [ln.strip() for ln in call.output.splitlines() if ln.strip()] if call else []
            value = lines[0] if len(lines) == 1 else ""  # more lines: which is the call's value is not known
            bare = value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"" else value
            if call is not None and 0 < len(bare) <= 80 and bare not in answer:
                out.append(
                    f"`{call.command.strip()}` printed {value} for {text}, but your answer does not give "
                    f"{bare}. Answer with what it printed."
                )
        return out

    async def _run_call(self, run: Runner, text: str, command: str) -> str:
        """A call the task writes out that the run never made is made by the harness (its own Bash call: the policy
        decides, the audit log records), and what it printed goes back: told to run it, the model often did not."""
        code, output = await run(command)
        if code is None:  # not run (denied, or waiting for a person): the model is asked to
            return f"The task writes out the call {text}. Run it to see what it returns:\n{_fence(command)}"
        self.calls.append(_Call(f"{command}\n{output}", command, code != 0, output))  # the run has seen it now
        printed = output.strip()[-1500:] or "(nothing)"
        return (
            f"The task writes out the call {text}, and no command of yours made it. The harness ran it:\n"
            f"{_fence(command)}\nExit code {code}; it printed:\n{printed}\nUse what it printed."
        )

    def _ran(self, command: str) -> bool:
        return any(_normal(command) in _normal(c.command) for c in self.calls if c.command)

    async def _named_commands(self, run: Runner, changed: dict[str, bytes]) -> list[str]:
        """Once the run has changed files, a command the task names must work: run again if the model ran it,
        asked for if it never did. (A run that changed nothing may have been asked why it fails.)"""
        out = []
        for command in self._named() if changed else ():
            if _TEST_CMD.search(command):
                continue  # a test run (``_tests`` checks those)
            if not self._ran(command):
                out.append(f"The task names `{command}`, and you have not run it. Run it to check that it works.")
                continue
            code, output = await run(command)
            if code is not None and code != 0:
                words = command.split()
                fix = f"Change {words[1]} itself (the file)" if words[0] in _INTERPRETERS else "Fix the cause"
                hint = _indent_hint(output, self.cwd)
                out.append(
                    f"`{command}` fails now (exit code {code}):\n{output[-1500:]}\n{hint + chr(10) * bool(hint)}"
                    f"{fix} so that it works, then run `{command}` again."
                )
        return out

    async def _exact_output(self, run: Runner) -> list[str]:
        """The task quotes a line a command must print (in quotation marks of any language, or set on a line of its
        own after a colon): the command is run again — the one the task names, else the script the model last ran,
        else the script the task names — and an output line like the quoted one but not exactly it goes back with
        both (an extra ``!``, a missing space)."""
        quoted = [q for m in _QUOTED.finditer(self.prompt) for q in m.groups() if q and q.strip()] + _set_apart(
            self.prompt
        )
        quoted = [q for q in dict.fromkeys(quoted) if not _looks_runnable(q, self.cwd) and not FILE_NAME.fullmatch(q)]
        # The script the task names is run unasked only for a literal that reads as a line of output: a name or
        # a number in quotes (`load`, `8080`) is what a rename or a setting names, not what a script must print.
        output_like = any(not _TOKEN.fullmatch(q) for q in quoted)
        commands = (
            [c for c in self._named() if not _TEST_CMD.search(c) and self._ran(c)]
            or [c.command for c in self.calls[-1:] if _SCRIPT_RUN.fullmatch(c.command.strip())]
            or [
                f"python3 {n}"
                for m in FILE_NAME.finditer(self.prompt)
                if (n := m.group(1)).endswith(".py") and b"print(" in self.before.get(n, b"") and output_like
            ]
        )
        out = []
        for command in list(dict.fromkeys(commands))[:2] if quoted else ():  # a script the task names twice: once
            code, output = await run(command.strip())
            if code is None:
                continue
            lines = output.splitlines()
            for q in quoted:
                if q in lines:
                    continue
                near = max(lines, key=lambda ln: difflib.SequenceMatcher(None, q, ln).ratio(), default=None)
                if near is not None and difflib.SequenceMatcher(None, q, near).ratio() >= 0.6:
                    printed = near if len(lines) == 1 else "\n".join(lines[:10])
                    where = _printed_by(command, near, self._last)
                    out.append(
                        f"The task asks for exactly {q!r}, but `{command.strip()}` prints {printed!r}.{where} "
                        "Make it print exactly that line, then run it again."
                    )
        return out

    async def _dangling(self, run: Runner, now: dict[str, bytes]) -> list[str]:
        """Imports the run wrote that cannot work (effects.py); a module this interpreter lacks is looked for with
        the workspace's ``python3`` before it is called missing."""
        out = []
        for text, module in dangling_imports(self.before, now):
            if module:
                code, printed = await run(
                    f"python3 -c 'import importlib.util as u; print(u.find_spec(\"{module.split('.')[0]}\") is None)'"
                )
                if code != 0 or printed.strip() != "True":
                    continue  # it is there (or cannot tell): not said
            out.append(text)
        return out

    def _has_tests(self) -> bool:
        return any(re.search(r"(^|/)(test_\w+|\w+_test)\.py$|(^|/)tests?/", p) for p in self.before)

    def _shown(self, path: str) -> bool:
        """Was the file's original content (some line of it) in an earlier call or result?"""
        lines = [ln.strip() for ln in self.before[path].decode("utf-8", "replace").splitlines() if len(ln.strip()) >= 6]
        if not lines:
            return any(Path(path).name in c.text for c in self.calls)
        return any(ln in text for text in [self.shown] + [c.text for c in self.calls] for ln in lines[:50])

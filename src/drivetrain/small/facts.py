"""The facts of a run, read once when the model wants to stop: the one value every check of ``small/checks.py`` reads.

What a check needs to know of a run is the same for all of them: the task's text (for the files, commands and literals
it names, ASCII in any language), what was shown with it, the workspace before the run and now, the calls made and
what they printed, which files the run rewrote unread, which programs the policy denied, and how a command is run
again (the harness's own audited Bash call). ``RunFacts`` holds them, and what is derived from them is computed once
(``cached_property``), so no check depends on another having run first.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePath

from drivetrain.small.effects import named_calls
from drivetrain.small.prompts import FILE_NAME
from drivetrain.small.readings import (
    _INTERPRETERS,
    _RUNNERS,
    TEST_RUNNER,
    _bare_test_file,
    _looks_runnable,
    _normal,
    _program,
    _shows,
)

Runner = Callable[[str], Awaitable[tuple[int | None, str]]]  # a command -> (exit code or None if not run, output)
CORPUS_FILE_BYTES = 64 * 1024  # of each file, for what the answer may report

TEST_CMD = re.compile(_RUNNERS + r"|(^|[\s/])(test_\w+|\w+_test)\.py\b")  # a runner, or a test file
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]*\d)")
# A command the task names: in backticks, or a script run by its interpreter, or a test runner.
# Unquoted, a runner takes only options and paths: in "The pytest suite fails" the command is `pytest`, not the prose.
_NAMED_CMD = re.compile(
    r"`([^`\n]+)`|(?<![A-Za-z0-9_])((?:python3?|bash|sh|node)\s+[A-Za-z0-9_./-]+\.(?:py|sh|js)"
    r"(?:[ \t]+(?:-{1,2}[A-Za-z0-9_=-]+|-?\d+(?:\.\d+)?|[A-Za-z0-9_./-]+\.[A-Za-z0-9]+))*"
    r"|pytest(?:[ \t]+(?:-{1,2}[A-Za-z0-9_=-]+|[A-Za-z0-9_.-]*(?:/|\.py\b|::)[A-Za-z0-9_./:-]*))*(?![\w-]|\.\w))"
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEFINED = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_]\w*)", re.M)
_PARTS = re.compile(r"&&|\|\|?|;|\n")


@dataclass
class Call:
    text: str  # the call's input and its output, as the model saw them
    command: str = ""
    failed: bool = False
    output: str = ""  # a Bash call's output
    unchanged: str = ""  # the file an Edit would have changed, had the file not already held the new text


# (the names in the task, the names defined before the run, the run's (old, new) name swaps)
Swaps = tuple[set[str], set[str], dict[tuple[str, str], None]]
Rename = tuple[str, str, list[str], str]  # (old, new, where old is left as path:line, the command replacing it there)


def line_count(output: str) -> int:
    return len([ln for ln in output.splitlines() if ln.strip()])


@dataclass(frozen=True)
class RunFacts:
    cwd: Path
    prompt: str
    answer: str
    before: Mapping[str, bytes]  # the workspace's text files before the run …
    now: Mapping[str, bytes]  # … and now
    calls: Sequence[Call]
    run: Runner  # how a command runs again: in a run, the harness's own Bash call (``DraftContext.run``)
    shown: str = ""  # what was shown with the task (the files it names): counts as seen
    writers: Mapping[str, str] = field(default_factory=dict)  # file -> the input of the call that last changed it
    unread: Sequence[str] = ()  # existing files the run rewrote before their content was shown
    denied: frozenset[str] = frozenset()  # programs the policy denied
    file_blocks: bool = False  # the model writes files as code blocks naming them (hints take that form)
    said: Sequence[str] = ()  # what the harness said this prompt (its tools' reports, its send-backs): not an answer
    made: list[Call] = field(default_factory=list)  # calls the checks made themselves (the run has seen them now)

    @cached_property
    def changed(self) -> dict[str, bytes]:
        return {p: c for p, c in self.now.items() if self.before.get(p) != c}

    @property
    def seen(self) -> list[Call]:
        """The run's calls and those the checks made for it."""
        return [*self.calls, *self.made]

    @cached_property
    def named_files(self) -> list[str]:
        return [m.group(1) for m in FILE_NAME.finditer(self.prompt)]

    @cached_property
    def outputs(self) -> list[str]:
        """The files the task names that had no content before the run, and that no file of the workspace is known
        by (``utils.py`` for ``src/utils.py``): what it asks to write. One with content is an input, or a file to
        change."""
        known = {PurePath(p).name for p in self.before}
        return [
            n
            for n in dict.fromkeys(self.named_files)
            if not self.before.get(n) and (n in self.before or PurePath(n).name not in known)
        ]

    @cached_property
    def named_commands(self) -> list[str]:
        """The commands the task names: in backticks, or a workspace script run by its interpreter, or a runner."""
        named = dict.fromkeys((m.group(1) or m.group(2)).strip() for m in _NAMED_CMD.finditer(self.prompt))
        return [c for c in named if _looks_runnable(c, self.cwd)]

    @cached_property
    def written_calls(self) -> list[tuple[str, str]]:
        """The calls the task writes out of functions the workspace defines: (the call, the command making it)."""
        return named_calls(self.prompt, dict(self.now))

    @cached_property
    def unrun_calls(self) -> list[tuple[str, str]]:
        """Those no command of the run made and printed something (what a function returns is known by running it,
        not by reading it; a script that calls it and prints nothing shows nothing)."""
        return [(text, command) for text, command in self.written_calls if self.made_call(text, self.calls) is None]

    @cached_property
    def written_values(self) -> dict[str, str]:
        """Files the run wrote that hold just one number."""
        values = {p: c.decode("utf-8", "replace").strip() for p, c in self.changed.items()}
        return {p: v for p, v in values.items() if NUMBER.fullmatch(v)}

    @cached_property
    def corpus(self) -> str:
        """Everything the run saw: the task, what was shown with it, each call and its result, the files as they are."""
        files = (f"{p}\n{c[:CORPUS_FILE_BYTES].decode('utf-8', 'replace')}" for p, c in self.now.items())
        return "\n".join([self.prompt, self.shown, *(c.text for c in self.calls), *files])

    @cached_property
    def swaps(self) -> Swaps:
        """(the names in the task, the names the workspace defined before the run, the (old, new) name swaps of the
        run's changed lines: a line where one name replaced another)."""
        asked = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", FILE_NAME.sub(" ", self.prompt)))  # main.py: not main
        defined = {n for c in self.before.values() for n in _DEFINED.findall(c.decode("utf-8", "replace"))}
        pairs: dict[tuple[str, str], None] = {}
        for path, content in self.changed.items():
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

    @cached_property
    def renames(self) -> list[Rename]:
        """Renames the run began and left half done, read from the run, not the task's words: in a file the run
        changed, a line where one name replaced another that the workspace defined (``def``/``class``) before the
        run, one of the two named in the task (the old one, when the task names any name defined before), and the
        old name still occurs as a word."""
        asked, defined, pairs = self.swaps
        out = []
        for old, new in pairs:
            if old not in defined or not ({old, new} & asked):
                continue
            if old not in asked and (asked & defined) - {new}:
                continue  # the task names the defined name it means, and not this one: not the rename it asks for
            word = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(old)}(?![A-Za-z0-9_])")
            places = [
                f"{path}:{i}"
                for path, content in self.now.items()
                for i, line in enumerate(content.decode("utf-8", "replace").splitlines(), 1)
                if word.search(line)
            ]
            if places:
                files = " ".join(dict.fromkeys(p.rsplit(":", 1)[0] for p in places))
                out.append((old, new, places, f"perl -pi -e 's/\\b{old}\\b/{new}/g' {files}"))
        return out

    @cached_property
    def ran_tests(self) -> list[Call]:
        return [c for c in self.calls if c.command and self.runs_tests(c.command)]

    @cached_property
    def has_tests(self) -> bool:
        return any(re.search(r"(^|/)(test_\w+|\w+_test)\.py$|(^|/)tests?/", p) for p in self.before)

    def runs_tests(self, command: str) -> bool:
        """A test runner, or an interpreter running a test file that runs its own tests (one of bare pytest-style
        functions runs none); a command that only shows a test file runs nothing."""
        if TEST_RUNNER.search(command):
            return True
        run_by = any(
            _program(part).split()[0] in _INTERPRETERS and TEST_CMD.search(part)
            for part in _PARTS.split(command)
            if part.strip()
        )
        return run_by and not _bare_test_file(command, dict(self.now))  # `cat -n tests/test_x.py` ran no test

    def computed(self, value: str) -> bool:
        """A command the model ran printed the value, or as many lines (the files ``find`` listed): its answer's
        number is a result, not a guess."""
        return any(
            _shows(value, c.output) or value == str(line_count(c.output))
            for c in self.seen
            if c.command and not c.failed
        )

    def ran(self, command: str) -> bool:
        return any(_normal(command) in _normal(c.command) for c in self.calls if c.command)

    def ran_programs(self) -> set[str]:
        return {_program(part) for c in self.seen if c.command and not c.failed for part in _PARTS.split(c.command)}

    def made_call(self, text: str, calls: Sequence[Call] | None = None) -> Call | None:
        """The last command of the run (of ``calls``, else all seen) that made the call ``text`` (any quotes) and
        printed something."""
        same: Callable[[str], str] = lambda t: _normal(t).replace('\\"', '"').replace('"', "'")
        return next(
            (
                c
                for c in reversed(self.seen if calls is None else calls)
                if c.command
                and not c.failed
                and c.output.strip()
                and not c.output.startswith("(no output)")
                and same(text) in same(c.command)
            ),
            None,
        )

    def search(self) -> str:
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

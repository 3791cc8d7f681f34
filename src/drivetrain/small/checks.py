"""Checks before stopping: what the harness can verify about any task, sent back as the only feedback.

A small model often says it is done when it is not: the file the task names was never written, a placeholder was
written instead of a value, the answer and the file disagree, "the tests pass" was said without running them, a file
was rewritten from memory without being read, nothing changed although the task asked for a fix, a rename was left
half done, the path:line cited is not where the name is, or the script the task says fails still fails. None of this
needs to know the particular task, nor the language it is written in: the files and commands the task names (ASCII in
any language), the literals it quotes, the workspace before and after, and the calls made and what they printed are
enough. A check that cannot tell what the task wants does nothing rather than guess from the task's wording.

The checks are parts: each a ``Check`` with one job (``small/checks_work.py``, ``small/checks_answer.py``), all
reading one ``RunFacts`` (``small/facts.py``) read once per look, in the order ``CHECKS`` declares here. The same
checks serve the attempts' selection (``small/attempts.py`` counts the ones an attempt passes).

``WorkChecks`` watches through plain hooks (UserPromptSubmit to see the task, PostToolUse to watch the calls) and
checks as a node of the loop entered at ``end_turn`` (``loop/nodes.py``), the mechanism a user's own ``Verify`` node
uses: it sends the model back to work at most ``work_limit`` times (and for a better answer at most ``answer_limit``
times more), then lets the run end.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from drivetrain.control.hooks import Hooks
from drivetrain.host.procs import run_command
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.nodes import DraftContext, NodeResult, Proceed, SendBack
from drivetrain.loop.state import NodePoint
from drivetrain.messages import Message
from drivetrain.small import checks_answer as answer
from drivetrain.small import checks_work as work
from drivetrain.small.answer import facts
from drivetrain.small.changes import describe, snapshot
from drivetrain.small.codeact import HELD_ALREADY, denied_programs
from drivetrain.small.facts import Call, RunFacts, Runner
from drivetrain.small.readings import _header_hint, _indent_hint, _no_tests_run, _parse_error, _rewritten

SendBackKind = Literal["work", "answer"]  # back to work, or only to write the answer again
TEST_RUN_TIMEOUT_S = 120
_IN_PLACE = re.compile(r"\bsed\s+(-\w*\s+)*-\w*i|\bperl\s+-\w*i")  # sed -i, perl -pi


@dataclass(frozen=True)
class Check:
    """One check: what it concludes from a run's facts (what fails, in words the model can act on; [] when it holds),
    and what a failure calls for: more work, only a better answer, or — ``last`` — a better answer once every other
    check holds (the answer must agree with work that is done)."""

    name: str
    kind: SendBackKind
    conclude: Callable[[RunFacts], Awaitable[list[str]]]
    runs_commands: bool = False  # it runs commands again (the harness's own audited calls)
    last: bool = False


# The order the checks run and their failures are said in. Checks that run commands come after those that only read,
# and the harness's own run of a call the task writes out comes before the checks of the answer that read it.
CHECKS: tuple[Check, ...] = (
    Check("missing_outputs", "work", work.missing_outputs),
    Check("placeholders", "work", work.placeholders),
    Check("mismatch", "work", answer.mismatch),
    Check("missing_paths", "work", work.missing_paths),
    Check("uncomputed", "work", work.uncomputed),
    Check("unread", "work", work.unread),
    Check("broken", "work", work.broken),
    Check("renamed", "work", work.renamed),
    Check("misnamed", "work", work.misnamed),
    Check("citations", "work", answer.citations),
    Check("strays", "work", work.strays),
    Check("half_done", "work", work.half_done),
    Check("dangling", "work", work.dangling, runs_commands=True),
    Check("tests", "work", work.tests, runs_commands=True),
    Check("named_commands", "work", work.named_commands, runs_commands=True),
    Check("exact_output", "work", work.exact_output, runs_commands=True),
    Check("unrun_calls", "work", work.unrun_calls, runs_commands=True),
    Check("claimed", "work", answer.claimed),
    Check("arithmetic", "work", answer.arithmetic),
    Check("unchanged", "work", work.unchanged),
    Check("unreported", "answer", answer.unreported),
    Check("unanswered_calls", "answer", answer.unanswered_calls),
    Check("agreement", "answer", answer.agreement, last=True),
)


@dataclass(frozen=True)
class Findings:
    """What the checks concluded of one look at a run: the failures by check, in ``CHECKS``' order."""

    failed: dict[str, list[str]]
    kinds: dict[str, SendBackKind]

    def of(self, kind: SendBackKind) -> list[str]:
        return [text for name, texts in self.failed.items() if self.kinds[name] == kind for text in texts]


async def conclude(facts: RunFacts, checks: tuple[Check, ...] = CHECKS) -> Findings:
    """Every check on the same facts, in order; a ``last`` check only when all others hold."""
    failed: dict[str, list[str]] = {}
    kinds: dict[str, SendBackKind] = {}
    for check in checks:
        if check.last and failed:
            continue
        kinds[check.name] = check.kind
        if found := await check.conclude(facts):
            failed[check.name] = found
    return Findings(failed, kinds)


class Seen(Protocol):
    """What the checks read of the node's context: the answer and the history (all a test's stand-in has); only
    the loop's own context (``loop.nodes.DraftContext``) also runs the commands the checks make."""

    @property
    def answer(self) -> str: ...

    @property
    def history(self) -> list[Message]: ...


@dataclass
class WorkChecks:
    cwd: Path
    work_limit: int = 2  # sent back to work at most this many times a run (after that, the stop is let through) …
    answer_limit: int = 2  # … and asked at most this many times more for an answer that only lacks what is done
    prompt: str = ""
    before: dict[str, bytes] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # existing files rewritten before their content was shown
    _last: dict[str, bytes] = field(default_factory=dict)
    # snapshot's cache of unchanged files
    _known: dict[str, tuple[tuple[int, int], bytes]] = field(default_factory=dict)
    report_changes: bool = True  # add to each call's result what it changed (changes.py)
    file_blocks: bool = False  # the model writes files as code blocks naming them (hints take that form)
    agree: bool = True  # the answer must agree with the run (small/answer.py), else it is written again from the facts
    shown: str = ""  # what was shown with the task (the files it names): counts as seen
    checks: tuple[Check, ...] = CHECKS

    _sent: dict[SendBackKind, int] = field(default_factory=dict)  # send-backs this prompt
    _writers: dict[str, str] = field(default_factory=dict)  # file -> the input of the call that last changed it
    _said: str = ""  # what the harness said of the last call (an Edit's or Write's report, its note): not an answer
    _sent_back: list[str] = field(default_factory=list)  # what the checks sent back this prompt: not an answer either
    standing: tuple[str, ...] = ()  # the work checks failing at the last look (let through: the limits were reached)

    name: str = "WorkChecks"  # a node of the loop (nodes.py), entered when the model wants to stop …
    at: NodePoint = "end_turn"

    @property
    def limit(self) -> int:  # … entered at most this many times a run: each send-back, and the last look
        return self.work_limit + self.answer_limit + 1

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
        self._writers, self._said, self._sent_back, self.standing = {}, "", [], ()
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
                and path not in self.unread
            ):
                self.unread.append(path)
        last, self._last = self._last, now
        self._writers.update({p: str(tool_input) for p, c in now.items() if last.get(p) != c})
        output = str(response.get("content", ""))
        held = payload.get("tool_name") == "Edit" and response.get("is_error") and output.startswith(HELD_ALREADY)
        self.calls.append(
            Call(
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
        found = await self.findings(
            ctx.answer, frozenset(denied_programs(ctx.history)), ctx.run if isinstance(ctx, DraftContext) else None
        )
        work, answer = found.of("work"), found.of("answer")
        self.standing = tuple(name for name in found.failed if found.kinds[name] == "work")
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
        self._sent_back.append(text)  # not an answer (the record below is: it is the agent's own, answer.facts)
        if kind == "answer" and self.agree and (done := facts(self.before, self._last, self.calls)):
            text += "\n\n" + done  # the answer is written again with what the run did in front of it
        return SendBack(text, tool_choice="none" if kind == "answer" else None)

    # -- the checks

    async def facts(self, answer: str, denied: frozenset[str] = frozenset(), run: Runner | None = None) -> RunFacts:
        """The run's facts as they are now (one look at the workspace). ``denied``: programs the policy denied;
        ``run``: how a command is run again (in a run, the harness's own Bash call: ``NodeContext.run``)."""
        now = await asyncio.to_thread(snapshot, self.cwd, self._known)
        return RunFacts(
            cwd=self.cwd,
            prompt=self.prompt,
            answer=answer,
            before=self.before,
            now=now,
            calls=list(self.calls),
            run=run or self._run_here,
            shown=self.shown,
            writers=dict(self._writers),
            unread=list(self.unread),
            denied=denied,
            file_blocks=self.file_blocks,
            said=[self._said, *self._sent_back],
        )

    async def findings(
        self,
        answer: str,
        denied: frozenset[str] = frozenset(),
        run: Runner | None = None,
        checks: tuple[Check, ...] | None = None,
    ) -> Findings:
        """The checks (``checks``, else the node's own) on one look at the run (``agreement`` only when the answer
        must agree)."""
        facts = await self.facts(answer, denied, run)
        chosen = self.checks if checks is None else checks
        found = await conclude(facts, chosen if self.agree else tuple(c for c in chosen if not c.last))
        self.calls += facts.made  # a call the harness made for the run: the run has seen it
        self.unread = []  # said once per file
        return found

    async def failures(self, answer: str, denied: frozenset[str] = frozenset(), run: Runner | None = None) -> list[str]:
        work, answer_only = await self.sorted_failures(answer, denied, run)
        return work + answer_only

    async def sorted_failures(
        self, answer: str, denied: frozenset[str] = frozenset(), run: Runner | None = None
    ) -> tuple[list[str], list[str]]:
        """(what needs more work, what needs only a better answer), from one look at the workspace."""
        found = await self.findings(answer, denied, run)
        return found.of("work"), found.of("answer")

    async def _run_here(self, command: str) -> tuple[int | None, str]:
        """Outside a run (a check called by itself), a command runs as a plain child process of the workspace."""
        return await run_command(command, self.cwd, TEST_RUN_TIMEOUT_S)

    def _shown(self, path: str) -> bool:
        """Was the file's original content (some line of it) in an earlier call or result?"""
        lines = [ln.strip() for ln in self.before[path].decode("utf-8", "replace").splitlines() if len(ln.strip()) >= 6]
        if not lines:
            return any(Path(path).name in c.text for c in self.calls)
        return any(ln in text for text in [self.shown] + [c.text for c in self.calls] for ln in lines[:50])

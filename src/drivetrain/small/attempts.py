"""Several fresh attempts at one task; the evidence picks the one that becomes the run.

A small model that fails one trajectory often succeeds on another, and restarting fresh beats continuing a long
conversation. So under the small profile a task runs as ``k`` independent attempts: each in its own scratch copy
of the workspace (``cp --reflink=auto``: a reflink where the file system has them, else a copy), from a fresh
context, with its own seed and temperature, and each a session of its own (``attempt_of`` names the run). Every
attempt's agent is assembled exactly as a single run's is, for its copy, so permission rules, hooks, the sandbox
and the audit log apply inside each one.

Then the evidence picks (``choose``), never the words of the task or of an answer:

- an attempt that ended other than with an answer (turn cap, loop guard, budget, error) is kept but cannot win;
- the commands the task names (its code spans whose program exists) and the test commands any attempt ran are
  run again on every copy, and on a pristine copy (the "base"), through the attempt's own gate and Bash tool
  (audited, sandboxed when the run is); a copy on which one of them fails while it passes on another copy or on
  the base fails a hard check and cannot win;
- the rest are grouped by behaviour: the same changed contents, or the same outputs of those commands, or the same
  values in the answer (its numbers and code spans); the largest group wins, ties broken by the commands passed,
  then by fewer turns.

An attempt that passes a strong check (a command that fails on the base passes on its copy; or, read by
``small/evidence.py``, a quoted line now printed exactly, an asked-for file holding what its own command prints) wins
at once: the attempts still running are stopped. The winner's changes are applied to the real workspace once, each file only
where the user has not changed it meanwhile (else the winner's version is written beside it and the result says
so), after the rewind checkpoint has recorded it. The run's session takes the winner's history, so ``--resume``
continues the winner's conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from opentelemetry import context as otel_context
from opentelemetry import trace

from drivetrain.agent import Agent, Run
from drivetrain.errors import HarnessError
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.draft import Deps
from drivetrain.loop.events import Event, Finished
from drivetrain.loop.result import RunResult
from drivetrain.loop.state import RunState
from drivetrain.messages import Message, TextBlock, Usage
from drivetrain.models.base import Model, ModelRequest, ModelResponse
from drivetrain.pricing import cost_usd
from drivetrain.sessions.audit import attached
from drivetrain.small.answer import echoes
from drivetrain.small.checks import CHECKS, WorkChecks
from drivetrain.small.evidence import strong_evidence
from drivetrain.small.readings import TEST_RUNNER
from drivetrain.tools.base import ToolContext

DEFAULT_ATTEMPTS = 3
TEMPERATURES = (0.2, 0.5, 0.7, 0.8, 0.9)  # attempt i's, cycling: the first as a single run's, the rest more varied
RERUN_TIMEOUT_S = 20.0
MIN_START_S = 10.0  # an attempt starts only with at least this much of the wall budget left (and see _room)
MAX_RERUNS = 6  # commands run again on each copy
_CODE_SPAN = re.compile(r"`([^`\n]{2,200})`")
_VALUE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])|-?\d+(?:\.\d+)?|`[^`\n]{1,80}`")
SKIP = frozenset({".git"})  # never compared nor applied: a repository's own state is not a change to the work


# ---------------------------------------------------------------- one attempt's parts


@dataclass(frozen=True)
class AttemptSpec:
    """What makes attempt ``index`` (1-based) its own: its seed, temperature, workspace copy and session."""

    index: int
    seed: int
    temperature: float
    cwd: Path
    session_id: str


class Sampled:
    """A model whose every request carries one attempt's seed and temperature (providers that take them use them)."""

    def __init__(self, inner: Model, seed: int | None, temperature: float | None) -> None:
        self.inner = inner
        self.name = inner.name
        self.seed = seed
        self.temperature = temperature

    async def respond(self, request: ModelRequest) -> ModelResponse:
        return await self.inner.respond(
            replace(
                request,
                seed=self.seed if request.seed is None else request.seed,
                temperature=self.temperature if request.temperature is None else request.temperature,
            )
        )


FileState = tuple[int, int]  # (size, mtime_ns): unchanged when both are
Tree = dict[str, FileState]


def scan(root: Path) -> Tree:
    """Every file and symlink under ``root`` (relative POSIX paths), with its size and mtime; ``.git`` left out."""
    out: Tree = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP]
        for name in files:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            out[os.path.relpath(path, root).replace(os.sep, "/")] = (st.st_size, st.st_mtime_ns)
    return out


def digest(path: Path) -> str | None:
    """The file's content hash (a symlink's target text), None when it is not there."""
    try:
        if path.is_symlink():
            return "link:" + os.readlink(path)
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (FileNotFoundError, NotADirectoryError):
        return None


def copy_tree(src: Path, dst: Path) -> None:
    """``dst`` becomes a copy of ``src`` (mtimes kept, so an unchanged file is seen as such): reflinks where the file
    system has them (``cp --reflink=auto``), else a plain copy. Never hard links: a tool writing a file in place
    would write through them into the user's workspace."""
    dst.mkdir(parents=True, exist_ok=True)
    if shutil.which("cp"):
        done = subprocess.run(
            ["cp", "-a", "--reflink=auto", f"{src}/.", str(dst)], capture_output=True, text=True, check=False
        )
        if done.returncode == 0:
            return
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)


def changes(base: Path, before: Tree, copy: Path) -> dict[str, str | None]:
    """What an attempt changed in its copy: relative path -> new content hash, or None for a file it removed."""
    after = scan(copy)
    out: dict[str, str | None] = {}
    for rel, state in after.items():
        if before.get(rel) != state:
            new = digest(copy / rel)
            if rel not in before or new != digest(base / rel):
                out[rel] = new
    for rel in before.keys() - after.keys():
        out[rel] = None
    return out


@dataclass
class Attempt:
    """One attempt and what was read of it after it ended."""

    spec: AttemptSpec
    agent: Agent
    run: Run | None = None
    result: RunResult | None = None
    error: str = ""  # why it could not run or finish (a crash, a cancellation)
    changed: dict[str, str | None] = field(default_factory=dict)
    reruns: dict[str, tuple[int, str]] = field(default_factory=dict)  # command -> (exit code, output hash)
    values: frozenset[str] = frozenset()  # the answer's numbers and code spans
    hard_fail: str = ""  # the check it fails, if any
    failed_checks: tuple[str, ...] = ()  # the work checks (small/checks.py) its end state fails
    evidence: str = ""  # strong evidence its work is done (small/evidence.py), if any
    stopped: bool = False  # stopped because another attempt won early
    took_s: float = 0.0  # from its start to its end

    @property
    def finished(self) -> bool:
        """Ended with an answer: only such an attempt may win."""
        return self.result is not None and self.result.subtype == "success" and not self.stopped

    @property
    def passed(self) -> int:
        """Checks passed: the commands run again on its copy, less the work checks its end state fails."""
        return sum(1 for code, _ in self.reruns.values() if code == 0) - len(self.failed_checks)

    @property
    def turns(self) -> int:
        return self.result.num_turns if self.result else 0

    def summary(self) -> JsonObject:
        return {
            "attempt": self.spec.index,
            "session_id": self.spec.session_id,
            "seed": self.spec.seed,
            "temperature": self.spec.temperature,
            "subtype": self.result.subtype if self.result else "error_during_execution",
            "num_turns": self.turns,
            "took_s": round(self.took_s, 1),
            "usage": (self.run.usage if self.run is not None else Usage()).to_wire(),
            "changed": sorted(self.changed),
            "checks": {cmd: code for cmd, (code, _) in self.reruns.items()},
            "hard_fail": self.hard_fail,
            "failed_checks": list(self.failed_checks),
            "evidence": self.evidence,
            "stopped": self.stopped,
            "error": self.error,
            "result": self.result.result[:500] if self.result else "",
        }


@dataclass(frozen=True)
class Choice:
    """Which attempt won and why, in words a person reads (``2 of 3 agree; `pytest -q` passes``)."""

    chosen: int | None  # the attempt's index; None: none could win
    reason: str
    groups: tuple[tuple[int, ...], ...] = ()


# ---------------------------------------------------------------- evidence


def named_commands(prompt: str, cwd: Path) -> list[str]:
    """The commands the task names: its code spans whose program exists (on PATH, or a file of the workspace).
    Code spans and program names read the same in any language."""
    out: list[str] = []
    for span in _CODE_SPAN.findall(prompt):
        words = span.split()
        if len(words) < 1 or span in out:
            continue
        program = words[0]
        if "/" in program or program.endswith((".py", ".sh")):
            exists = (cwd / program).is_file()
        else:
            exists = shutil.which(program) is not None and (len(words) > 1 or program in ("make", "pytest"))
        if exists:
            out.append(span)
    return out


def tests_ran(result: RunResult | None) -> list[str]:
    """The test commands an attempt ran (a test runner's name in the command: ``pytest``, ``npm test`` …)."""
    if result is None:
        return []
    out: list[str] = []
    for msg in result.history:
        for use in msg.tool_uses:
            command = use.input.get("command")
            if use.name == "Bash" and isinstance(command, str) and TEST_RUNNER.search(command) and command not in out:
                out.append(command)
    return out


def harness_words(history: Sequence[Message]) -> list[str]:
    """What the harness said during a run: the text of every user turn after the task (send-backs, notes)."""
    users = [m for m in history if m.role == "user"]
    return [b.text for m in users[1:] for b in m.content if isinstance(b, TextBlock) and b.text.strip()]


def answer_values(answer: str) -> frozenset[str]:
    """The answer's numbers (thousands separators dropped) and code spans: what two answers must share to agree."""
    return frozenset(v.replace(",", "") if not v.startswith("`") else v.strip("` ") for v in _VALUE.findall(answer))


async def rerun(agent: Agent, command: str, cwd: Path, session_id: str) -> tuple[int, str] | None:
    """``command`` run again in ``cwd`` (``run_again``): (exit code, hash of its output), None when not run."""
    got = await run_again(agent, command, cwd, session_id)
    return None if got[0] is None else (got[0], hashlib.sha256(got[1].encode()).hexdigest()[:16])


async def run_again(agent: Agent, command: str, cwd: Path, session_id: str) -> tuple[int | None, str]:
    """``command`` run again in ``cwd`` as the attempt's own Bash call would be: the policy decides (not allowed:
    None, not run), the Bash tool runs it (sandboxed when the run is), and the audit log records it. Returns
    (exit code, the output with the copy's path written as ``.``); a timeout is exit code -1."""
    bash = next((t for t in agent.tools if t.name == "Bash"), None)
    if bash is None:
        return None, ""
    if agent.policy is not None and agent.policy.decide("Bash", {"command": command}, cwd).behavior != "allow":
        return None, ""
    call_id = f"check_{secrets.token_hex(6)}"
    audit = attached(agent.observers)
    if audit is not None:
        audit.intent(call_id, "Bash", {"command": command}, "allow", "attempts", "a check of the attempts, run again")
    started = time.time()
    ctx = ToolContext(cwd=cwd, roots=[cwd], session_id=session_id, tool_use_id=call_id)
    try:
        result = await asyncio.wait_for(
            bash.call({"command": command, "timeout": int(RERUN_TIMEOUT_S * 1000)}, ctx), RERUN_TIMEOUT_S + 5
        )
    except TimeoutError:
        return -1, "timeout"
    exit_code = result.meta.get("exit_code")
    code = exit_code if isinstance(exit_code, int) else int(result.is_error)
    if audit is not None:
        audit.outcome(call_id, "Bash", started, time.time(), result.is_error, exit_code=code)
    return code, result.text.replace(os.path.realpath(cwd), ".").replace(str(cwd), ".")


async def _not_run(command: str) -> tuple[int | None, str]:
    return None, ""


READ_ONLY = tuple(c for c in CHECKS if not c.runs_commands and not c.last)


def choose(attempts: Sequence[Attempt], base: dict[str, tuple[int, str]]) -> Choice:
    """The winner among the attempts, from the evidence read of them (see the module's docstring)."""
    finished = [a for a in attempts if a.finished and not a.hard_fail]
    if not finished:
        why = "; ".join(f"attempt {a.spec.index}: {_why_not(a)}" for a in attempts)
        return Choice(None, f"no attempt can win ({why})")
    # behaviour groups: agree when the changed contents, the commands' outputs or the answer's values are the same
    parent = {a.spec.index: a.spec.index for a in finished}

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    keys: list[Callable[[Attempt], object]] = [
        lambda a: tuple(sorted(a.changed.items())) if a.changed else None,
        lambda a: tuple(sorted(a.reruns.items())) if a.reruns else None,
        lambda a: a.values or None,
    ]
    for key in keys:
        seen: dict[object, int] = {}
        for a in finished:
            k = key(a)
            if k is None:
                continue
            if k in seen:
                parent[root(a.spec.index)] = root(seen[k])
            else:
                seen[k] = a.spec.index
    by_root: dict[int, list[Attempt]] = {}
    for a in finished:
        by_root.setdefault(root(a.spec.index), []).append(a)
    groups = sorted(
        by_root.values(),
        key=lambda g: (-len(g), -max(a.passed for a in g), min(a.turns for a in g), min(a.spec.index for a in g)),
    )
    best = groups[0]
    winner = min(best, key=lambda a: (-a.passed, a.turns, a.spec.index))
    reasons = [f"{len(best)} of {len(attempts)} agree" if len(best) > 1 else f"attempt {winner.spec.index} alone"]
    passing = [cmd for cmd, (code, _) in winner.reruns.items() if code == 0]
    fixed = [cmd for cmd in passing if base.get(cmd, (0, ""))[0] != 0]
    if winner.evidence:
        reasons.append(winner.evidence)
    if fixed:
        reasons.append(", ".join(f"`{c}` passes (it failed before)" for c in fixed[:2]))
    elif passing:
        reasons.append(", ".join(f"`{c}` passes" for c in passing[:2]))
    if len(best) == 1 and len(finished) > 1:
        reasons.append(f"the groups were {'/'.join(str(len(g)) for g in groups)}; ties go to checks passed, then turns")
    return Choice(winner.spec.index, "; ".join(reasons), tuple(tuple(a.spec.index for a in g) for g in groups))


def _why_not(a: Attempt) -> str:
    if a.stopped:
        return "stopped when another won"
    if a.hard_fail:
        return a.hard_fail
    if a.result is None:
        return a.error or "did not finish"
    return a.result.subtype


def strong(a: Attempt, base: dict[str, tuple[int, str]]) -> str:
    """A strong check the attempt passes: a command that fails on the base passes on its copy ("" when none)."""
    if not a.finished or a.hard_fail:
        return ""
    for cmd, (code, _) in a.reruns.items():
        if code == 0 and cmd in base and base[cmd][0] != 0:
            return f"`{cmd}` passes (it failed before)"
    return a.evidence


# ---------------------------------------------------------------- applying the winner


@dataclass(frozen=True)
class Applied:
    written: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    kept_both: tuple[tuple[str, str], ...] = ()  # (the user's file, where the winner's version went)

    def note(self) -> str:
        if not self.kept_both:
            return ""
        pairs = ", ".join(f"{user} (the attempt's version is in {beside})" for user, beside in self.kept_both)
        return f"files changed in the workspace while the attempts ran were kept: {pairs}"


def apply_changes(copy: Path, cwd: Path, before: Tree, changed: dict[str, str | None], base: Path) -> Applied:
    """The winner's changes, made in the real workspace. A file the user changed since the attempts began (its
    size or mtime differ from the scan taken then) is left as it is; the winner's version goes beside it."""
    written: list[str] = []
    removed: list[str] = []
    kept: list[tuple[str, str]] = []
    now = scan(cwd)
    for rel, new in sorted(changed.items()):
        target = cwd / rel
        if now.get(rel) != before.get(rel) and digest(target) != digest(base / rel):
            if new is not None:
                beside = f"{rel}.attempt"
                _put(copy / rel, cwd / beside)
                kept.append((rel, beside))
            continue
        if new is None:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
            removed.append(rel)
        else:
            _put(copy / rel, target)
            written.append(rel)
    return Applied(tuple(written), tuple(removed), tuple(kept))


def _put(src: Path, dst: Path) -> None:
    """``dst`` becomes ``src`` (content and mode), atomically."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        with contextlib.suppress(FileNotFoundError):
            dst.unlink()
        os.symlink(os.readlink(src), dst)
        return
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.")
    os.close(fd)
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# ---------------------------------------------------------------- the run of attempts


@dataclass(frozen=True)
class AttemptEvent:
    """An event of attempt ``attempt``'s run (its index is on every event the front ends show)."""

    attempt: int
    event: Event


MakeAgent = Callable[[AttemptSpec], Agent]


class Attempts:
    """A task run as ``k`` fresh attempts, one of which becomes the run ``main`` (see the module's docstring).

    Iterate it for the attempts' events (``AttemptEvent``), then the run's own ``Finished``; ``result`` is the
    winner's result under the run's session id, with ``attempts`` saying what each did and why the winner won.
    """

    def __init__(
        self,
        main: Run,
        prompt: str,
        make_agent: MakeAgent,
        k: int = DEFAULT_ATTEMPTS,
        *,
        seed: int | None = None,
        wall_s: float | None = None,
        scratch: Path | None = None,
        early_stop: bool = True,
        together: bool = True,
    ) -> None:
        if k < 1:
            raise ValueError("attempts must be at least 1")
        self.main = main
        self.prompt = prompt
        self.make_agent = make_agent
        self.k = k
        self.seed = seed if seed is not None else secrets.randbelow(2**31)
        self.wall_s = wall_s
        self.early_stop = early_stop
        self.together = together  # all at once (a model that serves requests in parallel), or one after another
        self._scratch_root = scratch
        self.attempts: list[Attempt] = []
        self.choice: Choice | None = None
        self.applied = Applied()
        self.base_checks: dict[str, tuple[int, str]] = {}
        self._result: RunResult | None = None
        self._base_tree: Tree = {}
        self._base = Path()  # the pristine copy, once made
        self.cancelled_by = "cancel"

    # what a front end reads of a run
    @property
    def agent(self) -> Agent:
        return self.main.agent

    @property
    def deps(self) -> Deps:
        return self.main.deps

    @property
    def session_id(self) -> str:
        return self.main.session_id

    @property
    def num_turns(self) -> int:
        return sum(a.turns for a in self.attempts)

    @property
    def result(self) -> RunResult:
        if self._result is None:
            raise RuntimeError("the attempts have not finished")
        return self._result

    def __aiter__(self) -> AsyncIterator[AttemptEvent | Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[AttemptEvent | Event]:
        cwd = self.main.agent.cwd
        started = time.monotonic()
        own_tmp = self._scratch_root is None
        root = self._scratch_root or Path(tempfile.mkdtemp(prefix="drivetrain-attempts-"))
        queue: asyncio.Queue[AttemptEvent | None] = asyncio.Queue()
        tasks: list[asyncio.Task[None]] = []
        span = self._span()
        try:
            checkpoint = await self.main.checkpoint()
            before = scan(cwd)
            base = self._base = root / "base"
            await asyncio.to_thread(copy_tree, cwd, base)
            self._base_tree = scan(base)
            named = named_commands(self.prompt, base)[:MAX_RERUNS]
            for cmd in named:  # on a pristine copy, as the run's own call: what "fixed" is measured against
                got = await rerun(self.main.agent, cmd, base, self.session_id)
                if got is not None:
                    self.base_checks[cmd] = got
            deadline = None if self.wall_s is None else started + self.wall_s
            width = self.k if self.together else 1
            running = 0
            while True:
                while running < width and len(self.attempts) < self.k and not self._decided():
                    if self.attempts and deadline is not None and deadline - time.monotonic() < self._room():
                        break  # too little time left for another attempt to finish
                    attempt = await self._new_attempt(len(self.attempts) + 1, root, base)
                    token = otel_context.attach(trace.set_span_in_context(span)) if span is not None else None
                    try:  # the attempt's run span goes under the attempts' span: the task copies the context
                        tasks.append(asyncio.create_task(self._attempt(attempt, queue, named)))
                    finally:
                        if token is not None:
                            otel_context.detach(token)
                    running += 1
                if not running:
                    break
                # No clock of its own here: each attempt's budget ends it at its next step, as it ends a single run
                # (a model call under way is not cut short, nor the work it was doing thrown away).
                item = await queue.get()
                if item is not None:
                    yield item
                    continue
                running -= 1
                if (won := self._decided()) is not None:
                    for a, t in zip(self.attempts, tasks, strict=True):
                        if a is not won and not t.done():
                            a.stopped = True
                            t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            while not queue.empty():
                item = queue.get_nowait()
                if item is not None:
                    yield item
            await self._check_all(named, base)
            self.choice = choose(self.attempts, self.base_checks)
            self._result = await self._become_run(cwd, before, base, checkpoint, started)
            if span is not None and self.choice is not None:
                span.set_attribute("drivetrain.attempt.count", len(self.attempts))
                span.set_attribute("drivetrain.attempt.reason", self.choice.reason)
                if self.choice.chosen is not None:
                    span.set_attribute("drivetrain.attempt.chosen", self.choice.chosen)
            yield Finished(self._result)
        finally:
            if span is not None:
                span.end()
            for t in tasks:
                t.cancel()
            if own_tmp:
                await asyncio.to_thread(shutil.rmtree, root, True)

    async def _attempt(self, a: Attempt, queue: asyncio.Queue[AttemptEvent | None], named: list[str]) -> None:
        started = time.monotonic()
        try:
            a.run = a.agent.start(self.prompt, session_id=a.spec.session_id)
            if a.run.log is not None:
                a.run.log.write("attempt_of", session=self.session_id, attempt=a.spec.index, seed=a.spec.seed)
            async for event in a.run:
                await queue.put(AttemptEvent(a.spec.index, event))
            a.result = a.run.result
            a.values = answer_values(a.result.result) if a.result.subtype == "success" else frozenset()
            if a.result.result and any(echoes(a.result.result, said) for said in harness_words(a.result.history)):
                a.hard_fail = "its answer copies what the harness said"
            for cmd in [*named, *tests_ran(a.result)][:MAX_RERUNS]:
                if cmd not in a.reruns and (got := await rerun(a.agent, cmd, a.spec.cwd, a.spec.session_id)):
                    a.reruns[cmd] = got
            checks = next((n for n in a.agent.nodes if isinstance(n, WorkChecks)), None)
            if a.finished and checks is not None and self.early_stop:
                facts = await checks.facts(
                    a.result.result, run=partial(run_again, a.agent, cwd=a.spec.cwd, session_id=a.spec.session_id)
                )
                on_base = partial(run_again, self.main.agent, cwd=self._base, session_id=self.session_id)
                a.evidence = await strong_evidence(facts, on_base)
        except asyncio.CancelledError:
            a.error = a.error or "stopped"
        except Exception as e:  # one attempt's crash is evidence against it, not the end of the others
            a.error = f"{type(e).__name__}: {e}"
        finally:
            a.took_s = time.monotonic() - started
            queue.put_nowait(None)

    def _room(self) -> float:
        """The budget a further attempt needs: what the quickest finished one took (none finished: what the longest
        took, all of it being too little), and never less than MIN_START_S. One that would be cut short by the
        budget cannot win: starting it would only cost the user the wait."""
        ended = [a for a in self.attempts if a.took_s]
        finished = [a.took_s for a in ended if a.finished]
        need = min(finished) if finished else max((a.took_s for a in ended), default=0.0)
        return max(MIN_START_S, need)

    def _span(self) -> trace.Span | None:
        """The span the attempts' runs go under (their siblings' parent), when the run is traced."""
        telemetry = self.main.agent.telemetry
        if telemetry is None:
            return None
        provider = telemetry.tracer_provider or trace.get_tracer_provider()
        return provider.get_tracer("drivetrain").start_span(
            "attempts", attributes={"drivetrain.attempt.planned": self.k, "gen_ai.conversation.id": self.session_id}
        )

    def _furthest(self) -> Attempt | None:
        """When none can win: the attempt that got furthest (most checks passed, most turns), if any ran."""
        ran = [a for a in self.attempts if a.result is not None]
        return max(ran, key=lambda a: (a.passed, a.turns, -a.spec.index), default=None)

    def _decided(self) -> Attempt | None:
        """An attempt that passed a strong check: it wins, and no other attempt starts or goes on."""
        if not self.early_stop:
            return None
        return next((a for a in self.attempts if strong(a, self.base_checks)), None)

    async def _new_attempt(self, index: int, root: Path, base: Path) -> Attempt:
        copy = root / f"a{index}"
        await asyncio.to_thread(copy_tree, base, copy)
        temperature = TEMPERATURES[(index - 1) % len(TEMPERATURES)]
        spec = AttemptSpec(index, self.seed + index - 1, temperature, copy, _attempt_id(self.session_id, index))
        agent = self.make_agent(spec)
        if agent.telemetry is not None:  # its run's span says which attempt it is (telemetry/run.py)
            attributes = {
                **agent.telemetry.attributes,
                "drivetrain.attempt": index,
                "drivetrain.attempt.seed": spec.seed,
            }
            agent.telemetry = replace(agent.telemetry, attributes=attributes)
        attempt = Attempt(spec, agent)
        self.attempts.append(attempt)
        return attempt

    async def _check_all(self, named: list[str], base: Path) -> None:
        """Every finished attempt checked by the same commands; a copy failing one that passes elsewhere fails."""
        commands: list[str] = list(named)
        for a in self.attempts:
            commands += [c for c in tests_ran(a.result) if c not in commands]
        commands = commands[:MAX_RERUNS]
        for a in self.attempts:
            if not a.finished:
                continue
            for cmd in commands:
                if cmd not in a.reruns and (got := await rerun(a.agent, cmd, a.spec.cwd, a.spec.session_id)):
                    a.reruns[cmd] = got
        for a in self.attempts:
            a.changed = await asyncio.to_thread(changes, base, self._base_tree, a.spec.cwd)
            checks = next((n for n in a.agent.nodes if isinstance(n, WorkChecks)), None)
            if a.finished and a.result is not None and checks is not None:  # the checks that only read: no reruns
                verdict = await checks.verdict(a.result.result, run=_not_run, checks=READ_ONLY)
                a.failed_checks = tuple(verdict.failed)
        passes_somewhere = {
            cmd
            for cmd in commands
            if any(a.reruns.get(cmd, (1, ""))[0] == 0 for a in self.attempts if a.finished)
            or self.base_checks.get(cmd, (1, ""))[0] == 0
        }
        for a in self.attempts:
            failing = [c for c in passes_somewhere if c in a.reruns and a.reruns[c][0] != 0]
            if failing and a.finished:
                a.hard_fail = f"`{failing[0]}` fails on its copy and passes elsewhere"

    async def _become_run(
        self, cwd: Path, before: Tree, base: Path, checkpoint: JsonObject | None, started: float
    ) -> RunResult:
        choice = self.choice
        assert choice is not None
        usage = sum((a.run.usage for a in self.attempts if a.run is not None), Usage())
        winner = next((a for a in self.attempts if a.spec.index == choice.chosen), None)
        # None can win: the work of the one that got furthest is not thrown away (a single run would have left it),
        # and its error is the run's
        kept = winner or self._furthest()
        if kept is not None and kept.result is not None and kept.run is not None:
            cp = self.main.agent.checkpoints
            if cp is not None and checkpoint is not None and isinstance(prompt := checkpoint.get("prompt"), int):
                with contextlib.suppress(HarnessError):  # no checkpoint: rewind cannot undo it, the run goes on
                    await asyncio.to_thread(cp.keep, self.session_id, prompt, [cwd / rel for rel in kept.changed])
            self.applied = await asyncio.to_thread(apply_changes, kept.spec.cwd, cwd, before, kept.changed, base)
            result = kept.result
            value: RunState = kept.run.value.evolve(session_id=self.session_id)
        else:
            result = RunResult(
                "error_during_execution", None, choice.reason, 0, self.session_id, 0, Usage(), None, [], []
            )
            value = self.main.value
        if winner is None and kept is not None:
            choice = replace(choice, reason=f"{choice.reason}; the changes of attempt {kept.spec.index} are kept")
        if len(self.attempts) < self.k and self._decided() is None:
            choice = replace(
                choice, reason=f"{choice.reason}; {self.k - len(self.attempts)} more had too little time left to start"
            )
            self.choice = choice
        summary: JsonObject = {
            "count": len(self.attempts),  # those started: one after another, a decided run starts no more
            "planned": self.k,
            "chosen": choice.chosen,
            "reason": choice.reason,
            "groups": [list(g) for g in choice.groups],
            "seed": self.seed,
            "each": [a.summary() for a in self.attempts],
            "applied": {
                "written": list(self.applied.written),
                "removed": list(self.applied.removed),
                "kept_both": [list(p) for p in self.applied.kept_both],
            },
        }
        log = self.main.log
        if log is not None:
            if value is not self.main.value:
                log.save(self.main.value, value)
            log.write("attempts", **summary)
        self.main.value = value
        note = "; ".join(n for n in (result.note, "" if winner else choice.reason, self.applied.note()) if n)
        out = replace(
            result,
            session_id=self.session_id,
            usage=usage,
            total_cost_usd=cost_usd(self.main.agent.model.name, usage),
            duration_ms=int((time.monotonic() - started) * 1000),
            note=note,
            result=result.result,
        )
        out.attempts = summary
        if log is not None:
            log.write("result", **{k: v for k, v in out.to_json().items() if k != "type"})
        return out


def _attempt_id(session_id: str, index: int) -> str:
    return f"{session_id}-attempt-{index}"

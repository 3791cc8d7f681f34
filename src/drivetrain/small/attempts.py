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

Run one after another (a local model: ``together=False``), a further attempt starts only where every earlier one is
known to have failed: it ended without an answer, failed a hard check, or the work checks still objected when its
run was let stop (``WorkChecks.standing``). An attempt that finished with nothing against it settles the task; a
further one would only cost the wait and risk a worse pick.

An attempt where one of its first two calls misfires (the model's own command failed, not the workspace's code:
``small/misfires.py``) is abandoned as soon as that call ends, while a further attempt can still start and would
have the room the gate gives it: it is known to have failed, and what it left is discarded. Restarting fresh beats
continuing a conversation that began with an error.

An attempt that passes a strong check (a command that fails on the base passes on its copy; or, read by
``small/evidence.py``, a quoted line now printed exactly, an asked-for file holding what its own command prints) wins
at once: the attempts still running are stopped. The winner's changes are applied to the real workspace once, each
file only where the user has not changed it meanwhile (else the winner's version is written beside it and the result
says so), after the rewind checkpoint has recorded it. The run's session takes the winner's history, so ``--resume``
continues the winner's conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from opentelemetry import context as otel_context
from opentelemetry import trace

from drivetrain.agent import Agent, Run
from drivetrain.errors import HarnessError
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.calls import HARNESS_CALL
from drivetrain.loop.draft import Deps
from drivetrain.loop.events import Event, Finished, ToolFinished
from drivetrain.loop.result import RunResult
from drivetrain.loop.state import RunState
from drivetrain.messages import Usage
from drivetrain.models.base import Model, ModelRequest, ModelResponse
from drivetrain.pricing import cost_usd
from drivetrain.small.answer import echoes
from drivetrain.small.copies import Applied, Tree, apply_changes, changes, copy_tree, scan
from drivetrain.small.evidence import strong_evidence
from drivetrain.small.misfires import misfire
from drivetrain.small.selection import (
    Attempt,
    AttemptSpec,
    Choice,
    answer_values,
    choose,
    failed_checks,
    harness_words,
    named_commands,
    rerun,
    run_again,
    strong,
    tests_ran,
    work_checks,
)

# A server's attempts run at once, each billed: one unless asked for (``--attempts K``, the settings' key). A local
# model's run one after another, a further one only after a known failure (an early misfire among them), so three
# cost a run that goes well nothing (the measurements: docs/small-profile.md).
DEFAULT_ATTEMPTS = 1
LOCAL_ATTEMPTS = 3
TEMPERATURES = (0.2, 0.5, 0.7, 0.8, 0.9)  # attempt i's, cycling: the first as a single run's, the rest more varied
MIN_START_S = 10.0  # an attempt starts only with at least this much of the wall budget left (and see _room)
MAX_RERUNS = 6  # commands run again on each copy
MISFIRE_CALLS = 2  # an attempt where one of its first this-many calls misfires is abandoned for a fresh one


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
        abandon: bool = True,
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
        self.abandon = abandon  # an attempt whose first calls misfire is left for a fresh one (small/misfires.py)
        self.together = together  # all at once (a model that serves requests in parallel), or one after another
        self._scratch_root = scratch
        self.attempts: list[Attempt] = []
        self.choice: Choice | None = None
        self.applied = Applied()
        self.base_checks: dict[str, tuple[int, str]] = {}
        self._result: RunResult | None = None
        self._base_tree: Tree = {}
        self._base = Path()  # the pristine copy, once made
        self._probe = Path()  # a copy of it that commands run in
        self.cancelled_by = "cancel"
        self._deadline: float | None = None  # when the wall budget ends, once started

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
            # The commands run on the workspace as it was go to a copy of the base ("probe"): what they leave
            # (an output file, a cache) must not be in the base the attempts are copied from.
            probe = self._probe = root / "probe"
            await asyncio.to_thread(copy_tree, base, probe)
            named = named_commands(self.prompt, base)[:MAX_RERUNS]
            for cmd in named:  # on a pristine copy, as the run's own call: what "fixed" is measured against
                got = await rerun(self.main.agent, cmd, probe, self.session_id)
                if got is not None:
                    self.base_checks[cmd] = got
            deadline = self._deadline = None if self.wall_s is None else started + self.wall_s
            width = self.k if self.together else 1
            running = 0
            while True:
                while running < width and len(self.attempts) < self.k and not self._decided():
                    if self.attempts and not self.together and not all(a.known_failed for a in self.attempts):
                        break  # one after another: a further attempt only where the last is known to have failed
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
            calls = 0
            async for event in a.run:
                await queue.put(AttemptEvent(a.spec.index, event))
                if isinstance(event, ToolFinished) and not event.call.id.startswith(HARNESS_CALL):
                    calls += 1
                    why = calls <= MISFIRE_CALLS and misfire(event.call.name, event.result, event.meta, a.spec.cwd)
                    if why and self._may_abandon(a, time.monotonic() - started):
                        # said in the run's "attempts" record; the attempt's own log ends at this call
                        a.abandoned = f"its call {calls} misfired ({why})"
                        if a.run.telemetry is not None:
                            a.run.telemetry.end("abandoned")
                        ended = a.run.left(f"abandoned for a fresh attempt: {a.abandoned}")
                        await queue.put(AttemptEvent(a.spec.index, Finished(ended)))
                        return
            a.result = a.run.result
            a.values = answer_values(a.result.result) if a.result.subtype == "success" else frozenset()
            if a.result.result and any(echoes(a.result.result, said) for said in harness_words(a.result.history)):
                a.hard_fail = "its answer copies what the harness said"
            # the checks' commands run in a copy of its end state: what they leave is not its change
            probe = a.probe = a.spec.cwd.with_name(a.spec.cwd.name + "-probe")
            await asyncio.to_thread(copy_tree, a.spec.cwd, probe)
            for cmd in [*named, *tests_ran(a.result)][:MAX_RERUNS]:
                if cmd not in a.reruns and (got := await rerun(a.agent, cmd, probe, a.spec.session_id)):
                    a.reruns[cmd] = got
            checks = work_checks(a)
            a.objections = checks.standing if checks is not None else ()
            if a.finished and checks is not None and self.early_stop:
                facts = await checks.facts(
                    a.result.result, run=partial(run_again, a.agent, cwd=probe, session_id=a.spec.session_id)
                )
                on_base = partial(run_again, self.main.agent, cwd=self._probe, session_id=self.session_id)
                a.evidence = await strong_evidence(facts, on_base)
        except asyncio.CancelledError:
            a.error = a.error or "stopped"
        except Exception as e:  # one attempt's crash is evidence against it, not the end of the others
            a.error = f"{type(e).__name__}: {e}"
        finally:
            a.took_s = time.monotonic() - started
            queue.put_nowait(None)

    def _may_abandon(self, a: Attempt, took: float) -> bool:
        """An attempt (``took`` so far) may be left for a fresh one when it is the last started, another may still
        start, and the budget leaves that one the room it would be given once this one ended: else a slow attempt
        abandoned late would leave the run nothing but attempts that can no longer start."""
        if not self.abandon or a is not self.attempts[-1] or len(self.attempts) >= self.k:
            return False
        return self._deadline is None or self._deadline - time.monotonic() >= self._room(took)

    def _room(self, ending: float = 0.0) -> float:
        """The budget a further attempt needs: what the quickest finished one took (none finished: what the longest
        took, all of it being too little, counting one ending now after ``ending``), and never less than
        MIN_START_S. One that would be cut short by the budget cannot win: starting it would only cost the user the
        wait."""
        ended = [a for a in self.attempts if a.took_s]
        finished = [a.took_s for a in ended if a.finished]
        need = min(finished) if finished else max([ending, *(a.took_s for a in ended)])
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
                if cmd not in a.reruns and a.probe and (got := await rerun(a.agent, cmd, a.probe, a.spec.session_id)):
                    a.reruns[cmd] = got
        for a in self.attempts:
            a.changed = await asyncio.to_thread(changes, base, self._base_tree, a.spec.cwd)
            a.failed_checks = await failed_checks(a)
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
        if len(self.attempts) < self.k and self._decided() is None and all(a.known_failed for a in self.attempts):
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

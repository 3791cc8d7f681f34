"""The sweep: tasks run by a pool of workers under a concurrency limit and a sweep-wide budget, each result
appended to ``results.jsonl`` as it comes; what is already there is not run again.

Where a task runs is an ``Executor``: here, in this process's event loop (``local``), or as a Ray task
(``batch/cluster.py``). The scheduling, the budget, the results file and the tally are the same for both.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from drivetrain.agent import Agent
from drivetrain.batch.execute import AgentFactory, Scratch, Watch, execute_task
from drivetrain.batch.results import (
    RUNS,
    LinesFile,
    ResultsFile,
    TaskResult,
    TaskRun,
    interrupted,
    now_iso,
    read_results,
    task_runs,
)
from drivetrain.batch.tasks import Task
from drivetrain.loop.budget import total_tokens
from drivetrain.loop.events import Event, ModelResponded, ToolStarted
from drivetrain.messages import ToolUseBlock, Usage
from drivetrain.pricing import cost_usd

Executor = Callable[[Task, "Tally"], Awaitable[TaskResult]]


@dataclass
class Tally:
    """What the sweep has done so far, for the budget and the progress display; live for local runs (each
    model response counts as it comes), at the end of each task for Ray."""

    total: int  # tasks of the sweep, earlier results included
    earlier: int = 0  # finished before this invocation (a resumed sweep)
    done: int = 0  # finished, earlier ones included
    failed: int = 0  # fail or error, earlier ones included
    running: set[str] = field(default_factory=set)
    tokens: int = 0
    cost_usd: float = 0.0
    started: float = field(default_factory=time.monotonic)
    _live: dict[str, tuple[int, float]] = field(default_factory=dict)  # a running task's tokens and cost so far
    on_call: Callable[[str, ToolUseBlock], None] | None = None  # a local task's tool call, about to run
    on_session: Callable[[str, str], None] | None = None  # a local task's run begins: (task id, session id)
    on_usage: Callable[[str, Usage, float], None] | None = None  # a local task's model response: its usage, cost

    def count(self, r: TaskResult) -> None:
        """A finished task: its own totals replace whatever was counted live."""
        tokens, cost = self._live.pop(r.id, (0, 0.0))
        self.running.discard(r.id)
        self.tokens += r.tokens - tokens
        self.cost_usd += (r.cost_usd or 0.0) - cost
        self.done += 1
        self.failed += r.status != "pass"

    def watch(self, task_id: str) -> Watch:
        """For a task's run: an observer that counts each model response as it comes."""

        def watching(agent: Agent, session_id: str) -> Callable[[Event], None]:
            if self.on_session is not None:
                self.on_session(task_id, session_id)

            def observe(event: Event) -> None:
                if isinstance(event, ModelResponded):
                    u = event.response.usage
                    n, c = total_tokens(u), cost_usd(agent.model.name, u) or 0.0
                    tokens, cost = self._live.get(task_id, (0, 0.0))
                    self._live[task_id] = (tokens + n, cost + c)
                    self.tokens += n
                    self.cost_usd += c
                    if self.on_usage is not None:
                        self.on_usage(task_id, u, c)
                elif isinstance(event, ToolStarted) and self.on_call is not None:
                    self.on_call(task_id, event.call)

            return observe

        return watching

    @property
    def runs_per_minute(self) -> float:
        elapsed = time.monotonic() - self.started
        return (self.done - self.earlier) * 60 / elapsed if elapsed > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        rate = self.runs_per_minute
        return (self.total - self.done) * 60 / rate if rate > 0 else None


def local(agents: AgentFactory, scratch: Scratch, resume: dict[str, str] | None = None) -> Executor:
    """Tasks run in this process's event loop, their model responses counted as they come. ``resume``: task id →
    the session of a run an earlier sweep cut short, continued in its workspace (``--resumable``)."""
    resume = resume or {}

    async def execute(task: Task, tally: Tally) -> TaskResult:
        return await execute_task(task, agents, scratch, tally.watch(task.id), resume.get(task.id))

    return execute


def pending(tasks: list[Task], out: Path, rerun_failed: bool = False) -> tuple[list[Task], Tally]:
    """The tasks still to run (those without a result line in ``out``; with ``rerun_failed``, also those whose
    last one is fail or error), and the tally of the others."""
    ids = {t.id for t in tasks}
    earlier = [r for r in read_results(out) if r.id in ids]
    finished = {r.id for r in earlier if r.status == "pass" or not rerun_failed}
    tally = Tally(total=len(tasks))
    for r in earlier:
        if r.id in finished:
            tally.count(r)
        else:
            tally.cost_usd += r.cost_usd or 0.0  # a failed run spent from the budget too
    tally.earlier = tally.done
    return [t for t in tasks if t.id not in finished], tally


def set_aside(todo: list[Task], out: Path) -> tuple[list[Task], list[TaskResult]]:
    """``--no-rerun-interrupted``: the tasks of ``todo`` that an earlier sweep cut short after they had started a
    tool (or without a record of their calls) are not run again, since their tools may have acted outside the
    workspace; each gets an ``error`` line saying so instead. Those cut short before any tool run again."""
    cut_short = interrupted(out)
    acted = {t.id: calls_of(cut_short[t.id]) for t in todo if any(a.acted for a in cut_short.get(t.id, ()))}
    lines = [
        TaskResult(
            task_id,
            "error",
            "interrupted",
            detail=f"an earlier sweep was killed or stopped while this task ran, after it had started {calls}; not "
            "run again (--no-rerun-interrupted), since its tools may have acted outside its workspace. Check what "
            "it did, then `--rerun-failed` runs it again.",
            interrupted=len(cut_short[task_id]),
        )
        for task_id, calls in acted.items()
    ]
    return [t for t in todo if t.id not in acted], lines


def calls_of(cut_short: list[TaskRun]) -> str:
    """``Bash ×2, Write``, or what is known when the calls were not written down."""
    if not all(a.journaled for a in cut_short):
        return "tools unknown (its calls were not written down: a Ray worker that could not write DIR/runs.jsonl)"
    counted = Counter(call for a in cut_short for call in a.calls)
    return ", ".join(f"{name} ×{n}" if n > 1 else name for name, n in counted.items()) or "no tool"


@dataclass
class Sweep:
    out: Path
    execute: Executor
    concurrency: int = 4
    max_budget_usd: float | None = None  # across all tasks: no task starts once this is spent
    on_result: Callable[[TaskResult, Tally], None] = lambda r, t: None
    journal_calls: bool = True  # write each tool call's start to DIR/runs.jsonl (a local sweep's observers can)
    cleanup: Callable[[str], None] | None = None  # given a task id once its result line is written (its workspace)
    repair: bool = True  # cut off a line a kill left unfinished in the files (not when other processes write them)
    _earlier: dict[str, int] = field(default_factory=dict)  # runs of each task that earlier sweeps left unended
    _billed_earlier: dict[str, list[TaskRun]] = field(default_factory=dict)  # those since its last result line
    _billed_now: dict[str, TaskRun] = field(default_factory=dict)  # a running task's usage so far, as journaled
    _starts: LinesFile | None = None

    async def run(self, todo: list[Task], tally: Tally) -> int:
        """Run ``todo``; returns how many tasks were left unstarted because the budget was spent."""
        queue = deque(todo)
        cut_short = interrupted(self.out)
        self._earlier = {task_id: len(cut) for task_id, cut in cut_short.items()}
        self._billed_earlier = since_last_end(task_runs(self.out))
        results, starts = ResultsFile(self.out, self.repair), LinesFile(self.out / RUNS, self.repair)
        self._starts = starts
        if self.journal_calls:
            tally.on_call = lambda task_id, call: starts.write({"id": task_id, "call": call.name, "call_id": call.id})
            tally.on_session = lambda task_id, session_id: starts.write({"id": task_id, "session": session_id})
            tally.on_usage = self._billed
        workers = [
            asyncio.create_task(self._worker(queue, tally, results, starts))
            for _ in range(min(self.concurrency, len(todo)))
        ]
        try:
            await asyncio.gather(*workers)
        finally:  # interrupted, or one worker failed: the others stop too, their runs saved as interrupted
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            results.close()
            starts.close()
        return len(queue)

    def spent(self, tally: Tally) -> bool:
        return self.max_budget_usd is not None and tally.cost_usd >= self.max_budget_usd

    def _billed(self, task_id: str, u: Usage, cost: float) -> None:
        """A model response of a local task, as it is billed: journaled before anything else happens, so that a run
        a kill cuts short still counts in its task's result (``with_earlier_usage``)."""
        line = usage_line(u)
        if self._starts is not None:
            self._starts.write({"id": task_id, "usage": line, "cost": cost})
        now = self._billed_now.setdefault(task_id, TaskRun(task_id, "", True))
        now.usage = [a + b for a, b in zip(now.usage, line, strict=True)]
        now.cost_usd += cost

    async def _worker(self, queue: deque[Task], tally: Tally, results: ResultsFile, starts: LinesFile) -> None:
        while queue and not self.spent(tally):
            task = queue.popleft()
            tally.running.add(task.id)
            # before anything runs: a kill leaves it without its end
            starts.write({"id": task.id, "start": now_iso(), "calls": self.journal_calls})
            result = await self.execute(task, tally)
            result.interrupted = self._earlier.get(task.id, 0)
            with_earlier_usage(result, self._billed_earlier.get(task.id, []), self._billed_now.pop(task.id, None))
            results.append(result)
            starts.write({"id": task.id, "end": now_iso()})
            if self.cleanup is not None:
                await asyncio.to_thread(self.cleanup, task.id)
            tally.count(result)
            self.on_result(result, tally)


def usage_line(u: Usage) -> list[int]:
    return [u.input_tokens, u.output_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens]


def since_last_end(runs: list[TaskRun]) -> dict[str, list[TaskRun]]:
    """Each task's runs cut short (never ended) since its last run that ended (whose result line counted those
    before)."""
    cut: dict[str, list[TaskRun]] = {}
    for run in runs:
        if run.ended:
            cut.pop(run.id, None)
        else:
            cut.setdefault(run.id, []).append(run)
    return cut


def with_earlier_usage(result: TaskResult, cut_short: list[TaskRun], now: TaskRun | None) -> None:
    """Add to ``result`` what the upstream billed the earlier runs of its task that a kill cut short, as their
    journal says. A run whose session ``result`` continued (resumed) counts what its session saved of it; only what
    the journal holds beyond that (an answer read, the kill striking before its record) is added: the journal of
    the runs of that session, this one's included (``now``), less what the result counts."""
    tokens = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    same = [r for r in cut_short if r.session is not None and r.session == result.session_id]
    missing, cost = [0, 0, 0, 0], 0.0
    for run in cut_short:
        if not any(run is r for r in same):
            missing = [a + b for a, b in zip(missing, run.usage, strict=True)]
            cost += run.cost_usd
    if same:
        ours = [*same, *([now] if now is not None else [])]
        journaled = [sum(k) for k in zip(*[r.usage for r in ours], strict=True)]
        counted = [getattr(result, name) for name in tokens]
        missing = [a + max(0, j - c) for a, j, c in zip(missing, journaled, counted, strict=True)]
        cost += max(0.0, sum(r.cost_usd for r in ours) - (result.cost_usd or 0.0))
    for name, n in zip(tokens, missing, strict=True):
        setattr(result, name, getattr(result, name) + n)
    if result.cost_usd is not None:
        result.cost_usd += cost

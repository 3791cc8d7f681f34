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
)
from drivetrain.batch.tasks import Task
from drivetrain.loop.budget import total_tokens
from drivetrain.loop.events import Event, ModelResponded, ToolStarted
from drivetrain.messages import ToolUseBlock
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
        return "tools unknown (a Ray sweep does not write its calls down)"
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
    _earlier: dict[str, int] = field(default_factory=dict)  # runs of each task that earlier sweeps left unended

    async def run(self, todo: list[Task], tally: Tally) -> int:
        """Run ``todo``; returns how many tasks were left unstarted because the budget was spent."""
        queue = deque(todo)
        self._earlier = {task_id: len(cut) for task_id, cut in interrupted(self.out).items()}
        results, starts = ResultsFile(self.out), LinesFile(self.out / RUNS)
        if self.journal_calls:
            tally.on_call = lambda task_id, call: starts.write({"id": task_id, "call": call.name, "call_id": call.id})
            tally.on_session = lambda task_id, session_id: starts.write({"id": task_id, "session": session_id})
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

    async def _worker(self, queue: deque[Task], tally: Tally, results: ResultsFile, starts: LinesFile) -> None:
        while queue and not self.spent(tally):
            task = queue.popleft()
            tally.running.add(task.id)
            # before anything runs: a kill leaves it without its end
            starts.write({"id": task.id, "start": now_iso(), "calls": self.journal_calls})
            result = await self.execute(task, tally)
            result.interrupted = self._earlier.get(task.id, 0)
            results.append(result)
            starts.write({"id": task.id, "end": now_iso()})
            if self.cleanup is not None:
                await asyncio.to_thread(self.cleanup, task.id)
            tally.count(result)
            self.on_result(result, tally)

"""``drivetrain batch --workers N``: a local sweep over N worker processes (one event loop is one core).

Each worker runs its share of the tasks (every N-th) as a local sweep does, ``--concurrency`` split between them,
and appends its result lines and its runs' journal to the sweep's one ``results.jsonl`` and ``runs.jsonl``: each
line is one ``write`` to a file opened with ``O_APPEND``, so lines of several processes never mix, and a kill
leaves whole lines. The shares are disjoint, so no two processes run or resume one task. This process follows
the results file (progress, the tally) and, when a worker dies (a SIGKILL, the OOM killer), starts another for
the tasks of its share that have no result line: those it had finished are not run again, those it was running
resume where they stopped (their sessions and workspaces are on this machine)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Protocol

from drivetrain.batch.execute import AgentFactory, Scratch
from drivetrain.batch.results import RESULTS, RUNS, LinesFile, ResultsFile, TaskResult, TaskRun, interrupted
from drivetrain.batch.sweep import Sweep, Tally, local
from drivetrain.batch.tasks import Task
from drivetrain.batch.workspace import remove
from drivetrain.host.procs import die_with_parent

RESTARTS = 3  # a share whose workers keep dying is given up after this many replacements (the sweep exits 1)
Report = tuple[dict[str, int], int]  # a worker's retries by fault, and its tasks left unstarted by the budget


def shares(todo: list[Task], n: int) -> list[list[Task]]:
    return [part for k in range(n) if (part := todo[k::n])]


class Agents(AgentFactory, Protocol):
    """A worker's agents (``cli.batch.FlagAgents``): made from the flags, counting their retries, closed at the end."""

    def retries(self) -> Counter[str]: ...

    async def aclose(self) -> None: ...


def _work(
    make: Callable[[argparse.Namespace], Agents],
    args: argparse.Namespace,
    part: list[Task],
    resume: dict[str, str],
    concurrency: int,
    budget: float | None,
    q: Queue[Report],
    parent: int,
) -> None:
    """In a worker process: its share as a local sweep, into the sweep's files; then what it retried. It dies with
    the process that started it (a ``kill -9`` of the sweep ends its workers, which a rerun would otherwise meet)."""
    die_with_parent(parent)
    agents = make(args)
    sweep = Sweep(
        args.out,
        local(agents, Scratch(args.out / "workspaces", args.keep_workspaces, args.resumable), resume),
        concurrency=concurrency,
        max_budget_usd=budget,
        cleanup=(lambda task_id: remove(args.out / "workspaces" / task_id))
        if args.resumable and not args.keep_workspaces
        else None,
        repair=False,  # the others are writing: the parent repaired the files before they started
    )

    async def run() -> int:
        try:
            return await sweep.run(part, Tally(total=len(part)))
        finally:
            await agents.aclose()

    unstarted = asyncio.run(run())
    q.put((dict(agents.retries()), unstarted))
    # the interpreter's exit collects once more, walking every object left (the SDK's types, the runs' leftovers:
    # seconds of a worker's exit, counted in the sweep's time, in a py-spy profile): out of its way, the OS frees them
    gc.freeze()


class Workers:
    """The worker processes of one sweep, and what this process learns of them."""

    def __init__(
        self,
        make: Callable[[argparse.Namespace], Agents],
        args: argparse.Namespace,
        resumable: Callable[[dict[str, list[TaskRun]]], dict[str, str]],
        on_result: Callable[[TaskResult], None],
    ):
        self.make = make  # picklable (a class): each worker makes its agents with it
        self.args = args
        self.resumable = resumable  # of these tasks cut short, those that resume (task id → session)
        self.on_result = on_result
        self.retries: Counter[str] = Counter()
        self.unstarted = 0
        self.died: list[str] = []  # what was said of each worker that died
        self._ctx = multiprocessing.get_context("spawn")  # no fork of a process with threads and an event loop
        self._q: Queue[Report] = self._ctx.Queue()
        self._offset = 0
        self._n = 1  # workers at once
        self._seen: set[str] = set()

    def run(self, todo: list[Task], resume: dict[str, str]) -> None:
        out: Path = self.args.out
        for f in (ResultsFile(out), LinesFile(out / RUNS)):  # a line a kill left unfinished, cut off once
            f.close()
        self._offset = (out / RESULTS).stat().st_size
        n = min(self.args.workers, len(todo), self.args.concurrency)
        self._n = n
        running: dict[int, tuple[BaseProcess, list[Task], int]] = {}
        for k, part in enumerate(shares(todo, n)):
            running[k] = (self._start(part, resume, self._concurrency(k, n)), part, 0)
        try:
            while running:
                time.sleep(0.1)
                self._follow()
                for k, (proc, part, restarts) in list(running.items()):
                    if proc.exitcode is None:
                        continue
                    del running[k]
                    self._follow()
                    left = [t for t in part if t.id not in self._seen]
                    if proc.exitcode == 0 or not left:
                        continue
                    said = f"worker {k + 1} died (exit {proc.exitcode}) with {len(left)} tasks of its share left"
                    if restarts >= RESTARTS:
                        self.died.append(f"{said}; given up after {RESTARTS} replacements")
                        continue
                    self.died.append(f"{said}; another takes them over")
                    cut = interrupted(out)
                    again = self.resumable({t.id: cut[t.id] for t in left if t.id in cut})
                    running[k] = (self._start(left, again, self._concurrency(k, n)), left, restarts + 1)
        finally:
            for proc, _, _ in running.values():  # interrupted (Ctrl-C reached them too): wait for them to stop
                proc.join(10)
                if proc.exitcode is None:
                    proc.kill()
            self._follow()
            while not self._q.empty():
                retries, unstarted = self._q.get()
                self.retries.update(retries)
                self.unstarted += unstarted

    def _concurrency(self, k: int, n: int) -> int:
        c: int = self.args.concurrency
        return c // n + (1 if k < c % n else 0)

    def _start(self, part: list[Task], resume: dict[str, str], concurrency: int) -> BaseProcess:
        mine = {t.id: resume[t.id] for t in part if t.id in resume}
        budget = None if self.args.sweep_budget_usd is None else self.args.sweep_budget_usd / self._n
        proc = self._ctx.Process(
            target=_work, args=(self.make, self.args, part, mine, concurrency, budget, self._q, os.getpid())
        )
        proc.start()
        return proc

    def _follow(self) -> None:
        """The result lines written since last time (whole lines only), to the tally and the progress display."""
        path = self.args.out / RESULTS
        with path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        whole = data[: data.rfind(b"\n") + 1]
        self._offset += len(whole)
        for line in whole.decode().splitlines():
            try:
                r = TaskResult.from_json(json.loads(line))
            except (ValueError, TypeError):
                continue
            self._seen.add(r.id)
            self.on_result(r)

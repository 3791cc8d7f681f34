"""Batch sweep benchmark: many scripted runs in one process, as ``drivetrain batch`` runs them (the same agents
from the same flags, the same scheduler, workspaces, session log and results file), against the scripted server in
a process of its own on loopback. Prints figures; asserts nothing.

1. Throughput: ``--runs`` runs (default 1,000) of ``--turns`` turns each (a Write, a Read, then the answer),
   ``--concurrency`` at a time: runs/s and turns/s, and the CPU time of this process per turn and of the server's
   per request (one event loop is one core: its CPU per turn bounds the turns/s).
2. Memory per concurrent run: the peak RSS of a process running ``--memory-runs`` runs all at once (every
   run's first answer is delayed 2 s at the server, so all of them are in flight together) against one
   running a single run; the difference divided by the extra runs.

    python benchmarks/bench_batch.py [--runs 1000] [--concurrency 64] [--memory-runs 200] [--skip-memory]
        [--journal both|resumable|held] [--workers 1 2]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import resource
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from drivetrain.batch.execute import Scratch
from drivetrain.batch.results import read_results
from drivetrain.batch.sweep import Sweep, local, pending
from drivetrain.batch.tasks import Task
from drivetrain.batch.workspace import remove
from drivetrain.cli.batch import FlagAgents, build_parser
from drivetrain.cli.batch_workers import Workers
from drivetrain.testing import ScriptedServer, reply, respond, tool_call

LOOP = asyncio.new_event_loop()


def _prompt(i: int) -> str:
    return f"run {i}: write and read a note"


def _script(i: int, out: Path, turns: int, delay: float) -> list:
    note = str(out / "workspaces" / f"r{i}" / "note.txt")
    calls = [tool_call("Write", {"file_path": note, "content": f"note {i}\n"})] + [
        tool_call("Read", {"file_path": note}) for _ in range(turns - 2)
    ]
    return [respond([c], delay=delay if k == 0 else 0.0) for k, c in enumerate(calls)] + [reply(f"run {i} done")]


def _serve(runs: int, out: Path, turns: int, delay: float, conn) -> None:
    with ScriptedServer({_prompt(i): _script(i, out, turns, delay) for i in range(runs)}) as server:
        conn.send(server.url)
        conn.recv()  # until the sweep is done
        conn.send((len(server.requests), time.process_time()))
        server.take_remaining()  # a partial sweep (interrupted benchmark) leaves steps: not a finding here


@contextmanager
def server_process(runs: int, out: Path, turns: int, delay: float = 0.0) -> Iterator[tuple[str, dict]]:
    mp = multiprocessing.get_context("spawn")
    ours, theirs = mp.Pipe()
    proc = mp.Process(target=_serve, args=(runs, out, turns, delay, theirs), daemon=True)
    proc.start()
    got: dict = {}
    try:
        yield ours.recv(), got
    finally:
        ours.send("done")
        got["requests"], got["server_cpu"] = ours.recv()
        proc.join(10)


def sweep(
    url: str, out: Path, runs: int, concurrency: int, first: int = 0, resumable: bool = False
) -> tuple[float, float]:
    """Run the sweep here (``resumable``: as ``drivetrain batch`` by default, each record written as it comes and
    each workspace removed once its result line is written; else ``--no-resumable``); returns its wall and CPU time
    in seconds."""
    os.environ.update(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="k", DRIVETRAIN_HOME=str(out / "home"))
    args = build_parser().parse_args(
        [
            "tasks.jsonl",
            "--out",
            str(out),
            "--model",
            "claude-sonnet-4-6",
            "--permission-mode",
            "acceptEdits",
            "--no-checkpoints",
            "--resumable" if resumable else "--no-resumable",
        ]
    )
    agents = FlagAgents(args)
    agents.model(None, "claude-sonnet-4-6")  # the SDK's import and client, made before the clock starts
    tasks = [Task(id=f"r{i}", prompt=_prompt(i)) for i in range(first, first + runs)]
    where = out / "workspaces"
    cleanup = (lambda task_id: remove(where / task_id)) if resumable else None
    s = Sweep(out, local(agents, Scratch(where, resumable=resumable)), concurrency=concurrency, cleanup=cleanup)
    todo, tally = pending(tasks, out)
    started, cpu = time.perf_counter(), time.process_time()
    LOOP.run_until_complete(s.run(todo, tally))  # one loop: a client of an earlier sweep closes in its own
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    LOOP.run_until_complete(agents.aclose())
    return wall, cpu


def throughput(runs: int, concurrency: int, turns: int, resumable: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        with server_process(runs, out, turns) as (url, got):
            wall, cpu = sweep(url, out, runs, concurrency, resumable=resumable)
        results = read_results(out)
    passed = sum(r.status == "pass" for r in results)
    print(
        f"{runs} runs × {turns} turns, {concurrency} at a time, {'resumable' if resumable else '--no-resumable'}: "
        f"{wall:.2f} s → {runs / wall:.1f} runs/s, {runs * turns / wall:.1f} turns/s "
        f"({passed} passed, {got['requests']} requests); CPU {cpu:.2f} s, {cpu * 1000 / (runs * turns):.2f} ms a "
        f"turn → {runs * turns / cpu:.0f} turns per CPU-second; the server's CPU {got['server_cpu']:.2f} s, "
        f"{got['server_cpu'] * 1000 / got['requests']:.2f} ms a request; load average {os.getloadavg()[0]:.1f}"
    )


def across_workers(runs: int, concurrency: int, turns: int, workers: int, quiet: bool = False) -> None:
    """The same sweep as ``drivetrain batch --workers N`` runs it (``cli/batch_workers.py``): N worker processes
    sharing the results file and the journal, this process following the results; CPU of all of them."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        with server_process(runs, out, turns) as (url, _):
            os.environ.update(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="k", DRIVETRAIN_HOME=str(out / "home"))
            args = build_parser().parse_args(
                [
                    *("tasks.jsonl", "--out", str(out), "--model", "claude-sonnet-4-6"),
                    *("--permission-mode", "acceptEdits", "--no-checkpoints", "--resumable"),
                    *("--workers", str(workers), "--concurrency", str(concurrency)),
                ]
            )
            todo = [Task(id=f"r{i}", prompt=_prompt(i)) for i in range(runs)]
            done = [0]
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            started, cpu = time.perf_counter(), time.process_time()
            Workers(FlagAgents, args, lambda cut: {}, lambda r: done.__setitem__(0, done[0] + 1)).run(todo, {})
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (
                time.process_time() - cpu + (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
            )
        passed = sum(r.status == "pass" for r in read_results(out))
    if quiet:
        return
    print(
        f"{runs} runs × {turns} turns, {concurrency} at a time, {workers} worker process(es): {wall:.2f} s → "
        f"{runs * turns / wall:.1f} turns/s ({passed} passed); CPU of the sweep's processes {cpu:.2f} s, "
        f"{cpu * 1000 / (runs * turns):.2f} ms a turn; load average {os.getloadavg()[0]:.1f}"
    )


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _peak(runs: int, turns: int, traced: bool, conn) -> None:
    """In a fresh process: how much the Python heap (``traced``: tracemalloc) or the RSS (sampled every 10 ms;
    without tracemalloc, whose own records would count) grew at its highest while ``runs`` runs were in flight
    at once, over what it was just before."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        with server_process(runs + 1, out, turns, delay=2.0) as (url, _):
            highest, done = [0], threading.Event()

            def sample() -> None:
                while not done.wait(0.01):
                    highest[0] = max(highest[0], _rss_kib())

            sweep(url, out, 1, 1)  # the first run's one-time costs (imports, the SDK's lazy types) are not the runs'
            before = _rss_kib()
            if traced:
                tracemalloc.start()
            else:
                threading.Thread(target=sample, daemon=True).start()
            sweep(url, out, runs, runs, first=1)
            grew = tracemalloc.get_traced_memory()[1] // 1024 if traced else max(0, highest[0] - before)
            tracemalloc.stop()
            done.set()
        assert sum(r.status == "pass" for r in read_results(out)) == runs + 1
    conn.send(grew)


def peak_kib(runs: int, turns: int, traced: bool) -> int:
    mp = multiprocessing.get_context("spawn")
    ours, theirs = mp.Pipe()
    proc = mp.Process(target=_peak, args=(runs, turns, traced, theirs))
    proc.start()
    got = ours.recv()
    proc.join(30)
    return got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--memory-runs", type=int, default=200)
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument(
        "--journal",
        choices=("both", "resumable", "held"),
        default="both",
        help="the sweep as by default (resumable: each record written as it comes), with --no-resumable (held "
        "until the task ends), or both one after the other",
    )
    p.add_argument(
        "--workers",
        type=int,
        nargs="*",
        default=None,
        metavar="N",
        help="instead: the sweep as `drivetrain batch --workers N` runs it, for each N given (e.g. --workers 1 2)",
    )
    a = p.parse_args()
    if a.workers:
        # not measured: the first sweep of a process pays for the worker processes' first imports from a cold disk
        across_workers(min(a.runs, 50), a.concurrency, a.turns, max(a.workers), quiet=True)
        for n in a.workers:
            across_workers(a.runs, a.concurrency, a.turns, n)
        return
    for resumable in {"both": (True, False), "resumable": (True,), "held": (False,)}[a.journal]:
        throughput(a.runs, a.concurrency, a.turns, resumable)
    if not a.skip_memory:
        n = a.memory_runs
        for traced, what in ((True, "Python heap (tracemalloc)"), (False, "RSS")):
            one, many = peak_kib(1, a.turns, traced), peak_kib(n, a.turns, traced)
            print(
                f"{what} grown while runs are in flight: 1 at once +{one:,} KiB, {n} at once +{many:,} KiB → "
                f"{(many - one) / (n - 1):.0f} KiB per concurrent run"
            )


if __name__ == "__main__":
    main()

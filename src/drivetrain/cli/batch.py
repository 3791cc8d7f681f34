"""``drivetrain batch TASKS.jsonl --out DIR``: many tasks, each an ordinary session in a scratch workspace, here
(one process, one event loop) or on Ray; ``drivetrain batch report DIR``: what the sweep gave."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Protocol, runtime_checkable

from drivetrain.agent import Agent
from drivetrain.batch.execute import Held, Scratch, Written
from drivetrain.batch.results import RUNS, ResultsFile, TaskResult, TaskRun, interrupted, read_results
from drivetrain.batch.summary import counts
from drivetrain.batch.sweep import Executor, Sweep, Tally, calls_of, local, pending, set_aside
from drivetrain.batch.tasks import Task, TaskFileError, load_tasks
from drivetrain.batch.workspace import remove
from drivetrain.cli import build
from drivetrain.cli.batch_progress import Progress
from drivetrain.cli.main import add_run_arguments
from drivetrain.errors import HarnessError
from drivetrain.models.base import Model
from drivetrain.models.resolve import resolve_model
from drivetrain.sessions.open import open_store
from drivetrain.sessions.store import SessionNotFound, SessionStore


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="drivetrain batch",
        conflict_handler="resolve",
        description="Run every task of TASKS.jsonl (one JSON object a line: id, prompt, and optionally setup, "
        "workspace, check, max_turns, model, provider, max_budget_usd, env) as its own session in a "
        "fresh workspace; one result line per task in DIR/results.jsonl. Run the same command again "
        "to continue an interrupted sweep. `drivetrain batch report DIR` sums it up.",
    )
    p.add_argument("tasks", type=Path, metavar="TASKS.jsonl")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="where results.jsonl goes")
    p.add_argument("--concurrency", type=int, default=4, help="tasks running at once (default 4)")
    p.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="worker processes of a local sweep, sharing --concurrency (default: the number of cores, "
        f"{os.cpu_count() or 1} here)",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run the tasks as Ray tasks on the cluster at ADDRESS (none: a local Ray instance)",
    )
    p.add_argument(
        "--keep-workspaces",
        action="store_true",
        help="keep each task's workspace (DIR/workspaces/ID) and name it in its result line",
    )
    p.add_argument("--rerun-failed", action="store_true", help="run again the tasks whose result is fail or error")
    p.add_argument(
        "--no-rerun-interrupted",
        dest="rerun_interrupted",
        action="store_false",
        help="do not run again the tasks an earlier sweep was killed or stopped in the middle of (their tools may "
        "have acted outside the workspace): each gets an error line (subtype interrupted) instead",
    )
    p.add_argument(
        "--resumable",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="(the default for local sweeps) write each record of a task's session as it comes and keep the "
        "workspace of a task the sweep is stopped in, so that the next sweep resumes such a task where it stopped "
        "(no tool whose result was saved runs again) instead of starting it over; --no-resumable holds each task's "
        "records until it ends (less CPU a turn; a task cut short starts over)",
    )
    p.add_argument(
        "--exit-zero",
        action="store_true",
        help="exit 0 even when tasks ended in error (the counts are printed all the same)",
    )
    add_run_arguments(p)
    build.add_arguments(p)
    # in a sweep, --max-budget-usd is the whole sweep's; a task's own is --task-max-budget-usd (or its line's)
    p.add_argument(
        "--max-budget-usd",
        dest="sweep_budget_usd",
        type=float,
        default=None,
        help="across all tasks: no task starts once the sweep has cost this",
    )
    p.add_argument(
        "--task-max-budget-usd",
        dest="max_budget_usd",
        type=float,
        default=None,
        help="each task stops before a request once it cost this (a task's max_budget_usd wins)",
    )
    return p


@runtime_checkable
class _Closable(Protocol):
    """A model holding a client (an aiohttp session) that must be closed in the event loop that opened it."""

    async def aclose(self) -> None: ...


@runtime_checkable
class _Retrying(Protocol):
    """A model that counts its retries by fault (the Anthropic and OpenAI-compatible providers)."""

    retries: Counter[str]


class FlagAgents:
    """Agents built from the flags as ``drivetrain -p`` builds one, with a task's overrides; one store and one model
    per (provider, model) shared by the runs of this process, each task's records held until it ends (``Held``).
    Pickled for Ray with the flags only."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self._store: SessionStore | None = None
        self._models: dict[tuple[str | None, str | None], Model] = {}

    def __getstate__(self) -> dict[str, argparse.Namespace]:
        return {"args": self.args}

    def __setstate__(self, state: dict[str, argparse.Namespace]) -> None:
        FlagAgents.__init__(self, state["args"])

    def model(self, provider: str | None, name: str | None) -> Model:
        key = (provider, name)
        if key not in self._models:
            self._models[key] = resolve_model(provider, name, batch=True)
        return self._models[key]

    def retries(self) -> Counter[str]:
        """The retries of this process's models so far, by fault (docs/faults.md)."""
        total: Counter[str] = Counter()
        for model in self._models.values():
            if isinstance(model, _Retrying):
                total.update(model.retries)
        return total

    async def aclose(self) -> None:
        """Close the models' clients in this event loop (an aiohttp session left open is warned about at exit)."""
        for model in self._models.values():
            if isinstance(model, _Closable):
                await model.aclose()

    def __call__(self, task: Task, cwd: Path, session_id: str) -> Agent:
        own = {
            "max_turns": task.max_turns,
            "model": task.model,
            "provider": task.provider,
            "max_budget_usd": task.max_budget_usd,
        }
        args = argparse.Namespace(**{**vars(self.args), **{k: v for k, v in own.items() if v is not None}})
        if self._store is None:
            self._store = open_store()
        # resumable: each record written as it comes (a killed task's session is there to resume), else held
        store: SessionStore = Written(self._store) if args.resumable else Held(self._store)
        return build.build_agent(
            args, cwd, session_id, store=store, model=self.model(args.provider, args.model), env=task.env
        )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[2:] if argv is None else argv
    if argv[:1] == ["report"]:
        from drivetrain.cli.batch_report import main as report_main

        return report_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.concurrency < 1 or args.workers < 1:
        print("drivetrain batch: --concurrency and --workers must be at least 1.", file=sys.stderr)
        return 2
    try:
        tasks = load_tasks(args.tasks)
    except TaskFileError as e:
        print(f"drivetrain batch: {e}", file=sys.stderr)
        return 2
    if args.resumable and args.ray is not None:
        print("drivetrain batch: --resumable works with local sweeps only, not with --ray.", file=sys.stderr)
        return 2
    if args.resumable is None:
        args.resumable = args.ray is None
    todo, tally = pending(tasks, args.out, args.rerun_failed)
    todo, resume = _interrupted_earlier(args, todo, tally)
    if not todo:
        print(
            f"drivetrain batch: all {len(tasks)} tasks have a result in {args.out / 'results.jsonl'}"
            + ("" if args.rerun_failed else " (--rerun-failed runs the failed ones again)")
            + ".",
            file=sys.stderr,
        )
        return _outcome(args, tasks)
    if not args.keep_workspaces:
        args.no_checkpoints = True  # a workspace thrown away after its run has nothing to rewind
    if args.ray is None and min(args.workers, args.concurrency, len(todo)) > 1:
        return _in_workers(args, tasks, todo, resume, tally)
    agents = FlagAgents(args)
    try:
        execute = _executor(args, agents, todo, resume)
    except HarnessError as e:
        print(f"drivetrain batch: {e}", file=sys.stderr)
        return 1
    progress = Progress(sys.stderr)
    sweep = Sweep(
        args.out,
        execute,
        concurrency=args.concurrency,
        max_budget_usd=args.sweep_budget_usd,
        on_result=progress.finished,
        journal_calls=args.ray is None,  # a Ray task's observers run in its worker
        # --resumable: a workspace goes once its task's result line is written, so that a kill before leaves it
        cleanup=(lambda task_id: remove(args.out / "workspaces" / task_id))
        if args.resumable and not args.keep_workspaces
        else None,
    )
    try:
        with progress.showing(tally, len(todo)):
            unstarted = asyncio.run(_run(sweep, agents, todo, tally))
    except KeyboardInterrupt:
        return _interrupted(tally)
    except HarnessError as e:
        print(
            f"drivetrain batch: {e}\n{tally.done} of {tally.total} tasks have a result. Run the same command "
            "again to go on.",
            file=sys.stderr,
        )
        return 1
    finally:
        if args.ray is not None:
            from drivetrain.batch.cluster import shutdown

            shutdown()
    progress.summary(tally, args.out)
    if retries := agents.retries():  # the models of this process: a local sweep's (on Ray they are the workers')
        said = ", ".join(f"{kind} {n}" for kind, n in retries.most_common())
        print(f"drivetrain batch: {retries.total()} requests retried after a fault ({said})", file=sys.stderr)
    code = _outcome(args, tasks)
    if unstarted:
        print(
            f"drivetrain batch: the sweep's budget (${args.sweep_budget_usd:g}) is spent: {unstarted} tasks were "
            "not started. Raise --max-budget-usd and run the same command again to run them.",
            file=sys.stderr,
        )
        return 1
    return code


def _in_workers(
    args: argparse.Namespace, tasks: list[Task], todo: list[Task], resume: dict[str, str], tally: Tally
) -> int:
    """The sweep over ``--workers`` processes (``cli/batch_workers.py``), followed from here."""
    from drivetrain.cli.batch_workers import Workers

    for task in todo:  # a missing key or an unknown provider is said once, before anything runs
        try:
            resolve_model(task.provider or args.provider, task.model or args.model, batch=True)
        except HarnessError as e:
            print(f"drivetrain batch: {e}", file=sys.stderr)
            return 1
    progress = Progress(sys.stderr)

    def finished(r: TaskResult) -> None:
        tally.count(r)
        progress.finished(r, tally)

    workers = Workers(FlagAgents, args, lambda cut: _resumable(args, cut) if args.resumable else {}, finished)
    try:
        with progress.showing(tally, len(todo)):
            workers.run(todo, resume)
    except KeyboardInterrupt:
        return _interrupted(tally)
    progress.summary(tally, args.out)
    for said in workers.died:
        print(f"drivetrain batch: {said}.", file=sys.stderr)
    if workers.retries:
        said = ", ".join(f"{kind} {n}" for kind, n in workers.retries.most_common())
        print(f"drivetrain batch: {workers.retries.total()} requests retried after a fault ({said})", file=sys.stderr)
    code = _outcome(args, tasks)
    if workers.unstarted:
        print(
            f"drivetrain batch: the sweep's budget (${args.sweep_budget_usd:g}, shared equally by the workers) is "
            f"spent: {workers.unstarted} tasks were not started. Raise --max-budget-usd and run the same command "
            "again to run them.",
            file=sys.stderr,
        )
        return 1
    return 1 if any("given up" in said for said in workers.died) else code


def _interrupted_earlier(args: argparse.Namespace, todo: list[Task], tally: Tally) -> tuple[list[Task], dict[str, str]]:
    """Say which tasks an earlier sweep cut short (killed, stopped), which tools they had started, and what
    running them again means. With --resumable, those with a saved session and workspace resume (the returned
    map: task id → session); with --no-rerun-interrupted, those that started a tool are set aside as errors."""
    cut_short = interrupted(args.out)
    ids = [t.id for t in todo if t.id in cut_short]
    if not ids:
        return todo, {}
    said = f"drivetrain batch: {len(ids)} tasks were running when an earlier sweep was killed or stopped"
    resume = _resumable(args, {i: cut_short[i] for i in ids}) if args.resumable else {}
    acted = [i for i in ids if any(a.acted for a in cut_short[i]) and i not in resume]
    if resume:
        said += (
            f"; {len(resume)} resume their sessions in their workspaces, each call that was running "
            "answered as interrupted, for the model to decide"
        )
    if quiet := len(ids) - len(acted) - len(resume):
        said += f"; {quiet} had not started a tool and start over"
    if not acted:
        print(f"{said}.", file=sys.stderr)
        return todo, resume
    listed = "; ".join(f"{i} ({calls_of(cut_short[i])})" for i in acted[:20]) + (" …" if len(acted) > 20 else "")
    if args.rerun_interrupted:
        print(
            f"{said}; {len(acted)} had started tools: {listed}. They start over in a fresh workspace; whatever those "
            "tools did outside it (a push, a deploy, a payment) may happen again. --no-rerun-interrupted sets them "
            "aside instead.",
            file=sys.stderr,
        )
        return todo, resume
    _, lines = set_aside([t for t in todo if t.id not in resume], args.out)
    results = ResultsFile(args.out)
    try:
        for r in lines:
            results.append(r)
            tally.count(r)
    finally:
        results.close()
    tally.earlier = tally.done
    print(
        f"{said}; {len(acted)} had started tools: {listed}. Not run again (--no-rerun-interrupted): each has an "
        "error line (subtype interrupted); check what they did, then --rerun-failed runs them.",
        file=sys.stderr,
    )
    set_aside_ids = {r.id for r in lines}
    return [t for t in todo if t.id not in set_aside_ids], resume


def _resumable(args: argparse.Namespace, cut_short: dict[str, list[TaskRun]]) -> dict[str, str]:
    """The tasks whose last run left a session that reached the store and a workspace to resume it in."""
    store = open_store()
    resume = {}
    for task_id, runs in cut_short.items():
        session = runs[-1].session
        if session and (args.out / "workspaces" / task_id).is_dir() and _prompted(store, session):
            resume[task_id] = session
    return resume


def _prompted(store: SessionStore, session_id: str) -> bool:
    """The session's log holds its prompt (read, not looked up in an index a kill may have left behind). Before
    that record no request went out and no tool ran: a task killed so early simply starts over."""
    try:
        return any(r["kind"] == "prompt" for r in store.read(session_id))
    except SessionNotFound:
        return False


def _outcome(args: argparse.Namespace, tasks: list[Task]) -> int:
    """The counts by status and subtype on stderr; 1 if any task ended in error (unless --exit-zero)."""
    ids = {t.id for t in tasks}
    results = [r for r in read_results(args.out) if r.id in ids]
    print(f"drivetrain batch: {counts(results)}", file=sys.stderr)
    errors = sum(r.status == "error" for r in results)
    if errors and not args.exit_zero:
        print(
            f"drivetrain batch: {errors} tasks ended in error (see `drivetrain batch report {args.out}`; "
            "--rerun-failed runs them again); exit status 1 (--exit-zero: 0).",
            file=sys.stderr,
        )
        return 1
    return 0


async def _run(sweep: Sweep, agents: FlagAgents, todo: list[Task], tally: Tally) -> int:
    try:
        return await sweep.run(todo, tally)
    finally:
        await agents.aclose()


def _executor(args: argparse.Namespace, agents: FlagAgents, tasks: list[Task], resume: dict[str, str]) -> Executor:
    if args.ray is not None:
        from drivetrain.batch.cluster import ray_executor

        out = args.out.resolve()
        return ray_executor(args.ray or None, agents, Scratch(out / "workspaces", args.keep_workspaces), out / RUNS)
    for task in tasks:  # a missing key or an unknown provider is said once, before anything runs
        agents.model(task.provider or args.provider, task.model or args.model)
    return local(agents, Scratch(args.out / "workspaces", args.keep_workspaces, args.resumable), resume)


def _interrupted(tally: Tally) -> int:
    print(
        f"drivetrain batch: interrupted; {tally.done} of {tally.total} tasks have a result. Run the same "
        "command again to go on.",
        file=sys.stderr,
    )
    return 130

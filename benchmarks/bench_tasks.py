"""Small coding tasks, end to end: how often the local model solves them through drivetrain vs a naive loop.

Each task is a kind of task (``benchmarks/tasks.py`` lists them): a generator fills a fresh workspace
from a seed, one of the kind's wordings (``benchmarks/wordings.py``) words the user's prompt, and a
checker (a program) decides afterwards, from the workspace and the final answer, whether the task was
solved, and says why. Every (task, run) pair gets one seed and one wording, so every config sees the same
workspace and the same prompt, in the same path, with the same file times and the pair's ``--seed``, each run
loading the model itself (no resident model process: docs/benchmarks.md says why); runs go task by task with the
configs interleaved, so machine load falls on all of them alike. Run r of a task takes the next wording of those
selected (``--split``, ``--lang``, ``--wording``), so ``--runs N`` goes round them; each result line records its
wording, language and split. Report numbers from ``--split heldout`` and ``--split fresh`` (docs/benchmarks.md says
why, and when a wording moves to tune).

Every batch takes seeds no measurement used before: ``--seed-base N`` (run r uses workspace seed N*1000 + r, the
same for every config), recorded in ``benchmarks/results/seeds-used.jsonl`` before the first run; a base already
there is refused unless the batch resumes the same results file (``benchmarks/seed_ledger.py``); without
``--seed-base``, a fresh one. Agents run with the CLI's own turn cap and a wall budget (``--max-wall-time``, 60 s),
with a PATH that leaves out this virtualenv (a model's ``pip install`` must not change the benchmark's interpreter).

Configs (``--config``, repeatable; default ``drivetrain`` and ``naive``):
  drivetrain                 ``drivetrain -p TASK --output-format json --verbose --provider local
                             --max-wall-time 60 --permission-mode bypassPermissions`` + the task's arguments
                             (e.g. ``--disallowedTools "Bash(wc:*)"``), a subprocess in the workspace
  naive                      the same GGUF in llama_cpp.Llama (loaded once), plain prompt, regex parsing,
                             drivetrain's own tool classes, no grammar (``benchmarks/naive.py``)
  NAME=ITEM+ITEM…            drivetrain with: ``ablate:a,b`` (DRIVETRAIN_ABLATE=a,b: techniques switched
                             off), ``profile:P`` (``--profile P``), ``arg:--flag`` (any CLI argument),
                             ``src:DIR`` (the code of another checkout, e.g. a ``git worktree`` of an older
                             commit), ``lib:DIR`` (a folder of packages put first: another llama_cpp
                             build), ``env:NAME=VALUE`` (a variable the CLI runs with, e.g.
                             ``env:DRIVETRAIN_LOCAL_PARALLEL=3``); or ``NAME=naive``. E.g.
                             ``no-checks=ablate:checks``, ``full=profile:full``

    python benchmarks/bench_tasks.py --runs 3 --results runs.jsonl [--resume] [--tasks a,b] [--config …]
                                     [--split heldout|fresh|tune|heldout,fresh|all] [--lang en|zh|all]
                                     [--wording en-2,zh-1] [--seed-base N] [--max-wall-time S] [--dry-run]
    python benchmarks/bench_tasks.py --report runs.jsonl [more.jsonl …]   # tables only
    python benchmarks/bench_tasks.py --selftest                             # checkers vs reference solutions
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import seed_ledger as ledger
from report import print_line, print_tables, row_wording
from task_runner import NAIVE_MAX_TURNS, Config, Runner, parse_config
from tasks import SPLITS, TASKS, in_split, selftest, split_of, wordings_for

MAX_WALL_S = 60.0  # the small profile's wall budget (issue #44): the CLI's --max-wall-time
__all__ = ["NAIVE_MAX_TURNS", "Config", "Runner", "main", "parse_config", "plan"]


def pick_wording(task: str, run: int, seed: int, allowed: list[str]) -> str:
    """Run r takes the allowed wordings in turn, from a start drawn from the task and the batch seed."""
    start = hashlib.sha256(f"{task}/{seed}".encode()).digest()[0]
    return allowed[(start + run - 1) % len(allowed)]


def plan(
    task_names: list[str],
    configs: list[Config],
    runs: int,
    seed: int,
    split: str = "all",
    lang: str = "all",
    wordings: tuple[str, ...] = (),
) -> list[tuple[str, int, int, str, Config]]:
    """(task, run number, workspace seed, wording, config) in running order: runs, then tasks, then the configs
    interleaved. A task with no wording in the selection is left out."""
    allowed = {t: wordings_for(t, split, lang, wordings) for t in task_names}
    return [
        (t, r, seed * 1000 + r, pick_wording(t, r, seed, allowed[t]), c)
        for r in range(1, runs + 1)
        for t in task_names
        if allowed[t]
        for c in configs
    ]


def run_key(model: str, task: str, run: int, seed: int, wording: str, config_name: str, spec: str) -> tuple:
    return (model, task, run, seed, wording, config_name, spec)


def selected(row: dict, split: str = "all", lang: str = "all", ids: tuple[str, ...] = ()) -> bool:
    wording, language, part = row_wording(row)
    return in_split(split, part) and lang in ("all", language) and (not ids or wording in ids)


def split_arg(text: str) -> str:
    """``all``, or one or more of the splits joined by commas (``heldout,fresh``)."""
    parts = [t.strip() for t in text.split(",") if t.strip()]
    if text == "all" or (parts and all(p in SPLITS for p in parts)):
        return "all" if text == "all" else ",".join(parts)
    raise argparse.ArgumentTypeError(f"{text!r}: give all, or of {', '.join(SPLITS)} one or more joined by commas")


def load_results(paths: list[Path]) -> list[dict]:
    rows = []
    for path in paths:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass  # a line cut short by an interrupted write
    return rows


def run_selftest(seeds: int) -> int:
    problems = selftest(seeds=range(1, seeds + 1))
    for name, found in problems.items():
        print(f"  {name:<16} {'ok' if not found else 'FAILED'}")
        for p in found:
            print(f"      {p}")
    bad = sum(bool(v) for v in problems.values())
    pairs = [(n, w.id, w.lang) for n in problems for w in TASKS[n].wordings]
    count = {
        (lang, part): sum(w_lang == lang and split_of(n, w) == part for n, w, w_lang in pairs)
        for lang in ("en", "zh")
        for part in ("tune", "heldout", "fresh")
    }
    print(
        f"wordings: {len(pairs)} (kind, wording) pairs, every one rendered at every seed; "
        + ", ".join(f"{lang} {part} {k}" for (lang, part), k in count.items())
    )
    print(f"selftest: {len(problems) - bad}/{len(problems)} tasks ok over {seeds} seeds")
    return 1 if bad else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1, help="runs per task per config")
    p.add_argument("--tasks", default=None, help=f"comma-separated, of: {', '.join(TASKS)}")
    p.add_argument(
        "--config",
        action="append",
        default=None,
        metavar="NAME[=SPEC]",
        help="drivetrain, naive, or NAME=ablate:a,b+profile:P+arg:--flag (repeatable; default: drivetrain and naive)",
    )
    p.add_argument(
        "--model", choices=["default", "small"], default="default", help="default: the bundled 1.5B; small: the 0.5B"
    )
    p.add_argument(
        "--seed-base",
        "--seed",
        dest="seed",
        type=int,
        default=None,
        metavar="N",
        help="run r of every task uses workspace seed N*1000 + r; refused if the ledger has it (but for --resume of "
        "the same results file); default: a fresh base",
    )
    p.add_argument("--ledger", type=Path, default=ledger.LEDGER, help="the seeds used so far (default: %(default)s)")
    p.add_argument(
        "--max-turns", type=int, default=None, help="a turn cap to force (default: none given, the CLI's own)"
    )
    p.add_argument(
        "--max-wall-time",
        type=float,
        default=MAX_WALL_S,
        metavar="SECONDS",
        help="the wall budget of a run, both loops (drivetrain: its --max-wall-time; default %(default)g)",
    )
    p.add_argument(
        "--timeout", type=float, default=None, help="kill a run after this long (default: twice the budget + 60 s)"
    )
    p.add_argument("--save", type=Path, default=None, help="where to keep workspaces and logs (default: a temp dir)")
    p.add_argument("--results", type=Path, default=None, help="append one JSON line per finished run")
    p.add_argument("--resume", action="store_true", help="skip runs already in --results")
    p.add_argument(
        "--split",
        type=split_arg,
        default="all",
        help="which wordings: heldout (report these), fresh (the kinds never tuned on), tune (tune on these), "
        "several joined by commas (heldout,fresh), or all",
    )
    p.add_argument("--lang", choices=["en", "zh", "all"], default="all", help="wordings in this language only")
    p.add_argument("--wording", default=None, metavar="ID[,ID…]", help="only these wording ids, e.g. en-1 or zh-1,zh-2")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the first command; run nothing")
    p.add_argument(
        "--report",
        type=Path,
        nargs="+",
        default=None,
        metavar="FILE.jsonl",
        help="only print the tables from results files (--split, --lang and --wording filter them)",
    )
    p.add_argument("--selftest", action="store_true", help="check every checker against its reference solution")
    p.add_argument("--selftest-seeds", type=int, default=6)
    return p


def validate(args: argparse.Namespace, ids: tuple[str, ...]) -> tuple[list[Config], list[str]]:
    """(configs, task names) from the arguments; ValueError says what is wrong."""
    configs = [parse_config(c) for c in (args.config or ["drivetrain", "naive"])]
    names = [n.strip() for n in args.tasks.split(",")] if args.tasks else list(TASKS)
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        raise ValueError(f"unknown tasks {unknown}; the tasks are {', '.join(TASKS)}")
    if len({c.name for c in configs}) < len(configs):
        raise ValueError("two configs have the same name")
    if args.resume and not args.results:
        raise ValueError("--resume needs --results")
    if not 1 <= args.runs < ledger.RUNS_PER_BASE:
        raise ValueError(f"--runs must be from 1 to {ledger.RUNS_PER_BASE - 1}")
    known = {w.id for n in names for w in TASKS[n].wordings}
    if set(ids) - known:
        raise ValueError(f"unknown wordings {sorted(set(ids) - known)}; the wordings are {', '.join(sorted(known))}")
    return configs, names


def choose_seeds(args: argparse.Namespace) -> tuple[int, list[int]]:
    """(base, seeds) for this batch: the one given, the one its results file was begun with (a resume), or a
    fresh one; ValueError if the ledger says a seed was used by another measurement."""
    entries = ledger.load(args.ledger)
    base = args.seed
    if base is None and args.resume:
        base = ledger.base_of(entries, args.results)
        seeds_run = [r["seed"] for r in load_results([args.results]) if isinstance(r.get("seed"), int)]
        if base is None and seeds_run:  # a results file begun before the ledger: its own seeds
            base = seeds_run[0] // ledger.RUNS_PER_BASE
    if base is None:
        base = ledger.fresh_base(entries)
    seeds = ledger.seeds_of(base, args.runs)
    problems = ledger.conflicts(entries, seeds, args.results, args.resume)
    if problems:
        raise ValueError(
            f"seed base {base} was used before ({args.ledger}): "
            + "; ".join(problems)
            + ". A choice between configurations takes seeds never used; leave out --seed-base for a fresh one"
            + (", or --resume the same results file" if args.results else "")
        )
    return base, seeds


def agents_path(naive: bool) -> str:
    """Which python3 the agents' shells find: their PATH leaves out this virtualenv (``cli_runner.cli_env`` for
    drivetrain; for the naive loop, whose tools run in this process, this process's own PATH, so only then)."""
    from cli_runner import agents_environ

    env = agents_environ(os.environ)
    if naive:
        os.environ.clear()
        os.environ.update(env)
    python3 = shutil.which("python3", path=env["PATH"])
    if python3 is None:
        return "python3: not on the agents' PATH"
    has_pytest = subprocess.run([python3, "-c", "import pytest"], capture_output=True).returncode == 0
    return f"python3: {python3}" + ("" if has_pytest else " (no pytest: pytest-fix cannot run its tests)")


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.selftest:
        return run_selftest(args.selftest_seeds)
    ids = tuple(w.strip() for w in args.wording.split(",") if w.strip()) if args.wording else ()
    if args.report:
        rows = [r for r in load_results(args.report) if selected(r, args.split, args.lang, ids)]
        if not rows:
            print("no results in " + ", ".join(map(str, args.report)))
            return 1
        print_tables(rows)
        return 0
    try:
        configs, names = validate(args, ids)
        base, seeds = choose_seeds(args)
    except ValueError as e:
        p.error(str(e))
    planned = plan(names, configs, args.runs, base, args.split, args.lang, ids)
    return run_batch(args, configs, names, ids, base, seeds, planned)


def print_plan(runner: Runner, todo: list) -> None:
    """The runs in order, and the first drivetrain run's command line as it would start (workspace made aside)."""
    from cli_runner import cli_args, cli_command

    for t, r, s, w, c in todo:
        print(f"  {t:<17} run {r:<3} seed {s}  {w:<5} {c.name}")
    first = next(((t, s, w, c) for t, _, s, w, c in todo if not c.naive), None)
    if first:
        t, s, w, c = first
        with tempfile.TemporaryDirectory() as tmp:
            inst = TASKS[t].make(s, Path(tmp) / "ws", w)
            extra = runner.extra_args(inst, c, Path(tmp) / "ws", s)
        argv = [*cli_command(c.src, c.lib), *cli_args(inst.prompt, runner.max_turns, extra_args=extra)]
        print(
            "\nthe first drivetrain run starts (in its workspace, the PATH without the virtualenv):\n  "
            + " ".join(shlex.quote(a) for a in argv)
        )


def run_batch(args, configs, names, ids, base, seeds, planned) -> int:
    from cli_runner import code_state

    done = (
        {
            run_key(
                r.get("model"),
                r.get("task"),
                r.get("run"),
                r.get("seed"),
                row_wording(r)[0],
                r.get("config"),
                r.get("spec"),
            )
            for r in load_results([args.results])
        }
        if args.resume
        else set()
    )
    todo = [(t, r, s, w, c) for t, r, s, w, c in planned if run_key(args.model, t, r, s, w, c.name, c.spec) not in done]
    left_out = [n for n in names if not any(t == n for t, *_ in planned)]
    python3 = agents_path(naive=any(c.naive for *_, c in todo) and not args.dry_run)
    head, digest = code_state()
    timeout = args.timeout or 2 * args.max_wall_time + 60
    save = args.save or (Path("(a temporary folder)") if args.dry_run else Path(tempfile.mkdtemp(prefix="bench-")))
    runner = Runner(args.model, save, args.max_turns, timeout, max_wall_s=args.max_wall_time)
    print(
        f"tasks: {', '.join(names)}"
        + (f"\n(no wording in the selection: {', '.join(left_out)})" if left_out else "")
        + f"\nwordings: split {args.split}, language {args.lang}"
        + (f", ids {', '.join(ids)}" if ids else "")
        + f"\nconfigs: {', '.join(f'{c.name} ({c.spec})' for c in configs)}\n"
        + "".join(f"code of {c.name}: {' ('.join(code_state(Path(c.src)))})\n" for c in configs if c.src)
        + f"model: {args.model}   runs: {args.runs}   seed base: {base} (seeds {seeds[0]}..{seeds[-1]})\n"
        f"turn cap: {args.max_turns or 'the CLI default'}   wall budget: {args.max_wall_time:g} s (killed at "
        f"{timeout:g} s)   agents' {python3}\ncode: {head} ({digest})\n"
        f"to run: {len(todo)} (skipped, already in {args.results}: {len(planned) - len(todo)})"
        f"   workspaces and logs: {save}\n",
        flush=True,
    )
    if args.dry_run:
        print_plan(runner, todo)
        return 0
    fresh = ledger.new_seeds(ledger.load(args.ledger), seeds, args.results)
    if fresh:  # before the first run: a batch cut short has used its seeds all the same
        what = {"tasks": names, "configs": [c.spec for c in configs], "split": args.split, "lang": args.lang}
        ledger.record(fresh, args.results, {**what, "model": args.model, "code": head}, args.ledger)
    save.mkdir(parents=True, exist_ok=True)
    rows = []
    for task, run, seed, wording, config in todo:
        row = runner.run(task, run, seed, config, wording)
        rows.append(row)
        if args.results:
            with args.results.open("a") as f:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        print_line(row)
    if args.results:  # the tables cover everything in the file for these tasks and configs, resumed runs included
        keep = {(c.name, c.spec) for c in configs}
        rows = [
            r
            for r in load_results([args.results])
            if r.get("model") == args.model
            and r.get("task") in names
            and (r.get("config"), r.get("spec")) in keep
            and selected(r, args.split, args.lang, ids)
        ]
    if rows:
        print()
        print_tables(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

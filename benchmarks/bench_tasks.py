"""Small coding tasks, end to end: how often the local model solves them through drivetrain vs a naive loop.

Each task is a kind of task (``benchmarks/tasks.py`` lists them): a generator fills a fresh workspace
from a seed, one of the kind's wordings (``benchmarks/wordings.py``) words the user's prompt, and a
checker (a program) decides afterwards, from the workspace and the final answer, whether the task was
solved, and says why. Every (task, run) pair gets one seed and one wording, so every config sees the same
workspace and the same prompt; runs go task by task with the configs interleaved, so machine load falls
on all of them alike. Run r of a task takes the next wording of those selected (``--split``, ``--lang``,
``--wording``), so ``--runs N`` goes round them; each result line records its wording, language and split.
Report numbers from ``--split heldout`` (docs/benchmarks.md says why, and when a wording moves to tune).

Configs (``--config``, repeatable; default ``drivetrain`` and ``naive``):
  drivetrain                 ``drivetrain -p TASK --output-format json --verbose --provider local
                             --max-turns 12 --permission-mode bypassPermissions`` + the task's arguments
                             (e.g. ``--disallowedTools "Bash(wc:*)"``), a subprocess in the workspace
  naive                      the same GGUF in llama_cpp.Llama (loaded once), plain prompt, regex parsing,
                             drivetrain's own tool classes, no grammar (``benchmarks/naive.py``)
  NAME=ITEM+ITEM…            drivetrain with: ``ablate:a,b`` (DRIVETRAIN_ABLATE=a,b: techniques switched
                             off), ``profile:P`` (``--profile P``), ``arg:--flag`` (any CLI argument),
                             ``src:DIR`` (the code of another checkout, e.g. a ``git worktree`` of an older
                             commit); or ``NAME=naive``. E.g. ``no-checks=ablate:checks``, ``full=profile:full``

    python benchmarks/bench_tasks.py --runs 3 --results runs.jsonl [--resume] [--tasks a,b] [--config …]
                                     [--split heldout|tune|all] [--lang en|zh|all] [--wording en-2,zh-1]
    python benchmarks/bench_tasks.py --report runs.jsonl [more.jsonl …]   # tables only
    python benchmarks/bench_tasks.py --selftest                             # checkers vs reference solutions
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import print_line, print_tables, row_wording
from tasks import TASKS, selftest, split_of, wordings_for

MAX_TURNS = 12
RUN_TIMEOUT_S = 900


@dataclass(frozen=True)
class Config:
    name: str
    spec: str  # as given, kept in the results so a resumed batch only reuses runs of the same config
    naive: bool = False
    ablate: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    src: str = ""  # another checkout's source tree to run instead (its src/ goes first on PYTHONPATH)

    @property
    def env(self) -> dict[str, str]:
        env = {"DRIVETRAIN_ABLATE": ",".join(self.ablate)} if self.ablate else {}
        if self.src:
            env["PYTHONPATH"] = str(Path(self.src).resolve() / "src")
        return env


def parse_config(text: str) -> Config:
    name, _, spec = text.partition("=")
    if not spec:
        if name in ("drivetrain", "naive"):
            return Config(name, name, naive=name == "naive")
        raise ValueError(f"config {text!r}: give NAME=SPEC, e.g. no-checks=ablate:checks (or drivetrain, naive)")
    if not name:
        raise ValueError(f"config {text!r} has no name")
    ablate: list[str] = []
    args: list[str] = []
    src = ""
    naive = False
    for item in spec.split("+"):
        key, _, value = item.partition(":")
        if key == "ablate" and value:
            ablate += [v.strip() for v in value.split(",") if v.strip()]
        elif key == "profile" and value:
            args += ["--profile", value]
        elif key == "arg" and value:
            args.append(value)
        elif key == "src" and value:
            if not (Path(value) / "src" / "drivetrain").is_dir():
                raise ValueError(f"config {text!r}: {value} has no src/drivetrain")
            src = value
        elif item in ("naive", "drivetrain"):
            naive = item == "naive"
        else:
            raise ValueError(
                f"config {text!r}: unknown item {item!r} (ablate:a,b  profile:P  arg:--flag  src:DIR  naive)"
            )
    if naive and (ablate or args or src):
        raise ValueError(f"config {text!r}: the naive loop takes no ablations or drivetrain arguments")
    return Config(name, spec, naive, tuple(ablate), tuple(args), src)


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
    return split in ("all", part) and lang in ("all", language) and (not ids or wording in ids)


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


class Runner:
    """Runs one (task, seed, config) and returns the result record. The naive loop's model loads on first use."""

    def __init__(
        self,
        model: str,
        save: Path,
        max_turns: int,
        timeout_s: float,
        provider_args: tuple[str, ...] = ("--provider", "local"),
        env: dict[str, str] | None = None,
    ) -> None:
        self.model, self.save, self.max_turns, self.timeout_s = model, save, max_turns, timeout_s
        self.provider_args, self.env = provider_args, env or {}  # another provider: for tests
        self._naive = None  # (llm, sampling, max_tokens)

    def run(self, task_name: str, run: int, seed: int, config: Config, wording: str | None = None) -> dict:
        from cli_runner import code_state

        task = TASKS[task_name]
        wording = task.wording(wording).id
        run_dir = self.save / task_name / f"run{run}-seed{seed}-{wording}" / config.name
        # The workspace path is in drivetrain's system prompt and in every pwd: it must not name the task or
        # the config ("linecount-nowc/drivetrain/ws" would be a hint), so it is a neutral hash, linked from the logs.
        ws = (
            self.save
            / "work"
            / hashlib.sha1(f"{task_name}/{run}/{seed}/{wording}/{config.name}".encode()).hexdigest()[:10]
        )
        for old in (run_dir, ws):
            if old.exists():
                shutil.rmtree(old)  # a run cut short earlier: start it afresh
        inst = task.make(seed, ws, wording)
        run_dir.mkdir(parents=True)
        (run_dir / "ws").symlink_to(ws)
        expect = json.loads(json.dumps(inst.expect))
        (run_dir / "instance.json").write_text(
            json.dumps(
                {
                    "prompt": inst.prompt,
                    "wording": inst.wording,
                    "deny": inst.deny,
                    "cli_args": inst.cli_args,
                    "expect": expect,
                },
                indent=1,
                ensure_ascii=False,
            )
        )
        load_avg = os.getloadavg()[0]
        started = time.perf_counter()
        try:
            if config.naive:
                answer, subtype, turns, wall, cpu, trajectory = self._run_naive(inst, ws, run_dir, seed)
            else:
                answer, subtype, turns, wall, cpu, trajectory = self._run_cli(inst, ws, run_dir, config)
        except Exception as e:  # one broken run must not end a long batch; it is recorded, and says why
            answer, turns, cpu, trajectory = "", None, 0.0, ""
            subtype, wall = f"bench error ({type(e).__name__}: {str(e)[:160]})", time.perf_counter() - started
        solved, reason = task.check(ws, answer, expect)
        if not solved and subtype not in ("success", ""):
            reason = f"{subtype}: {reason}"
        return {
            "task": task_name,
            "config": config.name,
            "spec": config.spec,
            "model": self.model,
            "run": run,
            "seed": seed,
            "wording": inst.wording,
            "lang": inst.lang,
            "split": split_of(task_name, inst.wording),
            "prompt": inst.prompt,
            "solved": solved,
            "reason": reason,
            "turns": turns,
            "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
            "subtype": subtype,
            "trajectory": trajectory,
            "answer": answer[:600],
            "load_avg": round(load_avg, 2),
            "code": code_state(*([Path(config.src)] if config.src else []))[1],
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "workspace": str(ws),
        }

    def _run_cli(self, inst, ws: Path, run_dir: Path, config: Config):
        from cli_runner import run_cli

        deny = ["--disallowedTools", *inst.deny] if inst.deny else []
        r = run_cli(
            inst.prompt,
            ws,
            run_dir,
            model=self.model,
            max_turns=self.max_turns,
            timeout_s=self.timeout_s,
            extra_args=[*deny, *inst.cli_args, *config.args],
            extra_env={**self.env, **config.env},
            provider_args=self.provider_args,
        )
        subtype = r.subtype
        if subtype.startswith("no result"):  # say why: the CLI's last words
            last = [ln for ln in r.stderr.strip().splitlines() if ln.strip()][-1:] or [""]
            subtype += f" {last[0][:160]}"
        return r.answer, subtype, r.num_turns, r.wall_s, r.cpu_s, r.trajectory

    def _run_naive(self, inst, ws: Path, run_dir: Path, seed: int):
        from naive import deny_policy, load_llama, run_naive, sampling_of

        if self._naive is None:
            llm, probe, load_s = load_llama(self.model)
            print(
                f"(naive loop: {probe.name} loaded in {load_s:.1f} s, once; not counted in its wall times)", flush=True
            )
            self._naive = (llm, sampling_of(probe), probe.max_output_tokens)
        llm, sampling, max_tokens = self._naive
        r = run_naive(
            llm,
            inst.prompt,
            ws,
            sampling=sampling,
            seed=seed * 100,
            max_turns=self.max_turns,
            max_tokens=max_tokens,
            policy=deny_policy(inst.deny, ws, run_dir / "home"),
            timeout_s=self.timeout_s,
        )
        (run_dir / "transcript.json").write_text(json.dumps(r.messages, indent=1, ensure_ascii=False))
        return r.answer, r.subtype, r.turns, r.wall_s, r.cpu_s, r.trajectory


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


def main(argv: list[str] | None = None) -> int:
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
    p.add_argument("--seed", type=int, default=1, help="run r of every task uses workspace seed seed*1000 + r")
    p.add_argument("--max-turns", type=int, default=MAX_TURNS)
    p.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds per run")
    p.add_argument("--save", type=Path, default=None, help="where to keep workspaces and logs (default: a temp dir)")
    p.add_argument("--results", type=Path, default=None, help="append one JSON line per finished run")
    p.add_argument("--resume", action="store_true", help="skip runs already in --results")
    p.add_argument(
        "--split",
        choices=["heldout", "tune", "all"],
        default="all",
        help="which wordings: heldout (report these), tune (tune on these), or all",
    )
    p.add_argument("--lang", choices=["en", "zh", "all"], default="all", help="wordings in this language only")
    p.add_argument("--wording", default=None, metavar="ID[,ID…]", help="only these wording ids, e.g. en-1 or zh-1,zh-2")
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
        configs = [parse_config(c) for c in (args.config or ["drivetrain", "naive"])]
        names = [n.strip() for n in args.tasks.split(",")] if args.tasks else list(TASKS)
        unknown = [n for n in names if n not in TASKS]
        if unknown:
            raise ValueError(f"unknown tasks {unknown}; the tasks are {', '.join(TASKS)}")
        if len({c.name for c in configs}) < len(configs):
            raise ValueError("two configs have the same name")
        if args.resume and not args.results:
            raise ValueError("--resume needs --results")
        known = {w.id for n in names for w in TASKS[n].wordings}
        if set(ids) - known:
            raise ValueError(
                f"unknown wordings {sorted(set(ids) - known)}; the wordings are {', '.join(sorted(known))}"
            )
    except ValueError as e:
        p.error(str(e))

    from cli_runner import code_state

    save = args.save or Path(tempfile.mkdtemp(prefix="bench-tasks-"))
    save.mkdir(parents=True, exist_ok=True)
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
    planned = plan(names, configs, args.runs, args.seed, args.split, args.lang, ids)
    todo = [(t, r, s, w, c) for t, r, s, w, c in planned if run_key(args.model, t, r, s, w, c.name, c.spec) not in done]
    left_out = [n for n in names if not any(t == n for t, *_ in planned)]
    # the tools a task names (python3, pytest) are the ones its checker runs: this interpreter's, in both loops
    here = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != here:
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")
    # ...so a model's `pip install x` would change the interpreter every later run (and the checker) uses:
    # the runs' pip finds no package (a run that needs one fails as it would offline)
    os.environ["PIP_NO_INDEX"] = "1"
    head, digest = code_state()
    print(
        f"tasks: {', '.join(names)}"
        + (f"\n(no wording in the selection: {', '.join(left_out)})" if left_out else "")
        + f"\nwordings: split {args.split}, language {args.lang}"
        + (f", ids {', '.join(ids)}" if ids else "")
        + f"\nconfigs: {', '.join(f'{c.name} ({c.spec})' for c in configs)}\n"
        + "".join(f"code of {c.name}: {' ('.join(code_state(Path(c.src)))})\n" for c in configs if c.src)
        + f"model: {args.model}   runs: {args.runs}   max turns: {args.max_turns}   code: {head} ({digest})\n"
        f"to run: {len(todo)} (skipped, already in {args.results}: {len(planned) - len(todo)})"
        f"   workspaces and logs: {save}\n",
        flush=True,
    )
    runner = Runner(args.model, save, args.max_turns, args.timeout)
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

"""One run of the task benchmark: a config (``--config NAME=SPEC``) and the runner that makes a task's workspace,
runs drivetrain's CLI or the naive loop in it, and checks the result."""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from tasks import TASKS, split_of

ROOT = Path(__file__).resolve().parent.parent
FIXED_TIME = 1_700_000_000  # every workspace file's times: `ls -l` shows the same in every run of a pair
NAIVE_MAX_TURNS = 100  # the naive loop has no turn cap of its own: the wall budget ends it


@dataclass(frozen=True)
class Config:
    name: str
    spec: str  # as given, kept in the results so a resumed batch only reuses runs of the same config
    naive: bool = False
    ablate: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    src: str = ""  # another checkout to run the code of (cli_runner.cli_command: its src/ first on sys.path)
    lib: str = ""  # a folder of packages that go before the virtualenv's: another llama_cpp build (cli_command)
    keep: bool = False  # keep each attempt's copy (--keep-attempts) and check each attempt as the run is checked
    environ: tuple[tuple[str, str], ...] = ()  # env:NAME=VALUE items: variables the CLI runs with

    @functools.cached_property  # decided once a batch: the checkout it reads may be edited while the batch runs
    def in_copies(self) -> bool:
        """Whether its runs are attempts, each in a copy of the workspace kept and checked: ``keep``, or more than
        one attempt, asked for (``--attempts N``) or the embedded model's default in the code it runs. (Else each
        config's attempts would work under a scratch folder of a random name, and the paths the model sees, so its
        samples, would differ between configs from the first token.)"""
        if self.naive:
            return False
        pairs = list(itertools.pairwise(a for arg in self.args for a in arg.split("=", 1)))
        asked = [int(n) for a, n in pairs if a == "--attempts" and n.isdigit()]
        single = "attempts" in self.ablate or ("--profile", "full") in pairs
        k = asked[-1] if asked else 1 if single else local_attempts(Path(self.src) if self.src else ROOT)
        return self.keep or k > 1

    @property
    def env(self) -> dict[str, str]:
        ablate = {"DRIVETRAIN_ABLATE": ",".join(self.ablate)} if self.ablate else {}
        return {**ablate, **dict(self.environ)}


def local_attempts(checkout: Path) -> int:
    """The embedded model's default number of attempts in a checkout's code (1 before there was one)."""
    try:
        code = (checkout / "src" / "drivetrain" / "small" / "attempts.py").read_text()
    except OSError:
        return 1
    found = re.search(r"^LOCAL_ATTEMPTS = (\d+)", code, re.MULTILINE)
    return int(found.group(1)) if found else 1


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
    src = lib = ""
    naive = False
    keep = False
    environ: list[tuple[str, str]] = []
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
        elif key == "lib" and value:
            if not Path(value).is_dir():
                raise ValueError(f"config {text!r}: {value} is not a folder")
            lib = value
        elif key == "env" and "=" in value:
            var, _, setting = value.partition("=")
            environ.append((var, setting))
        elif item == "keep":
            keep = True
        elif item in ("naive", "drivetrain"):
            naive = item == "naive"
        else:
            raise ValueError(
                f"config {text!r}: unknown item {item!r} "
                "(ablate:a,b  profile:P  arg:--flag  src:DIR  lib:DIR  env:NAME=VALUE  keep  naive)"
            )
    if naive and (ablate or args or src or lib or keep or environ):
        raise ValueError(f"config {text!r}: the naive loop takes no ablations or drivetrain arguments")
    return Config(name, spec, naive, tuple(ablate), tuple(args), src, lib, keep, tuple(environ))


class Runner:
    """Runs one (task, seed, config) and returns the result record. The naive loop's model loads on first use."""

    def __init__(
        self,
        model: str,
        save: Path,
        max_turns: int | None,
        timeout_s: float,
        provider_args: tuple[str, ...] = ("--provider", "local"),
        env: dict[str, str] | None = None,
        max_wall_s: float | None = None,
    ) -> None:
        """``max_turns`` None: the CLI's own turn cap; ``max_wall_s``: the wall budget both loops get (the CLI's
        ``--max-wall-time``); ``timeout_s``: when the benchmark kills a run that overran it."""
        self.model, self.save, self.max_turns, self.timeout_s = model, save, max_turns, timeout_s
        self.max_wall_s = max_wall_s
        self.provider_args, self.env = provider_args, env or {}  # another provider: for tests
        self._naive = None  # (llm, sampling, max_tokens)

    def run(self, task_name: str, run: int, seed: int, config: Config, wording: str | None = None) -> dict:
        from cli_runner import code_state

        task = TASKS[task_name]
        wording = task.wording(wording).id
        run_dir = self.save / task_name / f"run{run}-seed{seed}-{wording}" / config.name
        # The workspace path is in drivetrain's system prompt and in every pwd: it must not name the task or
        # the config ("linecount-nowc/drivetrain/ws" would be a hint), so it is a neutral hash. It is the same path
        # for every config of a pair, and its files' times are fixed, so a seeded model sees the same tokens in each
        # until the configs' code differs; afterwards the workspace is kept under a hash of its own, linked from the
        # logs. A config of attempts works in a copy of its workspace (``--keep-attempts`` puts them at ``ws-k/aN``),
        # so the others' workspace is at its first attempt's path: the first attempt is paired with the single run.
        pair = f"{task_name}/{run}/{seed}/{wording}"
        root = self.save / "work" / hashlib.sha1(pair.encode()).hexdigest()[:10]
        ws = root / "ws" if config.in_copies else self._kept(root / "ws") / "a1"
        kept = self.save / "work" / hashlib.sha1(f"{pair}/{config.name}".encode()).hexdigest()[:10]
        for old in (run_dir, root, kept, self._kept(kept)):
            if old.exists():
                shutil.rmtree(old)  # a run cut short earlier: start it afresh
        inst = task.make(seed, ws, wording)
        same_times(ws)
        run_dir.mkdir(parents=True)
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
                answer, subtype, turns, wall, cpu, trajectory = self._run_cli(inst, ws, run_dir, config, seed)
        except Exception as e:  # one broken run must not end a long batch; it is recorded, and says why
            answer, turns, cpu, trajectory = "", None, 0.0, ""
            subtype, wall = f"bench error ({type(e).__name__}: {str(e)[:160]})", time.perf_counter() - started
        solved, reason = task.check(ws, answer, expect)
        if not solved and subtype not in ("success", ""):
            reason = f"{subtype}: {reason}"
        each = self._check_attempts(task, run_dir, self._kept(ws), expect) if config.in_copies else None
        cwd = str(ws) if config.naive else first_cwd(run_dir / "home" / "sessions")
        ws.rename(kept)
        if config.in_copies and self._kept(ws).exists():
            self._kept(ws).rename(self._kept(kept))
        shutil.rmtree(root)  # what else a run left beside its workspace: the pair's next run must not see it
        (run_dir / "ws").symlink_to(kept)
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
            "max_turns": self.max_turns,
            "max_wall_s": self.max_wall_s,
            "code": code_state(*([Path(config.src)] if config.src else []))[1],
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "workspace": str(kept),
            "cwd": cwd,
            **({"attempts": each} if each is not None else {}),
        }

    @staticmethod
    def _check_attempts(task, run_dir: Path, kept: Path, expect) -> dict:
        """Each attempt's end state checked as the run's is (its kept copy, its own answer): whether the chosen
        one was the first, and whether any attempt solved it (what a perfect choice would have got)."""
        try:
            got = json.loads((run_dir / "stdout.json").read_text()).get("attempts") or {}
        except (OSError, ValueError):
            return {}
        each = []
        for e in got.get("each", []):
            copy = kept / f"a{e['attempt']}"
            solved, reason = task.check(copy, e.get("result") or "", expect) if copy.is_dir() else (False, "no copy")
            each.append(
                {
                    "attempt": e["attempt"],
                    "solved": solved,
                    "reason": reason[:200],
                    "subtype": e.get("subtype"),
                    "took_s": e.get("took_s"),
                    "turns": e.get("num_turns"),
                }
            )
        return {"chosen": got.get("chosen"), "reason": got.get("reason", "")[:300], "each": each}

    def extra_args(self, inst, config: Config, ws: Path, seed: int) -> list[str]:
        """The CLI arguments of a run besides the prompt, provider and turn cap: the wall budget, the task's deny
        rules and arguments, the config's, and the pair's seed (so both configs of a pair sample alike), unless the
        config sets its own."""
        deny = ["--disallowedTools", *inst.deny] if inst.deny else []
        wall = ["--max-wall-time", f"{self.max_wall_s:g}"] if self.max_wall_s else []
        keep = ["--keep-attempts", str(self._kept(ws))] if config.in_copies else []
        seeded = [] if any(a.split("=")[0] == "--seed" for a in config.args) else ["--seed", str(seed)]
        return [*wall, *deny, *inst.cli_args, *config.args, *keep, *seeded]

    @staticmethod
    def _kept(ws: Path) -> Path:
        """Where the attempts' copies go: beside the workspace, as neutral a path as it (their pwd)."""
        return ws.with_name(ws.name + "-k")

    def _run_cli(self, inst, ws: Path, run_dir: Path, config: Config, seed: int):
        from cli_runner import run_cli

        r = run_cli(
            inst.prompt,
            ws,
            run_dir,
            model=self.model,
            max_turns=self.max_turns,
            timeout_s=self.timeout_s,
            extra_args=self.extra_args(inst, config, ws, seed),
            src=config.src,
            lib=config.lib,
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
            max_turns=self.max_turns or NAIVE_MAX_TURNS,
            max_tokens=max_tokens,
            policy=deny_policy(inst.deny, ws, run_dir / "home"),
            timeout_s=self.max_wall_s or self.timeout_s,
        )
        (run_dir / "transcript.json").write_text(json.dumps(r.messages, indent=1, ensure_ascii=False))
        return r.answer, r.subtype, r.turns, r.wall_s, r.cpu_s, r.trajectory


def first_cwd(sessions: Path) -> str | None:
    """The folder the model first worked in, as its session log says: the first attempt's, else the run's.
    Two configs of a pair are paired by sampling only if it is the same (the report counts the pairs where not)."""
    logs = sorted(sessions.glob("*-attempt-1.jsonl")) or sorted(sessions.glob("*.jsonl"))
    try:
        with logs[0].open() as f:
            return json.loads(f.readline()).get("cwd")
    except (IndexError, OSError, ValueError):
        return None


def same_times(ws: Path) -> None:
    """Every file and folder of the workspace, and its parent (``ls -la`` shows ``..``), at one fixed time."""
    for path in (*ws.rglob("*"), ws, ws.parent):
        os.utime(path, (FIXED_TIME, FIXED_TIME), follow_symlinks=False)

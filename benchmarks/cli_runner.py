"""drivetrain through its real command line, as a user runs it: one subprocess per task, and what it left behind."""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def code_state(root: Path = ROOT) -> tuple[str, str]:
    """(HEAD commit and dirty flag, a digest of src/) of the checkout at ``root`` (this one, or the worktree a
    ``src:`` config runs): the repository may change while a batch runs."""
    try:
        head = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
            ).stdout.strip()
            or "?"
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        head, dirty = "?", ""
    digest = hashlib.sha256()
    for f in sorted((root / "src").rglob("*.py")):
        digest.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return head + (" + uncommitted changes in src/" if dirty else ""), digest.hexdigest()[:12]


def venv_bins() -> set[str]:
    """The bin folders of the virtualenv this benchmark runs in (resolved), if it runs in one."""
    bins = {Path(sys.executable).parent, Path(sys.prefix) / "bin"} if sys.prefix != sys.base_prefix else set()
    return {os.path.realpath(b) for b in bins}


def path_without_venv(path: str) -> str:
    """``path`` less this virtualenv's bin folder: a model's ``pip install`` landed in it once. The agents' python3
    is the system's; drivetrain itself is started by absolute path (``cli_command``)."""
    drop = venv_bins()
    return os.pathsep.join(p for p in path.split(os.pathsep) if p and os.path.realpath(p) not in drop)


def agents_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment an agent's shell gets from ``environ``: the PATH without this virtualenv, no
    ``VIRTUAL_ENV``, and a pip that finds no package (no index, no find-links, no config file naming either), so a
    model's ``pip install`` changes nothing and a run that needs a package fails as it would offline."""
    env = {k: v for k, v in environ.items() if k not in ("VIRTUAL_ENV", "PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL")}
    env["PATH"] = path_without_venv(environ.get("PATH", os.defpath))
    env["PIP_NO_INDEX"] = "1"
    env["PIP_CONFIG_FILE"] = os.devnull  # pip reads no config file: those name local wheels and mirrors
    return env


def cli_command(src: str = "", lib: str = "") -> list[str]:
    """How to start drivetrain without the PATH: the virtualenv's script (or ``python -m``), or with ``src``
    (another checkout) or ``lib`` (a folder of packages, such as another llama_cpp build), this interpreter on
    ``run_src.py``, which puts that checkout's ``src/`` (else this one's), then ``lib``, first on the path."""
    if src or lib:
        code = Path(src).resolve() / "src" if src else Path(__file__).resolve().parent.parent / "src"
        paths = os.pathsep.join([str(code), *([str(Path(lib).resolve())] if lib else [])])
        return [sys.executable, str(Path(__file__).resolve().parent / "run_src.py"), paths]
    exe = Path(sys.executable).parent / "drivetrain"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "drivetrain"]


def cli_env(model: str, home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in agents_environ(os.environ).items()
        if not k.startswith(("ANTHROPIC_", "OPENAI_")) and k != "DRIVETRAIN_ABLATE"
    }
    env["DRIVETRAIN_LOCAL_MODEL"] = model
    env["DRIVETRAIN_HOME"] = str(home)  # audit logs go with the run; no user settings leak in
    # Each run loads the model itself. A resident model process (models/resident.py) would be one for the whole
    # batch: started from whichever checkout ran first, so a `src:` config's model code would not be the one run, and
    # holding the last run's KV state, so a pair's second run would evaluate its prompt in other batches than the
    # first (other floating-point sums, another sample) and faster.
    env["DRIVETRAIN_LOCAL_DAEMON"] = "0"
    env.update(extra or {})
    return env


def trajectory_from_log(log: str) -> str:
    """'Glob → Read+Read+Read → Write! → end_turn' from the --verbose turn log ('!' marks an is_error result); a
    run of attempts (its lines marked ``[attempt N]``) gives each attempt's: 'a1: Bash → end_turn | a2: …'."""
    attempts: dict[str, list[str]] = {}
    for line in log.splitlines():
        if m := re.match(r"\[attempt (\d+)\] (.*)", line):
            attempts.setdefault(m.group(1), []).append(m.group(2))
    if attempts:
        ordered = sorted(attempts.items(), key=lambda item: int(item[0]))  # together, their lines interleave
        return " | ".join(f"a{n}: {trajectory_from_log(chr(10).join(lines))}" for n, lines in ordered)
    turns: list[list[str]] = []
    stops: list[str] = []
    pending: list[int] = []  # indexes into the current turn's calls, waiting for their results
    for line in log.splitlines():
        if m := re.match(r"\[turn \d+\] stop_reason=(\S+)", line):
            turns.append([])
            stops.append(m.group(1))
            pending = []
        elif turns and (m := re.match(r"  → (\w+) ", line)):
            turns[-1].append(m.group(1))
            pending.append(len(turns[-1]) - 1)
        elif turns and pending and re.match(r"  [✗←] ", line):
            i = pending.pop(0)
            if line.startswith("  ✗"):
                turns[-1][i] += "!"
    steps = ["+".join(calls) if calls else stop for calls, stop in zip(turns, stops)]
    return " → ".join(steps)


@dataclass
class CliRun:
    result: dict  # the JSON result object ({} when there was none)
    answer: str
    subtype: str  # the result's subtype, "timeout", or "no result (exit N)"
    num_turns: int | None
    wall_s: float
    cpu_s: float  # CPU time of the subprocess and its children (user + system)
    trajectory: str
    stdout: str
    stderr: str


def cli_args(
    prompt: str,
    max_turns: int | None,
    permission_mode: str = "bypassPermissions",
    extra_args: Sequence[str] = (),
    provider_args: Sequence[str] = ("--provider", "local"),
) -> list[str]:
    """The arguments after the command: ``-p PROMPT --output-format json --verbose``, the provider, the turn cap
    when one is given (else the CLI's own), the permission mode and ``extra_args``."""
    turns = ["--max-turns", str(max_turns)] if max_turns is not None else []
    return ["-p", prompt, "--output-format", "json", "--verbose", *provider_args, *turns, "--permission-mode",
            permission_mode, *extra_args]  # fmt: skip


def run_cli(
    prompt: str,
    ws: Path,
    run_dir: Path,
    *,
    model: str,
    max_turns: int | None,
    timeout_s: float,
    permission_mode: str = "bypassPermissions",
    extra_args: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
    provider_args: Sequence[str] = ("--provider", "local"),
    src: str = "",
    lib: str = "",
) -> CliRun:
    """``drivetrain -p PROMPT --output-format json --verbose …`` in ``ws``; stdout/stderr kept in ``run_dir``.
    ``max_turns`` None: the CLI's own turn cap; ``src``, ``lib``: the code of another checkout, another build of a
    package (``cli_command``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    command = cli_command(src, lib)
    argv = [*command, *cli_args(prompt, max_turns, permission_mode, extra_args, provider_args)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    returncode = None
    try:
        proc = subprocess.run(
            argv,
            cwd=ws,
            env=cli_env(model, run_dir / "home", extra_env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        stdout, stderr, timed_out, returncode = proc.stdout, proc.stderr, False, proc.returncode
    except subprocess.TimeoutExpired as e:
        stdout, stderr, timed_out = _text(e.stdout), _text(e.stderr), True
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    (run_dir / "stdout.json").write_text(stdout)
    (run_dir / "stderr.log").write_text(stderr)
    (run_dir / "argv.json").write_text(json.dumps(argv[len(command) :], indent=1))
    result = next(
        (_json(line) for line in reversed(stdout.splitlines()) if line.startswith("{") and '"type": "result"' in line),
        {},
    )
    subtype = "timeout" if timed_out else result.get("subtype", f"no result (exit {returncode})")
    return CliRun(
        result,
        result.get("result") or "",
        subtype,
        result.get("num_turns"),
        wall,
        cpu,
        trajectory_from_log(stderr),
        stdout,
        stderr,
    )


def _json(line: str) -> dict:
    try:
        return json.loads(line)
    except ValueError:
        return {}


def _text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")

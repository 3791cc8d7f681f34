"""The quick-start task, end to end, N times: drivetrain's CLI against a naive loop on the same model.

Each run gets a fresh scratch workspace with the three files of ``examples/line_count.py`` and its
task. A run is SOLVED when total.txt holds exactly the right total (surrounding whitespace allowed)
AND the final answer contains that number.

- drivetrain: ``drivetrain -p TASK --permission-mode acceptEdits --max-turns 12 --output-format json
  --verbose --provider local`` as a subprocess, as a user runs it (the model loads in every run; its
  load time is measured separately with ``LocalModel.load()`` and reported both ways). Sampling is
  LocalModel's default; the CLI sets no seed, so llama.cpp seeds every call at random.
- naive: the same GGUF in ``llama_cpp.Llama`` (loaded ONCE for all runs), ``create_chat_completion``
  with a plain system prompt describing Read/Write/Bash/Glob in prose, no grammar, no workspace
  listing, calls found by regex (``<tool_call>{…}</tool_call>``, else a bare JSON object), run with
  drivetrain's own tool classes (no permission checks), results sent back as plain user text; the same
  12-turn cap and sampling settings, a different seed per run.

Prints a table and a summary per loop; asserts nothing. The turn logs, the naive transcripts and the
workspaces are kept under ``--save`` (default: a new temporary folder, printed).

    python benchmarks/bench_linecount.py [--runs 5] [--model default|small] [--only drivetrain|naive]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
from cli_runner import code_state  # noqa: E402  (benchmarks/, next to this file)
from cli_runner import run_cli as run_drivetrain  # noqa: E402
from line_count import FILES, TASK  # noqa: E402  (the quick-start task itself, not a copy)
from naive import load_llama, sampling_of  # noqa: E402
from naive import run_naive as naive_loop  # noqa: E402

MAX_TURNS = 12
EXPECTED = sum(text.count("\n") for text in FILES.values())
RUN_TIMEOUT_S = 1800  # a CLI run that has not ended by then counts as a failure


@dataclass
class RunOutcome:
    n: int
    solved: bool
    num_turns: int | None
    wall_s: float
    written: str | None  # total.txt, stripped; None when missing
    answer: str
    subtype: str
    trajectory: str
    notes: list[str] = field(default_factory=list)
    code: str = ""  # the digest of src/ when the run started
    cpu_s: float = 0.0  # CPU time used (user + system): less skewed than wall time on a busy, shared machine
    load_avg: float = 0.0  # the 1-minute load average when the run started

    @property
    def file_ok(self) -> bool:
        return self.written == str(EXPECTED)

    @property
    def answer_ok(self) -> bool:
        return mentions_total(self.answer)


def mentions_total(text: str) -> bool:
    return re.search(rf"(?<![\d.]){EXPECTED}(?!\d|\.\d)", text or "") is not None


def make_workspace(base: Path) -> Path:
    ws = base / "ws"
    ws.mkdir(parents=True)
    for name, text in FILES.items():
        (ws / name).write_text(text)
    return ws


def check(ws: Path) -> str | None:
    total = ws / "total.txt"
    return total.read_text(errors="replace").strip() if total.is_file() else None


# ---------------------------------------------------------------- drivetrain, through its CLI


def run_cli(n: int, model: str, save: Path) -> RunOutcome:
    run_dir = save / "drivetrain" / f"run{n}"
    ws = make_workspace(run_dir)
    code, load_avg = code_state()[1], os.getloadavg()[0]
    r = run_drivetrain(
        TASK, ws, run_dir, model=model, max_turns=MAX_TURNS, timeout_s=RUN_TIMEOUT_S, permission_mode="acceptEdits"
    )
    out = RunOutcome(
        n,
        False,
        r.num_turns,
        r.wall_s,
        check(ws),
        r.answer,
        r.subtype,
        r.trajectory,
        code=code,
        cpu_s=r.cpu_s,
        load_avg=load_avg,
    )
    out.solved = out.file_ok and out.answer_ok
    if r.result.get("note"):
        out.notes.append(r.result["note"])
    return out


def measure_load(model: str) -> tuple[float, float, str]:
    """LocalModel.load() twice (the first may read the file from disk; the CLI runs see a warm cache)."""
    from drivetrain.models.local import LocalModel

    times = []
    for _ in range(2):
        m = LocalModel(model)
        t = time.perf_counter()
        m.load()
        times.append(time.perf_counter() - t)
        name = m.name
        del m
        gc.collect()
    return times[0], times[1], name


# ---------------------------------------------------------------- the naive loop


def run_naive(llm, n: int, sampling: dict, seed: int, save: Path, max_tokens: int | None) -> RunOutcome:
    run_dir = save / "naive" / f"run{n}"
    ws = make_workspace(run_dir)
    code, load_avg = code_state()[1], os.getloadavg()[0]
    r = naive_loop(llm, TASK, ws, sampling=sampling, seed=seed, max_turns=MAX_TURNS, max_tokens=max_tokens)
    (run_dir / "transcript.json").write_text(json.dumps(r.messages, indent=1, ensure_ascii=False))
    out = RunOutcome(
        n,
        False,
        r.turns,
        r.wall_s,
        check(ws),
        r.answer,
        r.subtype,
        r.trajectory,
        code=code,
        cpu_s=r.cpu_s,
        load_avg=load_avg,
    )
    out.solved = out.file_ok and out.answer_ok
    return out


# ---------------------------------------------------------------- reporting


START_CODE = ""  # set in main


def print_row(r: RunOutcome, load_s: float | None = None) -> None:
    turns = "-" if r.num_turns is None else str(r.num_turns)
    excl = f"{r.wall_s - load_s:8.1f}" if load_s is not None else ""
    written = "(none)" if r.written is None else repr(r.written[:12])
    print(
        f"  {r.n:>3}  {'yes' if r.solved else 'NO':<6} {turns:>5} {r.wall_s:8.1f}{excl} {r.cpu_s:7.0f} "
        f"{r.load_avg:5.1f}  {written:<14} "
        f"{'yes' if r.answer_ok else 'no':<6} {r.subtype:<16} {r.trajectory}",
        flush=True,
    )
    if r.code != START_CODE:
        print(f"       NOTE: src/ changed since the batch started (digest {r.code}, was {START_CODE})", flush=True)
    if not r.solved:
        print(f"       final answer: {r.answer.strip()[:300]!r}", flush=True)


def header(with_excl: bool) -> None:
    excl = " excl.load" if with_excl else ""
    print(
        f"  run  solved turns   wall s{excl}   cpu s  load  total.txt      answer subtype          trajectory",
        flush=True,
    )


def summary(label: str, rows: list[RunOutcome], load_s: float | None = None) -> str:
    solved = sum(r.solved for r in rows)
    turns = [r.num_turns for r in rows if r.num_turns is not None]
    med_turns = f"{statistics.median(turns):g}" if turns else "-"
    med_wall = statistics.median(r.wall_s for r in rows)
    solved_turns = [r.num_turns for r in rows if r.solved and r.num_turns is not None]
    line = f"{label}: solved {solved}/{len(rows)} ({100 * solved / len(rows):.0f}%), median turns {med_turns}"
    if solved_turns:
        line += f" (solved runs: {statistics.median(solved_turns):g})"
    line += f", median wall {med_wall:.1f} s"
    if load_s is not None:
        line += f" incl. model load, {med_wall - load_s:.1f} s excl. (load {load_s:.1f} s)"
    return line + f"; median CPU {statistics.median(r.cpu_s for r in rows):.0f} s"


# ---------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--model", choices=["default", "small"], default="default", help="default: the bundled 1.5B; small: the 0.5B"
    )
    parser.add_argument("--only", choices=["drivetrain", "naive"], default=None)
    parser.add_argument("--seed", type=int, default=1, help="naive loop: run n uses seeds seed*10000 + n*100 + turn")
    parser.add_argument("--save", type=Path, default=None, help="where to keep workspaces and logs")
    args = parser.parse_args()
    save = args.save or Path(tempfile.mkdtemp(prefix="bench-linecount-"))
    save.mkdir(parents=True, exist_ok=True)

    global START_CODE
    head, START_CODE = code_state()
    from drivetrain.models.local import LocalModel

    probe = LocalModel(args.model)  # not loaded: only its settings are read
    sampling = sampling_of(probe)
    print(
        f"task: {TASK}\nexpected total: {EXPECTED}   model: {probe.name}   runs: {args.runs}   "
        f"max turns: {MAX_TURNS}\nsampling (LocalModel defaults, both loops): {sampling}\n"
        f"code: {head} (src digest {START_CODE})   cores: {len(os.sched_getaffinity(0))}   "
        f"logs and workspaces: {save}\n",
        flush=True,
    )
    summaries = []

    if args.only in (None, "drivetrain"):
        cold, warm, name = measure_load(args.model)
        print(
            f"drivetrain CLI (provider local, {name}); LocalModel.load(): {cold:.2f} s first, {warm:.2f} s again "
            f"(the warm figure is subtracted for 'excl. load'); llama.cpp seeds each call at random",
            flush=True,
        )
        header(True)
        rows = []
        for n in range(1, args.runs + 1):
            rows.append(run_cli(n, args.model, save))
            print_row(rows[-1], warm)
        summaries.append(summary(f"drivetrain ({name})", rows, warm))
        print(summaries[-1] + "\n", flush=True)

    if args.only in (None, "naive"):
        llm, _, load = load_llama(args.model)
        max_tokens = getattr(probe, "max_output_tokens", None)  # the same per-reply cap as LocalModel
        print(
            f"naive loop (llama_cpp.Llama.create_chat_completion, no grammar, no workspace context); "
            f"reply cap {max_tokens} tokens; loaded once in {load:.2f} s, NOT counted in the wall times below",
            flush=True,
        )
        header(False)
        rows = []
        for n in range(1, args.runs + 1):
            rows.append(run_naive(llm, n, sampling, args.seed * 10000 + n * 100, save, max_tokens))
            print_row(rows[-1])
        summaries.append(summary(f"naive ({probe.name})", rows))
        print(summaries[-1] + "\n", flush=True)

    print("\n".join(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())

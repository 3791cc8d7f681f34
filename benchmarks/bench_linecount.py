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
import asyncio
import gc
import hashlib
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
from line_count import FILES, TASK  # noqa: E402  (the quick-start task itself, not a copy)

from drivetrain.tools import Bash, Glob, Read, Write  # noqa: E402
from drivetrain.tools.base import ToolContext  # noqa: E402

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


def code_state() -> tuple[str, str]:
    """(HEAD commit and dirty flag, a digest of src/): the repository may change while a batch runs."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip() or "?"
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
    except OSError:
        head, dirty = "?", ""
    digest = hashlib.sha256()
    for f in sorted((ROOT / "src").rglob("*.py")):
        digest.update(f.relative_to(ROOT).as_posix().encode() + b"\0" + f.read_bytes())
    return head + (" + uncommitted changes in src/" if dirty else ""), digest.hexdigest()[:12]


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


def cli_env(model: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env["DRIVETRAIN_LOCAL_MODEL"] = model
    env["DRIVETRAIN_HOME"] = str(home)  # audit logs go with the run; no user settings leak in
    return env


def trajectory_from_log(log: str) -> str:
    """'Glob → Read+Read+Read → Write! → end_turn' from the --verbose turn log ('!' marks an is_error result)."""
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


def run_cli(n: int, model: str, save: Path) -> RunOutcome:
    run_dir = save / "drivetrain" / f"run{n}"
    ws = make_workspace(run_dir)
    code, load_avg = code_state()[1], os.getloadavg()[0]
    exe = Path(sys.executable).parent / "drivetrain"
    argv = [str(exe), "-p", TASK, "--permission-mode", "acceptEdits", "--max-turns", str(MAX_TURNS),
            "--output-format", "json", "--verbose", "--provider", "local"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=ws, env=cli_env(model, run_dir / "home"), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        stdout, stderr, timed_out = proc.stdout, proc.stderr, False
    except subprocess.TimeoutExpired as e:
        stdout, stderr, timed_out = _text(e.stdout), _text(e.stderr), True
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    (run_dir / "stdout.json").write_text(stdout)
    (run_dir / "stderr.log").write_text(stderr)
    result = next((json.loads(line) for line in reversed(stdout.splitlines())
                   if line.startswith("{") and '"type": "result"' in line), {})
    written = check(ws)
    answer = result.get("result") or ""
    subtype = "timeout" if timed_out else result.get("subtype", f"no result (exit {proc.returncode})")
    out = RunOutcome(n, False, result.get("num_turns"), wall, written, answer, subtype, trajectory_from_log(stderr),
                     code=code, cpu_s=cpu, load_avg=load_avg)
    out.solved = out.file_ok and out.answer_ok
    if result.get("note"):
        out.notes.append(result["note"])
    return out


def _text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


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

NAIVE_SYSTEM = """You are a helpful coding assistant. You can use tools to work with the files in the current directory.

Tools:
- Read: read a text file. Arguments: file_path (string), and optionally offset (integer, the first line to read) and limit (integer, how many lines).
- Write: create or overwrite a file. Arguments: file_path (string), content (string, the whole new content).
- Bash: run a shell command in the current directory. Arguments: command (string), and optionally timeout (integer, milliseconds).
- Glob: find files whose path matches a glob pattern such as **/*.py. Arguments: pattern (string), and optionally path (string, the folder to search).

To call a tool, answer with a JSON object inside <tool_call></tool_call> tags, for example:
<tool_call>
{"name": "Read", "arguments": {"file_path": "notes.txt"}}
</tool_call>
The result will be sent back to you. When the task is done, give your final answer without calling a tool."""

TOOLS = {t.name: t for t in (Read(), Write(), Bash(), Glob())}
_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def find_calls(text: str) -> list[dict | str]:
    """Tool calls in a reply: dicts, or a string saying why a call could not be read."""
    found = _TAGGED.findall(text)
    if not found:  # no tags: a bare JSON object with a "name" counts as a call
        obj = _OBJECT.search(text)
        if not obj:
            return []
        try:
            value = json.loads(obj.group(0))
        except ValueError:
            return []
        return [value] if isinstance(value, dict) and "name" in value else []
    calls: list[dict | str] = []
    for raw in found:
        try:
            value = json.loads(raw)
        except ValueError as e:
            calls.append(f"the tool call is not valid JSON ({e}): {raw[:200]}")
            continue
        calls.append(value if isinstance(value, dict) else f"the tool call is not a JSON object: {raw[:200]}")
    return calls


async def run_call(call: dict | str, ws: Path) -> tuple[str, str, bool]:
    """(tool name, result text, is_error) for one call, run with drivetrain's own tool classes."""
    if isinstance(call, str):
        return "?", call, True
    name = call.get("name")
    args = call.get("arguments", call.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    if name not in TOOLS:
        return str(name), f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}", True
    if not isinstance(args, dict):
        return name, "arguments must be a JSON object", True
    try:
        res = await TOOLS[name].call(args, ToolContext(cwd=ws))
    except Exception as e:
        return name, f"{type(e).__name__}: {e}", True
    text = res.content if isinstance(res.content, str) else json.dumps(res.content)
    return name, text or "(no output)", res.is_error


def run_naive(llm, n: int, sampling: dict, seed: int, save: Path, max_tokens: int | None) -> RunOutcome:
    run_dir = save / "naive" / f"run{n}"
    ws = make_workspace(run_dir)
    code, load_avg = code_state()[1], os.getloadavg()[0]
    messages = [{"role": "system", "content": NAIVE_SYSTEM}, {"role": "user", "content": TASK}]
    steps: list[str] = []
    answer, subtype, turns = "", "error_max_turns", 0
    started, cpu_started = time.perf_counter(), time.process_time()
    while turns < MAX_TURNS:
        turns += 1
        reply = llm.create_chat_completion(messages, seed=seed + turns, max_tokens=max_tokens, **sampling)
        text = reply["choices"][0]["message"]["content"] or ""
        messages.append({"role": "assistant", "content": text})
        calls = find_calls(text)
        if not calls:
            answer, subtype = text, "success"
            steps.append(reply["choices"][0]["finish_reason"] == "length" and "max_tokens" or "end_turn")
            break
        parts, names = [], []
        for call in calls:
            name, result, is_error = asyncio.run(run_call(call, ws))
            names.append(name + ("!" if is_error else ""))
            parts.append(f"{'Error from' if is_error else 'Result of'} {name}:\n{result}")
        steps.append("+".join(names))
        messages.append({"role": "user", "content": "\n\n".join(parts)})
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    (run_dir / "transcript.json").write_text(json.dumps(messages, indent=1, ensure_ascii=False))
    out = RunOutcome(n, False, turns, wall, check(ws), answer, subtype, " → ".join(steps), code=code,
                     cpu_s=cpu, load_avg=load_avg)
    out.solved = out.file_ok and out.answer_ok
    return out


# ---------------------------------------------------------------- reporting


START_CODE = ""  # set in main


def print_row(r: RunOutcome, load_s: float | None = None) -> None:
    turns = "-" if r.num_turns is None else str(r.num_turns)
    excl = f"{r.wall_s - load_s:8.1f}" if load_s is not None else ""
    written = "(none)" if r.written is None else repr(r.written[:12])
    print(f"  {r.n:>3}  {'yes' if r.solved else 'NO':<6} {turns:>5} {r.wall_s:8.1f}{excl} {r.cpu_s:7.0f} "
          f"{r.load_avg:5.1f}  {written:<14} "
          f"{'yes' if r.answer_ok else 'no':<6} {r.subtype:<16} {r.trajectory}", flush=True)
    if r.code != START_CODE:
        print(f"       NOTE: src/ changed since the batch started (digest {r.code}, was {START_CODE})", flush=True)
    if not r.solved:
        print(f"       final answer: {r.answer.strip()[:300]!r}", flush=True)


def header(with_excl: bool) -> None:
    excl = " excl.load" if with_excl else ""
    print(f"  run  solved turns   wall s{excl}   cpu s  load  total.txt      answer subtype          trajectory",
          flush=True)


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
    parser.add_argument("--model", choices=["default", "small"], default="default",
                        help="default: the bundled 1.5B; small: the 0.5B")
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
    sampling = {"temperature": probe.sampling["temp"], "top_p": probe.sampling["top_p"],
                "top_k": probe.sampling["top_k"], "min_p": probe.sampling["min_p"],
                "repeat_penalty": probe.sampling["repeat_penalty"]}
    print(f"task: {TASK}\nexpected total: {EXPECTED}   model: {probe.name}   runs: {args.runs}   "
          f"max turns: {MAX_TURNS}\nsampling (LocalModel defaults, both loops): {sampling}\n"
          f"code: {head} (src digest {START_CODE})   cores: {len(os.sched_getaffinity(0))}   "
          f"logs and workspaces: {save}\n", flush=True)
    summaries = []

    if args.only in (None, "drivetrain"):
        cold, warm, name = measure_load(args.model)
        print(f"drivetrain CLI (provider local, {name}); LocalModel.load(): {cold:.2f} s first, {warm:.2f} s again "
              f"(the warm figure is subtracted for 'excl. load'); llama.cpp seeds each call at random", flush=True)
        header(True)
        rows = []
        for n in range(1, args.runs + 1):
            rows.append(run_cli(n, args.model, save))
            print_row(rows[-1], warm)
        summaries.append(summary(f"drivetrain ({name})", rows, warm))
        print(summaries[-1] + "\n", flush=True)

    if args.only in (None, "naive"):
        from llama_cpp import Llama

        from drivetrain.models.weights import resolve_model
        path = resolve_model(args.model)
        t = time.perf_counter()
        llm = Llama(model_path=str(path), n_ctx=probe.n_ctx, n_threads=probe.n_threads,
                    n_threads_batch=probe.n_threads, verbose=False)
        load = time.perf_counter() - t
        max_tokens = getattr(probe, "max_output_tokens", None)  # the same per-reply cap as LocalModel
        print(f"naive loop (llama_cpp.Llama.create_chat_completion, no grammar, no workspace context); "
              f"reply cap {max_tokens} tokens; loaded once in {load:.2f} s, NOT counted in the wall times below",
              flush=True)
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

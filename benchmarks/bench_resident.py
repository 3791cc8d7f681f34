"""From a new `drivetrain -p` to its first assistant message on the embedded model: in the command's own process
(--no-daemon), with the resident model process already running (warm) and with none running (cold: the command
starts it; the weights' file may still be in the page cache, which this does not drop); side by side. Then the
memory of two commands at once: the peak RSS of each process, in-process against with the resident model.

    python benchmarks/bench_resident.py [--model default|0.5b] [--runs 3]

The time to the first assistant message (stream-json) is what is measured; each command then runs to its end.
The model process here lives in a folder of its own and is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
# One prompt everywhere, so every column generates the same reply (~20 tokens at --seed 1): a reply's length
# swamps what is measured. The warm column's process thus has the whole prompt's KV from the run before (~50
# tokens beyond the shared system turn, which every column has: in memory, or restored from disk).
PROMPT = "Say hello."
OUT_TOKENS: dict[float, int] = {}  # each time's reply length: the same seed gives different replies from different
# KV states (a prompt evaluated in other chunks rounds otherwise), and a reply's length weighs on the time


def command(model: str, prompt: str, daemon: bool) -> list[str]:
    cmd = [sys.executable, "-m", "drivetrain", "-p", prompt, "--provider", "local", "--model", model]
    cmd += ["--output-format", "stream-json", "--max-turns", "1", "--attempts", "1", "--no-checkpoints"]
    cmd += ["--seed", "1", "--max-wall-time", "600"]  # the same short reply (~20 tokens) in every column
    return cmd + ([] if daemon else ["--no-daemon"])


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def first_message(cmd: list[str], env: dict[str, str], cwd: Path, peaks: dict[int, float] | None = None) -> float:
    """Seconds from starting ``cmd`` to its first assistant message."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    took = float("nan")
    for line in proc.stdout:
        if line.startswith("{") and (msg := json.loads(line)).get("type") == "assistant":
            took = time.perf_counter() - started
            OUT_TOKENS[took] = msg["message"]["usage"]["output_tokens"]
            break
    if peaks is not None:
        peaks[proc.pid] = peak_rss_mb(proc.pid)
    for _ in proc.stdout:  # the command runs to its end: one stopped mid-request would leave the model process
        pass  # a different KV state, and the next reply could differ (a seeded reply is the same for the same state)
    proc.wait()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="dt-bench-"))
    work = folder / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(SRC), "DRIVETRAIN_DAEMON_DIR": str(folder / "run")}
    env.pop("ANTHROPIC_API_KEY", None)
    env.pop("OPENAI_API_KEY", None)
    sys.path.insert(0, str(SRC))
    from drivetrain.models.resident import ping, stop

    def ask(daemon: bool, peaks: dict[int, float] | None = None) -> float:
        return first_message(command(args.model, PROMPT, daemon), env, work, peaks)

    ask(daemon=False)  # the weights assembled and in the page cache, the prefix KV saved, for every column
    inproc: list[float] = []
    cold: list[float] = []
    warm: list[float] = []
    for _ in range(args.runs):  # the columns interleaved, so the other work on the machine weighs on each alike
        inproc.append(ask(daemon=False))
        stop(env)
        cold.append(ask(daemon=True))
        warm += [ask(daemon=True) for _ in range(2)]

    def two_at_once(daemon: bool) -> tuple[list[float], dict[int, float]]:
        peaks: dict[int, float] = {}
        times: list[float] = [0.0, 0.0]

        def one(k: int) -> None:
            times[k] = ask(daemon, peaks)

        threads = [threading.Thread(target=one, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return times, peaks

    both_in, peaks_in = two_at_once(daemon=False)
    both_d, peaks_d = two_at_once(daemon=True)
    daemon_pid = int(ping(env)["pid"])
    daemon_peak = peak_rss_mb(daemon_pid)
    stop(env)
    shutil.rmtree(folder, ignore_errors=True)

    def fmt(xs: list[float]) -> str:
        runs = ", ".join(f"{x:.2f} s/{OUT_TOKENS.get(x, 0)} tok" for x in xs)
        return f"median {statistics.median(xs):6.2f} s  ({runs})"

    print(f"model {args.model}, {os.cpu_count()} cores: new `-p` to first assistant message (time/length)")
    print(f"  in-process (--no-daemon)  {fmt(inproc)}")
    print(f"  resident model, warm      {fmt(warm)}")
    print(f"  resident model, cold      {fmt(cold)}  (no model process running; page cache not dropped)")
    print("two commands at once (first assistant message of each; peak RSS):")
    print(
        f"  in-process      {fmt(both_in)}; RSS "
        f"{' + '.join(f'{v:.0f}' for v in peaks_in.values())} = {sum(peaks_in.values()):.0f} MB"
    )
    print(
        f"  resident model  {fmt(both_d)}; RSS "
        f"{' + '.join(f'{v:.0f}' for v in peaks_d.values())} (commands) + {daemon_peak:.0f} (model process) = "
        f"{sum(peaks_d.values()) + daemon_peak:.0f} MB"
    )


if __name__ == "__main__":
    main()

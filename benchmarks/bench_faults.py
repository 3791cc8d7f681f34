"""A sweep under upstream faults, killed and resumed: ``drivetrain batch`` (the real CLI, a process of its own) runs
``--tasks`` tasks against the scripted server (a process of its own on loopback) that faults ``--rate`` of the
requests with every kind of docs/faults.md a server can inject (each kind at least once, the rest drawn from
``--seed``). Each task is two turns: a Bash call that appends the task's id to a counter file outside its workspace,
then the answer. A third of the way (``--kill-at``) the sweep gets SIGKILL; the same command is run again, against
a fresh server, to the end. Prints:

- tasks passed (of those whose faults are retryable: all of them);
- faults injected by kind (the server's count) and requests retried by kind (the CLI's, of the resumed part);
- tools run twice: by a retry (must be 0), and by the rerun of a task the kill interrupted (which the sweep lists);
- usage mismatches: tasks whose result's tokens differ from what the upstream billed their run (must be 0);
- lost results after the SIGKILL and the resume (must be 0), and finished tasks run again (must be 0);
- wall time of each part.

    python benchmarks/bench_faults.py [--tasks 1000] [--rate 0.05] [--seed 1] [--concurrency 64] [--kill-at 0.33]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import drivetrain
from drivetrain.batch.results import interrupted, read_results, task_runs
from drivetrain.jsontypes import JsonValue
from drivetrain.testing import FAULT_KINDS, FaultSchedule, ScriptedServer, first_prompt, reply, respond, tool_call

TOKENS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def prompt(i: int) -> str:
    return f"task t{i}: count once"


def _script(i: int, counter: Path) -> list:
    return [respond([tool_call("Bash", {"command": f"echo t{i} >> {counter}"})]), reply(f"t{i} counted")]


def _turn(body: JsonValue) -> str:
    """A request's conversation: its task's prompt, and whether it carries the tool's result (the model answers) or
    not (the model calls the tool). So a session resumed past its call gets the answer, one started over both."""
    messages = body.get("messages") if isinstance(body, dict) else None
    last = messages[-1] if isinstance(messages, list) and messages else {}
    content = last.get("content") if isinstance(last, dict) else None
    answered = isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )
    return f"{first_prompt(body)}|{'answer' if answered else 'call'}"


def _serve(tasks: int, counter: str, rate: float, seed: int, every: bool, hang_s: float, conn) -> None:
    at = {2 + k: kind for k, kind in enumerate(FAULT_KINDS)} if every else {}  # each kind once, early: before the kill
    schedule = FaultSchedule(rate=rate, seed=seed, at=at, seconds=hang_s)
    scripts = {}
    for i in range(tasks):
        call, answer = _script(i, Path(counter))
        scripts[f"{prompt(i)}|call"], scripts[f"{prompt(i)}|answer"] = [call], [answer]
    with ScriptedServer(scripts, route=_turn, faults=schedule) as server:
        conn.send(server.url)
        conn.recv()  # until the sweep is done, or killed
        billed: dict[str, list[int]] = {}
        for q in server.requests:
            if q.answered and q.fault is None and q.usage and q.conversation:
                got = billed.setdefault(q.conversation.split("|")[0], [0, 0, 0, 0])
                for k, name in enumerate(TOKENS):
                    got[k] += int(q.usage.get(name) or 0)
        asked = Counter(q.conversation.split("|")[0] for q in server.requests if q.conversation)
        conn.send((Counter(kind for _, kind in schedule.injected), billed, dict(asked)))
        server.take_remaining()  # the steps of tasks that finished before, or were never reached


@contextmanager
def server_process(tasks: int, counter: Path, rate: float, seed: int, every: bool, hang_s: float) -> Iterator:
    mp = multiprocessing.get_context("spawn")
    ours, theirs = mp.Pipe()
    proc = mp.Process(target=_serve, args=(tasks, str(counter), rate, seed, every, hang_s, theirs), daemon=True)
    proc.start()
    got: dict = {}
    try:
        yield ours.recv(), got
    finally:
        ours.send("done")
        got["injected"], got["billed"], got["asked"] = ours.recv()
        proc.join(10)


def sweep_command(tasks_file: Path, out: Path, concurrency: int, resumable: bool) -> list[str]:
    return [
        *(sys.executable, "-m", "drivetrain", "batch", str(tasks_file), "--out", str(out)),
        *("--concurrency", str(concurrency), "--permission-mode", "bypassPermissions"),
        *("--model", "claude-sonnet-4-6", "--exit-zero", *([] if resumable else ["--no-resumable"])),
    ]


def sweep_env(url: str, root: Path, timeout_ms: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update(
        ANTHROPIC_BASE_URL=url,
        ANTHROPIC_API_KEY="sk-bench",
        DRIVETRAIN_HOME=str(root / "home"),
        HOME=str(root),
        API_TIMEOUT_MS=str(timeout_ms),
        CLAUDE_STREAM_IDLE_TIMEOUT_MS=str(timeout_ms),
        PYTHONPATH=str(Path(drivetrain.__file__).parents[1]),  # the drivetrain this runs, whatever the folder
    )
    return env


def result_count(out: Path) -> int:
    path = out / "results.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def run(
    tasks: int = 1000,
    rate: float = 0.05,
    seed: int = 1,
    concurrency: int = 64,
    kill_at: float = 0.33,
    every_kind: bool = True,
    timeout_ms: int = 1000,
    root: Path | None = None,
    resumable: bool = True,
) -> dict:
    """The whole measurement; returns the figures (``main`` prints them; a test checks them at a small scale)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = root or Path(tmp)
        out, counter, tasks_file = root / "out", root / "counter", root / "tasks.jsonl"
        tasks_file.write_text("".join(json.dumps({"id": f"t{i}", "prompt": prompt(i)}) + "\n" for i in range(tasks)))
        hang_s = timeout_ms / 1000 * 2
        cmd = sweep_command(tasks_file, out, concurrency, resumable)

        # the first part, killed once a third of the tasks have a result
        with server_process(tasks, counter, rate, seed, every_kind, hang_s) as (url, first):
            started = time.monotonic()
            errors = root / "first.stderr"
            with errors.open("w") as stderr:
                proc = subprocess.Popen(
                    cmd, env=sweep_env(url, root, timeout_ms), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=stderr, start_new_session=True,
                )  # fmt: skip
            while result_count(out) < kill_at * tasks and proc.poll() is None:
                time.sleep(0.05)
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the sweep ended (exit {proc.returncode}, {result_count(out)} results) before it could be killed "
                    f"at {kill_at:.0%} of {tasks} tasks:\n{errors.read_text()[-3000:]}"
                )
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            first_wall = time.monotonic() - started
        finished_first = {r.id: r for r in read_results(out)}
        cut_short = set(interrupted(out))
        read_first = {r.id: r.usage for r in task_runs(out) if not r.ended}  # what the killed runs journaled

        # the same command again, against a fresh server (same tasks, other faults), to the end
        with server_process(tasks, counter, rate, seed + 1, False, hang_s) as (url, second):
            started = time.monotonic()
            done = subprocess.run(
                cmd, env=sweep_env(url, root, timeout_ms), stdin=subprocess.DEVNULL, capture_output=True, text=True
            )
            second_wall = time.monotonic() - started
        results = {r.id: r for r in read_results(out)}
        runs = Counter(line for line in counter.read_text().splitlines() if line) if counter.exists() else Counter()

    listed = re.search(r"(\d+) tasks were running when an earlier sweep was killed", done.stderr)
    acted = re.search(r"; (\d+) had started tools", done.stderr)
    resumed = re.search(r"; (\d+) resume their sessions", done.stderr)
    retried = re.search(r"(\d+) requests retried after a fault \(([^)]*)\)", done.stderr)
    ids = [f"t{i}" for i in range(tasks)]
    # The upstream's count of both parts, less the answers it wrote to the killed process that it never read
    # (billed, and unknowable to the client: its journal holds each answer it read before anything else is done
    # with it); then every task's result must say exactly that.
    mismatches, unread, unread_tokens = [], [], 0
    for task_id, r in results.items():
        conv = prompt(int(task_id[1:]))
        billed_first = first["billed"].get(conv, [0] * 4)
        if task_id in cut_short:
            journaled = read_first.get(task_id, [0] * 4)
            if journaled != billed_first and all(j <= b for j, b in zip(journaled, billed_first)):
                unread.append(task_id)
                unread_tokens += sum(billed_first) - sum(journaled)
                billed_first = journaled
        billed = [a + b for a, b in zip(billed_first, second["billed"].get(conv, [0] * 4))]
        if [getattr(r, name) for name in TOKENS] != billed:
            mismatches.append(task_id)
    return {
        "tasks": tasks,
        "passed": sum(r.status == "pass" for r in results.values()),
        "statuses": dict(Counter(f"{r.status}/{r.subtype}" for r in results.values())),
        "injected": dict((first["injected"] + second["injected"]).most_common()),
        "retried_resumed_part": retried.group(2) if retried else "",
        "tools_twice_by_retry": sorted(i for i in ids if runs[i] > 1 and i not in cut_short),
        "tools_twice_by_rerun": sorted(i for i in ids if runs[i] > 1 and i in cut_short),
        "interrupted": sorted(cut_short),
        "interrupted_listed": int(listed.group(1)) if listed else 0,
        "interrupted_with_tools_listed": int(acted.group(1)) if acted else 0,
        "usage_mismatches": mismatches,
        "resumed": int(resumed.group(1)) if resumed else 0,
        "unread_at_the_kill": unread,
        "unread_tokens": unread_tokens,
        "billed_to_interrupted_runs": sum(
            sum(v) for k, v in first["billed"].items() if k.split()[1].rstrip(":") in cut_short
        ),
        "lost": len([i for i in ids if i not in results]),
        "finished_run_again": sorted(i for i in finished_first if second["asked"].get(prompt(int(i[1:])))),
        "finished_before_kill": len(finished_first),
        "wall_s": (round(first_wall, 1), round(second_wall, 1)),
        "exit": done.returncode,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--rate", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--kill-at", type=float, default=0.33)
    p.add_argument("--timeout-ms", type=int, default=1000, help="API_TIMEOUT_MS: a hang lasts twice as long")
    p.add_argument(
        "--no-resumable",
        dest="resumable",
        action="store_false",
        help="both sweeps --no-resumable: cut-short tasks start over",
    )
    a = p.parse_args()
    f = run(a.tasks, a.rate, a.seed, a.concurrency, a.kill_at, timeout_ms=a.timeout_ms, resumable=a.resumable)
    faults = sum(f["injected"].values())
    mode = "" if a.resumable else ", --no-resumable"
    print(f"{f['tasks']} tasks, {a.concurrency} at a time, {a.rate:.0%} of requests faulted (seed {a.seed}){mode}:")
    print(f"  tasks passed: {f['passed']} of {f['tasks']} ({', '.join(f'{k} {n}' for k, n in f['statuses'].items())})")
    print(f"  faults injected: {faults} ({', '.join(f'{k} {n}' for k, n in f['injected'].items())})")
    print(f"  requests retried, the resumed part: {f['retried_resumed_part'] or 'none'}")
    print(f"  tools run twice by a retry: {len(f['tools_twice_by_retry'])} (must be 0)")
    print(
        f"  killed after {f['finished_before_kill']} results: {len(f['interrupted'])} tasks interrupted, "
        f"{f['interrupted_listed']} listed by the resumed sweep, {f['interrupted_with_tools_listed']} as having "
        f"started tools; their tools run again by the rerun: {len(f['tools_twice_by_rerun'])}"
    )
    print(
        f"  resumed: {f['resumed']}; usage mismatches against the upstream's count (both parts): "
        f"{len(f['usage_mismatches'])} (must be 0); billed to the interrupted runs before the kill: "
        f"{f['billed_to_interrupted_runs']:,} tokens, counted in their tasks' results but for "
        f"{f['unread_tokens']:,} tokens the upstream wrote to the killed process for "
        f"{len(f['unread_at_the_kill'])} tasks, which it never read"
    )
    print(f"  lost results after SIGKILL and resume: {f['lost']} (must be 0); finished tasks run again: "
          f"{len(f['finished_run_again'])} (must be 0)")  # fmt: skip
    print(f"  wall time: {f['wall_s'][0]} s to the kill, {f['wall_s'][1]} s to resume and finish; load average "
          f"{os.getloadavg()[0]:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()

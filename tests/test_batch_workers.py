"""``drivetrain batch --workers N``: a local sweep over worker processes sharing one results file and one journal;
a worker SIGKILLed in the middle loses no finished result and reruns none, and another takes over its share."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import threading
import time

import cli_process
from drivetrain.testing import ScriptedServer, first_prompt, reply, respond, tool_call
from test_batch import batch_args, env_for, lines, prompt, write_tasks

IDS = [f"w{i}" for i in range(8)]


def steps(task_id: str, counter, pids, hold=None, seen=None) -> list:
    """A Bash call that appends the task's id to ``counter`` and its worker's pid to ``pids`` (outside the
    workspace), then the answer (held until ``hold`` is set, with ``seen`` set when it is asked for)."""
    call = tool_call("Bash", {"command": f"echo {task_id} >> {counter}; echo $PPID >> {pids}"})
    held = {"hold": hold, "expect": lambda body: seen.set()} if hold is not None else {}
    return [respond([call]), reply(f"{task_id} done", **held)]


def test_a_worker_killed_mid_sweep_loses_nothing_and_reruns_nothing(tmp_path):
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", IDS, check="true"), tmp_path / "out"
    counter, pids = tmp_path / "counter", tmp_path / "pids"
    seen, hold = threading.Event(), threading.Event()
    scripts = {prompt(i): steps(i, counter, pids) for i in IDS}
    # the second worker's share: w1, w3, w5, w7; w5's answer goes to the killed worker, the resumed run asks again
    scripts[prompt("w5")] = [*steps("w5", counter, pids, hold, seen), reply("w5 done")]
    with ScriptedServer(scripts) as server:
        proc = cli_process.Popen(
            batch_args(tasks, out, "--workers", "2", "--concurrency", "2", "--permission-mode", "bypassPermissions"),
            env=env_for(server.url, tmp_path),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert seen.wait(60), "w5 never asked for its answer"
            worker = int(pids.read_text().splitlines()[[*counter.read_text().split()].index("w5")])
            assert worker != proc.pid
            os.kill(worker, signal.SIGKILL)  # w5's tool has run; its answer is in flight
            hold.set()
            _, stderr = proc.communicate(timeout=120)
        finally:
            hold.set()
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, stderr
    assert "worker 2 died (exit -9)" in stderr and "another takes them over" in stderr
    ran = collections.Counter(counter.read_text().split())
    assert ran == collections.Counter(IDS), ran  # every tool once: w5 resumed past its call
    results = lines(out)
    assert sorted(r["id"] for r in results) == IDS  # one line each: nothing lost, nothing run again
    assert all(r["status"] == "pass" for r in results)
    assert {r["id"]: r.get("interrupted", 0) for r in results}["w5"] == 1
    assert len(set(pids.read_text().split())) >= 3  # two workers, and the one that took over


def turn(body) -> str:
    """A request's task, and whether it carries its tool's result (it asks for the answer) or not (for the call)."""
    answered = any(b.get("type") == "tool_result" for b in body["messages"][-1]["content"])
    return f"{first_prompt(body)}|{'answer' if answered else 'call'}"


def gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_sweep_killed_ends_its_workers_and_the_rerun_runs_no_tool_twice(tmp_path):
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", IDS, check="true"), tmp_path / "out"
    counter, pids = tmp_path / "counter", tmp_path / "pids"
    seen, hold = threading.Event(), threading.Event()
    scripts = {prompt(i): steps(i, counter, pids) for i in IDS}
    scripts[prompt("w2")] = steps("w2", counter, pids, hold, seen)
    with ScriptedServer(scripts) as server:
        proc = cli_process.Popen(
            batch_args(tasks, out, "--workers", "2", "--concurrency", "2", "--permission-mode", "bypassPermissions"),
            env=env_for(server.url, tmp_path),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        try:
            assert seen.wait(60), "w2 never asked for its answer"
            workers = {int(p) for p in pids.read_text().split()}
            proc.kill()  # the sweep's own process only: its workers must not live on
            proc.wait(30)
            assert all(gone(w) for w in workers), "a worker outlived its sweep"
        finally:
            hold.set()
        server.take_remaining()
    done = {r["id"] for r in lines(out)}
    assert "w2" not in done
    # a task resumed past its call asks only for the answer; one cut short before it, for both
    rest = {}
    for i in set(IDS) - done:
        rest[f"{prompt(i)}|call"], rest[f"{prompt(i)}|answer"] = ([s] for s in steps(i, counter, pids))
    with ScriptedServer(rest, route=turn) as server:
        again = cli_process.run(
            batch_args(tasks, out, "--workers", "2", "--concurrency", "2", "--permission-mode", "bypassPermissions"),
            env=env_for(server.url, tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        server.take_remaining()  # tasks cut short before their call was answered start over with both steps
    assert again.returncode == 0, again.stderr
    ran = collections.Counter(counter.read_text().split())
    assert set(ran.values()) == {1}, ran  # no tool twice
    # a tool the kill caught while it ran is not run again (whether it did its work is unknown): at most the one
    # the other worker had in flight, which the rerun then resumes past its call
    cut = set(IDS) - set(ran)
    assert cut <= set(IDS) - done - {"w2"} and len(cut) <= 1, cut
    assert sorted(r["id"] for r in lines(out)) == IDS


def test_the_sweep_budget_is_shared_by_the_workers(tmp_path):
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", IDS[:6]), tmp_path / "out"
    counter, pids = tmp_path / "counter", tmp_path / "pids"
    with ScriptedServer({prompt(i): steps(i, counter, pids) for i in IDS[:6]}) as server:
        proc = cli_process.run(
            batch_args(
                tasks, out, "--workers", "2", "--concurrency", "2", "--max-budget-usd", "0.000001",
                "--permission-mode", "bypassPermissions",
            ),
            env=env_for(server.url, tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        server.take_remaining()
    assert proc.returncode == 1 and "4 tasks were not started" in proc.stderr, proc.stderr
    assert sorted(r["id"] for r in lines(out)) == ["w0", "w1"]  # each worker's first: then its half was spent

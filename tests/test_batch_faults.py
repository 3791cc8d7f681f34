"""``drivetrain batch`` under upstream faults, the real CLI as a subprocess against the scripted server: passing
faults are retried and their tasks pass; a fault that persists is an ``error`` line and a non-zero exit; a sweep
killed while a tool runs says, when run again, which tasks it interrupted, and can leave them alone."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path

import cli_process
from drivetrain.batch.results import interrupted
from drivetrain.testing import ScriptedServer, fault, reply, respond, tool_call
from test_batch import batch, batch_args, env_for, lines, prompt, script, write_tasks

QUICK = {"retry_after_ms": "10"}  # the status faults ask for a short wait, so the test does not sit in backoff


def test_passing_faults_pass_and_a_persisting_one_is_an_error_and_a_non_zero_exit(tmp_path):
    ids = ["f0", "f1", "f2", "f3"]
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", ids), tmp_path / "out"
    scripts = {
        prompt("f0"): [fault("http_529", **QUICK), *script("f0", out)],
        prompt("f1"): [script("f1", out)[0], fault("broken_json"), fault("cut"), script("f1", out)[1]],
        prompt("f2"): [fault("http_503", **QUICK)] * 3,  # DRIVETRAIN_MAX_RETRIES=2: it persists
        prompt("f3"): script("f3", out),
    }
    env = {"DRIVETRAIN_MAX_RETRIES": "2"}
    with ScriptedServer(scripts) as server:
        proc = batch(server.url, tmp_path, tasks, out, "--concurrency", "4", env=env)
    assert proc.returncode == 1, proc.stderr
    results = {r["id"]: r for r in lines(out)}
    assert {i: r["status"] for i, r in results.items()} == {"f0": "pass", "f1": "pass", "f2": "error", "f3": "pass"}
    assert results["f2"]["subtype"] == "error_upstream" and "503" in results["f2"]["detail"]
    assert "4 tasks: 3 pass · 1 error (error_upstream 1)" in proc.stderr
    assert "1 tasks ended in error" in proc.stderr and "--exit-zero" in proc.stderr
    assert "5 requests retried after a fault (http_503 2, " in proc.stderr  # f2's two, f0's 529, f1's two
    for kind in ("http_529 1", "broken_json 1", "cut 1"):
        assert kind in proc.stderr

    with ScriptedServer([]) as server:  # nothing to run: the same counts, the same status; --exit-zero: 0
        again = batch(server.url, tmp_path, tasks, out)
        zero = batch(server.url, tmp_path, tasks, out, "--exit-zero")
    assert again.returncode == 1 and "1 error (error_upstream 1)" in again.stderr
    assert zero.returncode == 0 and "1 error (error_upstream 1)" in zero.stderr


def counting(task_id: str, out: Path, counter: Path, hold: threading.Event | None = None, seen=None, at=1) -> list:
    """A Bash call that appends to ``counter`` (outside the workspace), then the answer; request ``at`` (0: the
    call's, 1: the answer's) is held until ``hold`` is set, and sets ``seen`` when it arrives."""
    held = {"hold": hold, "expect": lambda body: seen.set()} if hold is not None else {}
    call = tool_call("Bash", {"command": f"echo {task_id} >> {counter}"})
    return [respond([call], **(held if at == 0 else {})), reply(f"{task_id} done", **(held if at == 1 else {}))]


TOKENS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def billed(server: ScriptedServer) -> int:
    """What the upstream billed, by its own count: the tokens of the answers it sent whole."""
    return sum(int(q.usage.get(k) or 0) for q in server.requests if q.answered and q.usage for k in TOKENS)


def killed_while_k1_waits(tmp_path: Path, at: int = 1, *more: str) -> tuple[Path, Path, Path, int]:
    """A sweep of k0 and k1 killed while k1 waits for its request ``at`` (1: its tool has run); k0 finished.
    The last: what the upstream billed k1 before the kill."""
    ids = ["k0", "k1"]
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", ids, check="true"), tmp_path / "out"
    counter = tmp_path / "counter"
    seen, hold = threading.Event(), threading.Event()
    k1 = counting("k1", out, counter, hold, seen, at)
    scripts = {prompt("k0"): counting("k0", out, counter), prompt("k1"): k1}
    server = ScriptedServer(scripts).start()
    try:
        proc = cli_process.Popen(
            batch_args(tasks, out, "--concurrency", "1", "--permission-mode", "bypassPermissions", *more),
            env=env_for(server.url, tmp_path),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        assert seen.wait(60), "k1 never asked for its answer"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        upstream = billed(server)  # before the held answer goes out to nobody
    finally:
        hold.set()
        server.close()
    assert [r["id"] for r in lines(out)] == ["k0"] and counter.read_text() == "k0\n" + "k1\n" * at
    k0 = next(r for r in lines(out) if r["id"] == "k0")
    return tasks, out, counter, upstream - sum(k0[k] for k in TOKENS)


def test_a_rerun_names_the_tasks_a_kill_interrupted_and_says_what_running_them_again_means(tmp_path):
    """--no-resumable: a task's records are held until it ends, so one cut short starts over."""
    tasks, out, counter, before = killed_while_k1_waits(tmp_path, 1, "--no-resumable")
    with ScriptedServer({prompt("k1"): counting("k1", out, counter)}) as server:
        again = batch(server.url, tmp_path, tasks, out, "--permission-mode", "bypassPermissions", "--no-resumable")
        assert again.returncode == 0 and server.requests, again.stderr + (out / "results.jsonl").read_text()
    assert "1 tasks were running when an earlier sweep was killed or stopped; 1 had started tools: k1 (Bash)" in (
        again.stderr
    )
    assert "may happen again" in again.stderr
    assert counter.read_text() == "k0\nk1\nk1\n"  # what the message warned of: the tool ran twice
    k1 = {r["id"]: r for r in lines(out)}["k1"]
    assert k1["status"] == "pass" and k1["interrupted"] == 1
    assert before > 0 and sum(k1[k] for k in TOKENS) == before + billed(server)  # the killed run's bill counts
    report = cli_process.run(
        [*batch_args(tasks, out)[:2], "report", str(out), "--json"], capture_output=True, text=True
    )
    assert json.loads(report.stdout)["interrupted"] == {"k1": {"runs": 1, "tools": ["Bash"]}}


def test_no_rerun_interrupted_leaves_them_alone_as_errors(tmp_path):
    tasks, out, counter, _ = killed_while_k1_waits(tmp_path, 1, "--no-resumable")
    with ScriptedServer([]) as server:  # no request at all
        again = batch(server.url, tmp_path, tasks, out, "--no-rerun-interrupted", "--no-resumable")
    assert again.returncode == 1, again.stderr
    assert counter.read_text() == "k0\nk1\n"  # no tool ran twice
    k1 = {r["id"]: r for r in lines(out)}["k1"]
    assert (k1["status"], k1["subtype"]) == ("error", "interrupted") and "--rerun-failed" in k1["detail"]
    assert "2 tasks: 1 pass · 1 error (interrupted 1)" in again.stderr


def test_a_task_cut_short_before_any_tool_runs_again_even_with_no_rerun_interrupted(tmp_path):
    tasks, out, counter, _ = killed_while_k1_waits(tmp_path, 0, "--no-resumable")
    with ScriptedServer({prompt("k1"): counting("k1", out, counter)}) as server:
        again = batch(
            server.url,
            tmp_path,
            tasks,
            out,
            "--no-rerun-interrupted",
            "--permission-mode",
            "bypassPermissions",
            "--no-resumable",
        )
        assert again.returncode == 0 and server.requests, again.stderr + (out / "results.jsonl").read_text()
    assert "were running when an earlier sweep was killed or stopped; 1 had not started a tool and start over" in (
        again.stderr
    )
    assert counter.read_text() == "k0\nk1\n"  # the tool ran once: in the rerun
    assert {r["id"]: r["status"] for r in lines(out)} == {"k0": "pass", "k1": "pass"}


def test_a_sweep_resumes_a_cut_short_task_in_its_workspace_without_running_its_tool_again(tmp_path):
    """By default (resumable) each record reaches the store as it comes: k1's tool result was saved before its next
    request went out, so the next sweep sends that request again, in k1's workspace, on k1's session, and k1's
    result counts what the upstream billed both runs."""
    tasks, out, counter, before = killed_while_k1_waits(tmp_path, 1)
    [cut] = interrupted(out)["k1"]

    def resent(body):
        [result] = [b for b in body["messages"][-1]["content"] if b["type"] == "tool_result"]
        assert not result.get("is_error") and "k1" not in result.get("content", "x")  # echo's output went to the file

    with ScriptedServer({prompt("k1"): [reply("k1 done", expect=resent)]}) as server:
        again = batch(server.url, tmp_path, tasks, out, "--permission-mode", "bypassPermissions")
        assert again.returncode == 0 and server.requests, again.stderr + (out / "results.jsonl").read_text()
    assert "1 resume their sessions in their workspaces" in again.stderr
    assert counter.read_text() == "k0\nk1\n"  # k1's tool ran once
    k1 = {r["id"]: r for r in lines(out)}["k1"]
    assert k1["status"] == "pass" and k1["session_id"] == cut.session and k1["interrupted"] == 1
    assert before > 0 and sum(k1[k] for k in TOKENS) == before + billed(server)

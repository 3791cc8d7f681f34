"""``drivetrain batch``: what a task line may say (its workspace, setup, env, check), what a bad line gets, and
the sweep's budget; the real CLI against the scripted server, as in ``test_batch.py``."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from test_batch import batch, batch_args, env_for, lines, prompt, script, task_line, write_tasks


def test_bad_lines_are_reported_with_their_numbers_before_anything_runs(tmp_path):
    good = json.dumps(task_line("a1"))
    (tmp_path / "tasks.jsonl").write_text(
        "\n".join(
            [
                good,
                '{"id": "a2"}',
                "not json",
                json.dumps(task_line("a1")),
                json.dumps({**task_line("a3"), "turns": 3}),
                json.dumps({**task_line("a4"), "provider": "nope"}),
                json.dumps({**task_line("a5"), "workspace": "nowhere"}),
            ]
        )
        + "\n"
    )
    with ScriptedServer([]) as server:
        proc = batch(server.url, tmp_path, tmp_path / "tasks.jsonl", tmp_path / "out")
    assert proc.returncode == 2
    err = proc.stderr
    assert "line 2: prompt: Field required" in err and "line 3: not JSON" in err
    assert "line 4: id 'a1' is already used on line 1" in err and "line 5: turns: Extra inputs" in err
    assert (
        "line 6: provider:" in err
        and "line 7: workspace: no such folder" in err
        and "line 1" not in err.split("already used")[0]
    )
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_workspaces_from_a_folder_and_a_git_revision_with_setup_env_and_kept(tmp_path):
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "a.txt").write_text("from the folder\n")
    repo = tmp_path / "repo"
    git = lambda *a: subprocess.run(
        ["git", "-C", str(repo), *a],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    repo.mkdir()
    git("init", "-q")
    (repo / "v.txt").write_text("one\n")
    git("add", "v.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    first = git("rev-parse", "HEAD")
    (repo / "v.txt").write_text("two\n")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two")
    out = tmp_path / "out"
    tasks = [
        {
            "id": "folder",
            "prompt": "folder task",
            "workspace": "seed",
            "setup": "echo $GREETING > b.txt",
            "env": {"GREETING": "hello"},
            "check": "grep -q folder a.txt && grep -q hello b.txt && grep -q hello c.txt",
        },
        {"id": "git", "prompt": "git task", "workspace": f"file://{repo}@{first}", "check": "grep -q one v.txt"},
        {"id": "broken", "prompt": "broken task", "setup": "echo no way; exit 3"},
        {"id": "capped", "prompt": "capped task", "max_turns": 1},  # its own limit, over the flags' (none)
    ]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    scripts = {
        "folder task": [respond([tool_call("Bash", {"command": "echo $GREETING > c.txt"})]), reply("ok")],
        "git task": [reply("nothing to do")],
        "capped task": [respond([tool_call("Bash", {"command": "true"})])],
    }
    with ScriptedServer(scripts) as server:
        proc = batch(server.url, tmp_path, tmp_path / "tasks.jsonl", out, "--keep-workspaces", "--allowedTools", "Bash")
    assert proc.returncode == 1, proc.stderr  # a task ended in error (its setup failed)
    assert "4 tasks: 2 pass · 1 fail (error_max_turns 1) · 1 error (setup_failed 1)" in proc.stderr
    results = {r["id"]: r for r in lines(out)}
    assert results["folder"]["status"] == "pass" and results["git"]["status"] == "pass", results
    assert results["broken"]["status"] == "error" and results["broken"]["subtype"] == "setup_failed"
    assert "exited 3" in results["broken"]["detail"] and "no way" in results["broken"]["detail"]
    assert results["broken"]["session_id"] is None  # never run, so no session
    assert (results["capped"]["status"], results["capped"]["subtype"]) == ("fail", "error_max_turns")
    kept = Path(results["folder"]["workspace"])
    assert kept == out / "workspaces" / "folder" and (kept / "c.txt").read_text() == "hello\n"
    assert (seed / "c.txt").exists() is False  # the copy was worked on, not the source


def test_no_task_starts_once_the_sweeps_budget_is_spent(tmp_path):
    ids = ["b0", "b1", "b2"]
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", ids), tmp_path / "out"
    with ScriptedServer({prompt("b0"): script("b0", out)}) as server:  # the others must never ask
        proc = batch(server.url, tmp_path, tasks, out, "--concurrency", "1", "--max-budget-usd", "0.000001")
    assert proc.returncode == 1
    assert [r["id"] for r in lines(out)] == ["b0"]
    assert "budget ($1e-06) is spent: 2 tasks were not started" in proc.stderr


def test_on_a_terminal_the_progress_is_one_live_status_line(tmp_path):
    import pexpect

    ids = ["p0", "t07", "p2"]  # t07's check fails (test_batch.FAILING)
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", ids), tmp_path / "out"
    with ScriptedServer({prompt(i): script(i, out) for i in ids}) as server:
        argv = batch_args(tasks, out, "--concurrency", "1")
        child = pexpect.spawn(
            argv[0], argv[1:], env=env_for(server.url, tmp_path), encoding="utf-8", timeout=60, dimensions=(40, 200)
        )
        child.logfile_read = seen = io.StringIO()
        child.expect(r"t07 fail \(success check 1\)")  # a failure is printed above the live line
        child.expect(r"done 3/3 · running 0 · failed 1 · [\d,]+ tokens · \$0\.\d{4} · [\d.]+ runs/min · ETA 0:00:00")
        child.expect(pexpect.EOF)
        child.close()
    assert child.exitstatus == 0 and len(lines(out)) == 3
    assert "\x1b[2K" in seen.getvalue()  # the status line is redrawn in place (erase line) …
    assert "p0 pass" not in seen.getvalue()  # … and a pass gets no line of its own, unlike in a log

"""``drivetrain batch --ray ADDRESS``: the same sweep as ``test_batch.py`` on a real local Ray instance (one for
the file, started here; the CLI connects to it by address), and a worker that dies."""

from __future__ import annotations

import json

import pytest

from drivetrain.batch.results import task_runs
from drivetrain.testing import ScriptedServer
from test_batch import FAILING, IDS, batch, lines, prompt, script, write_tasks

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("ray")  # one cluster for the file, on one worker


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    home = tmp_path_factory.mktemp("ray-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))  # where Ray keeps its session token, found again by the CLI's ray.init
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            yield ray.get_runtime_context().gcs_address, home
        finally:
            ray.shutdown()


def test_the_same_sweep_on_ray_gives_the_same_statuses(cluster, tmp_path):
    address, home = cluster
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", IDS), tmp_path / "out"
    with ScriptedServer({prompt(i): script(i, out) for i in IDS}) as server:
        proc = batch(server.url, home, tasks, out, "--ray", address, "--concurrency", "4")
    assert proc.returncode == 0, proc.stderr
    results = {r["id"]: r for r in lines(out)}
    assert sorted(results) == IDS and len(lines(out)) == 24
    assert {i: r["status"] for i, r in results.items()} == {i: "fail" if i in FAILING else "pass" for i in IDS}
    assert all(r["turns"] == 2 and r["session_id"] for r in results.values())
    assert {q.conversation for q in server.requests} == {prompt(i) for i in IDS}
    # the workers journaled each run as a local sweep does: its session, its calls, each response's billed usage
    runs = {r.id: r for r in task_runs(out)}
    assert all(r.ended and r.journaled and r.session == results[r.id]["session_id"] for r in runs.values())
    tokens = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    assert all(runs[i].usage == [results[i][k] for k in tokens] for i in IDS)
    assert all(runs[i].calls for i in IDS)


def test_a_task_whose_worker_dies_is_retried_once_then_recorded_as_an_error(cluster, tmp_path):
    address, home = cluster
    attempts = tmp_path / "attempts"
    task = {"id": "dies", "prompt": "never asked", "setup": f"echo x >> {attempts}; kill -9 $PPID"}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    with ScriptedServer([]) as server:
        proc = batch(server.url, home, tmp_path / "tasks.jsonl", tmp_path / "out", "--ray", address)
    assert proc.returncode == 1, proc.stderr  # the task ended in error
    [result] = lines(tmp_path / "out")
    assert result["status"] == "error" and result["subtype"] == "worker_died", result
    assert attempts.read_text() == "x\nx\n"  # the first try and one retry

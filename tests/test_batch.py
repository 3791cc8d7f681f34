"""``drivetrain batch``: the real CLI as a subprocess, its runs against one scripted server that gives every task
its own script (routed by the task's prompt), so that requests can be counted per task."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import cli_process
from drivetrain.batch.execute import Held
from drivetrain.batch.results import read_results
from drivetrain.sessions.file import FileStore
from drivetrain.testing import ScriptedServer, reply, respond, tool_call

DRIVETRAIN = str(Path(sys.executable).parent / "drivetrain")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FAILING = {"t07", "t19"}  # their checks look for a file the run does not write


def prompt(task_id: str) -> str:
    return f"task {task_id}: write done.txt"


def task_line(task_id: str, **more) -> dict:
    check = "test -f missing.txt" if task_id in FAILING else "grep -q finished done.txt"
    return {"id": task_id, "prompt": prompt(task_id), "check": check, **more}


def write_tasks(path: Path, ids: list[str], **more) -> Path:
    path.write_text("".join(json.dumps(task_line(i, **more)) + "\n" for i in ids))
    return path


def script(task_id: str, out: Path, **first_step) -> list:
    """Two requests a task: a Write of done.txt in its workspace, then the answer."""
    done = out.resolve() / "workspaces" / task_id / "done.txt"
    return [
        respond([tool_call("Write", {"file_path": str(done), "content": f"{task_id} finished\n"})], **first_step),
        reply(f"{task_id}: wrote done.txt"),
    ]


def env_for(server_url: str, home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update(
        ANTHROPIC_BASE_URL=server_url,
        ANTHROPIC_API_KEY="sk-test",
        DRIVETRAIN_HOME=str(home / ".drivetrain"),
        HOME=str(home),
    )
    return env


def batch_args(tasks: Path, out: Path, *more: str) -> list[str]:
    return [
        DRIVETRAIN,
        "batch",
        str(tasks),
        "--out",
        str(out),
        "--model",
        "claude-sonnet-4-6",
        "--permission-mode",
        "acceptEdits",
        *more,
    ]


def batch(
    server_url: str, home: Path, tasks: Path, out: Path, *more: str, env: dict | None = None
) -> subprocess.CompletedProcess:
    return cli_process.run(
        batch_args(tasks, out, *more),
        env={**env_for(server_url, home), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


IDS = [f"t{i:02d}" for i in range(24)]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The 24-task sweep, four at a time; its folder, home, process and the server's requests."""
    root = tmp_path_factory.mktemp("sweep")
    tasks, out = write_tasks(root / "tasks.jsonl", IDS), root / "out"
    with ScriptedServer({prompt(i): script(i, out) for i in IDS}) as server:
        proc = batch(server.url, root, tasks, out, "--concurrency", "4")
    return root, out, proc, server.requests


# The tests of the sweep share it, in file order (the rerun adds to its results): one xdist worker runs them all.
IN_ORDER = pytest.mark.xdist_group("batch_sweep")


@IN_ORDER
def test_a_sweep_gives_one_line_per_task_and_passes_by_its_checks(sweep):
    root, out, proc, requests = sweep
    assert proc.returncode == 0, proc.stderr
    results = lines(out)
    assert sorted(r["id"] for r in results) == IDS
    assert {r["id"] for r in results if r["status"] == "fail"} == FAILING
    assert sum(r["status"] == "pass" for r in results) == 22
    for r in results:
        assert r["subtype"] == "success" and r["turns"] == 2 and r["cost_usd"] > 0 and r["wall_s"] > 0
        assert r["check_exit"] == (1 if r["id"] in FAILING else 0)
        assert r["output_tokens"] > 0 and r["cache_creation_input_tokens"] + r["cache_read_input_tokens"] > 0
        assert "workspace" not in r  # not kept
    assert not any((out / "workspaces").iterdir())
    per_task = {i: sum(q.conversation == prompt(i) for q in requests) for i in IDS}
    assert set(per_task.values()) == {2}
    # each run is an ordinary session in the store, its records held until the task ended and then written whole,
    # each with the time it was made; the index agrees
    store = FileStore(root / ".drivetrain")
    for r in results:
        records = store.read(r["session_id"])
        assert [x["seq"] for x in records] == list(range(1, len(records) + 1))
        assert records[0]["kind"] == "session" and records[-1]["kind"] == "result"
        assert {"intent", "outcome", "turn"} <= {x["kind"] for x in records}
        assert [x["ts"] for x in records] == sorted(x["ts"] for x in records)
        assert records[-1]["ts"] > records[0]["ts"]  # made over the run's time, not stamped when written
        info = store.info(r["session_id"])
        assert (info.status, info.num_turns, info.records) == ("success", 2, len(records))
    assert "[24/24]" in proc.stderr and "runs/min" in proc.stderr  # plain progress lines: stderr is no terminal


def test_held_records_reach_the_store_when_the_task_ends_or_anything_reads_it(tmp_path):
    store = FileStore(tmp_path / "home")
    held = Held(store)
    first = held.append("s1", [{"kind": "session", "cwd": "/w"}, {"kind": "prompt", "text": "hi"}])
    assert [(r["seq"], r["kind"]) for r in first] == [(1, "session"), (2, "prompt")]
    assert not store.path("s1").exists()  # nothing written yet
    with pytest.raises(ValueError, match="seq"):
        held.append("s1", [{"kind": "note", "seq": 7}])  # refused as the store refuses it, when appended
    held.append("s1", [{"kind": "note"}])
    assert [r["kind"] for r in held.read("s1")] == ["session", "prompt", "note"]  # a read writes what is held
    held.append("s1", [{"kind": "result", "subtype": "success"}])
    held.append("child", [{"kind": "subagent_of", "session": "s1"}])
    held.flush()
    records = store.read("s1")
    assert [r["seq"] for r in records] == [1, 2, 3, 4] and [r["ts"] for r in records[:2]] == [r["ts"] for r in first]
    assert store.info("s1").status == "success" and store.read("child")[0]["session"] == "s1"


@IN_ORDER
def test_the_report_agrees_with_the_result_lines(sweep):
    _root, out, _, _ = sweep
    proc = cli_process.run(
        [DRIVETRAIN, "batch", "report", str(out), "--json"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    latest = {r.id: r for r in read_results(out)}
    assert report["total"] == len(latest) == 24
    assert report["passed"] == sum(r.status == "pass" for r in latest.values())
    assert report["failed"] + report["errors"] == 24 - report["passed"]
    assert report["cost_usd"] == pytest.approx(sum(r.cost_usd for r in latest.values()))
    assert report["passes"]["turns"] + report["failures"]["turns"] == sum(r.turns for r in latest.values())
    assert sorted(report["failures_by_subtype"]["check_failed"]) == sorted(
        i for i, r in latest.items() if r.status == "fail"
    )
    slowest = max(latest.values(), key=lambda r: r.wall_s)
    assert report["slowest"][0]["id"] == slowest.id
    text = cli_process.run([DRIVETRAIN, "batch", "report", str(out)], capture_output=True, text=True, timeout=60)
    assert f"{report['passed']}/24 passed" in text.stdout and "check_failed: 2" in text.stdout


@IN_ORDER
def test_rerun_failed_runs_only_the_failed_tasks(sweep):
    root, out, _, _ = sweep
    failed = sorted(r.id for r in read_results(out) if r.status != "pass")
    with ScriptedServer({prompt(i): script(i, out) for i in failed}) as server:  # no script for any other task
        proc = batch(server.url, root, root / "tasks.jsonl", out, "--rerun-failed")
    assert proc.returncode == 0, proc.stderr
    assert sorted(r["id"] for r in lines(out)[24:]) == failed
    assert len(read_results(out)) == 24
    with ScriptedServer([]) as server:  # nothing left to run without --rerun-failed: no request at all
        again = batch(server.url, root, root / "tasks.jsonl", out)
    assert again.returncode == 0 and "have a result" in again.stderr


def test_a_sweep_killed_midway_goes_on_without_rerunning_finished_tasks(tmp_path):
    ids = [f"k{i}" for i in range(8)]
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", ids), tmp_path / "out"
    arrived, hold = threading.Event(), threading.Event()  # k5's first request: seen, and never answered
    scripts = {prompt(i): script(i, out) for i in ids}
    scripts[prompt("k5")] = script("k5", out, expect=lambda body: arrived.set(), hold=hold)
    first = ScriptedServer(scripts).start()
    try:
        proc = cli_process.Popen(
            batch_args(tasks, out, "--concurrency", "2", "--workers", "1"),
            env=env_for(first.url, tmp_path),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        assert arrived.wait(60), "k5 never started"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        first.close()
    finished = {r["id"] for r in lines(out)}
    assert len(finished) >= 4 and "k5" not in finished  # two at a time: k5 started after four had finished
    store = FileStore(tmp_path / ".drivetrain")  # a task with a result line has its whole session in the store
    assert all(store.read(r["session_id"])[-1]["kind"] == "result" for r in lines(out))
    with ScriptedServer({prompt(i): script(i, out) for i in ids}) as second:
        again = batch(second.url, tmp_path, tasks, out, "--concurrency", "2", "--workers", "1")
        requests = {i: sum(q.conversation == prompt(i) for q in second.requests) for i in ids}
        unused = second.take_remaining()  # the finished tasks' scripts: meant to stay unused
    assert again.returncode == 0, again.stderr
    asked = {i for i, n in requests.items() if n}
    # None of the finished asked again. k5 (its first request never answered), k6 and k7 (never started) ask for
    # both steps; a task killed after its last answer but before its result line resumes from its session
    # (resumable by default) and may need no request at all.
    assert {"k5", "k6", "k7"} <= asked <= set(ids) - finished, (asked, finished)
    assert all(requests[i] == 2 for i in ("k5", "k6", "k7"))
    assert len(unused) == 2 * len(ids) - sum(requests.values()) >= 2 * len(finished)
    assert sorted(r["id"] for r in lines(out)) == ids  # one line per task in all


# measures the drawn charts in the browser and writes the numbers into the DOM, for --dump-dom to read back
MEASURE = """<script>
const box = e => { const b = e.getBBox(); return [b.x, b.y, b.width, b.height]; };
const out = {outcomes: Object.fromEntries([...document.querySelectorAll('#outcomes .outcome')].map(
               e => [e.dataset.status, box(e)])),
             wall: [...document.querySelectorAll('#wall .run-bar')].map(e => [e.dataset.id, box(e)]),
             svg: document.querySelector('#wall').getBoundingClientRect().toJSON()};
const pre = document.createElement('pre'); pre.id = 'measured'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


@IN_ORDER
def test_the_html_report_is_self_contained_and_chromium_draws_its_charts(sweep, tmp_path):
    from test_html_report import chromium, near, read_png

    _root, out, _, _ = sweep
    page_path = tmp_path / "report.html"
    proc = cli_process.run(
        [DRIVETRAIN, "batch", "report", str(out), "--html", str(page_path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    page = page_path.read_text()
    assert not re.search(r"<(script|link|img|iframe)\b|\b(src|href)=|@import|url\(", page)
    assert all(f">{i}<" in page for i in IDS)
    if not CHROMIUM:  # the page itself is checked above, with or without a browser
        pytest.skip("needs chromium (Debian package chromium)")
    measured = tmp_path / "measured.html"
    measured.write_text(page.replace("</body>", MEASURE + "</body>"))
    dom = chromium(f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", measured.as_uri())
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom.stdout, re.S)
    assert found, f"the page's script did not run: {dom.stderr[-2000:]}"
    m = json.loads(found.group(1).replace("&quot;", '"'))
    widths = {status: b[2] for status, b in m["outcomes"].items()}
    passed = sum(r.status == "pass" for r in read_results(out))
    assert widths["pass"] / (widths["pass"] + widths["fail"] + widths["error"]) == pytest.approx(passed / 24, abs=1e-3)
    walls = {r.id: r.wall_s for r in read_results(out)}
    assert sorted(i for i, _ in m["wall"]) == IDS
    tallest = max(h for _, (*_, h) in m["wall"])
    for task_id, (*_, h) in m["wall"]:
        assert h / tallest == pytest.approx(walls[task_id] / max(walls.values()), abs=0.01)
    shot = tmp_path / "shot.png"
    chromium(
        f"--user-data-dir={tmp_path / 'profile2'}", "--window-size=1000,900", f"--screenshot={shot}", page_path.as_uri()
    )
    _width, _height, pixels = read_png(shot.read_bytes())
    colours = [p for row in pixels for p in row]
    assert sum(near(p, (0x4C, 0xAF, 0x50)) for p in colours) > 5000, "no passes drawn"
    assert sum(near(p, (0xF0, 0xAD, 0x4E)) for p in colours) > 300, "no failures drawn"

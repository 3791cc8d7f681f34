"""Fault injection: the real CLI killed with SIGKILL at each step of a scripted session, then resumed.

The session (``-p --output-format stream-json``): the model makes three Bash calls at once, then one more,
then answers. Each Bash call waits for a file the test creates, so a kill can land while exactly the calls
the test chooses are running. Every moment is reached by watching from outside, never by a timer:

- the scripted server has received request N and holds its answer (``hold``), or has streamed part of it
  and stalls (``stall_after_events``; ``Request.events_sent`` says how far it got);
- a Bash call's marker files (started, done) appear;
- "answered, not saved yet": the test holds the session log's lock (the store appends under ``flock``),
  lets the answer or the tools finish, and kills once ``/proc/locks`` shows the CLI blocked on that lock.

Then the CLI's process group gets SIGKILL, and: no Bash process may be left (the watchdog ends them); the log
loads to a history that lints clean; ``--resume ID --fork-session`` without a prompt sends exactly that
history again; ``--resume ID "next"`` sends it with the new prompt; the scripted server validates each request
as the real API would.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import cli_process
from drivetrain.messages import lint
from drivetrain.sessions.file import FileStore
from drivetrain.sessions.log import load
from drivetrain.testing import ScriptedServer, reply, respond, text, tool_call

TIMEOUT = 60  # seconds for anything to happen; on an idle machine each wait is well under one
STALL_AT = 4  # SSE events sent before a stream stalls: the answer is cut mid-block

# ---------------------------------------------------------------- the session


def gated(name: str, grandchild: bool = False) -> str:
    """A Bash command that records its pid, says it started, waits for go_<name>, says it is done."""
    spawn = f"sleep 120 >/dev/null 2>&1 & echo $! > grand_{name}; " if grandchild else ""
    return (
        f"echo $$ > pid_{name}; {spawn}touch started_{name}; "
        f"until [ -e go_{name} ]; do sleep 0.02; done; touch done_{name}; echo finished {name}"
    )


PARALLEL = ("p1", "p2", "p3")
SINGLE = "s4"


def results_ok(ids):
    def check(body):
        results = body["messages"][-1]["content"]
        assert [r["tool_use_id"] for r in results] == list(ids)
        assert all(not r.get("is_error") for r in results), results

    return check


def script(point: str, holds: dict[int, threading.Event]) -> list:
    """The whole session; the request the point is in is held or stalls."""

    def shape(n: int) -> dict:
        if point in (f"awaiting_answer_{n}", f"answer_unsaved_{n}"):
            holds[n] = threading.Event()
            return {"hold": holds[n]}
        if point == f"mid_stream_{n}":
            return {"stall_after_events": STALL_AT, "stall_seconds": TIMEOUT * 2}
        return {}

    return [
        respond(
            [
                text("Running the three checks at once."),
                *(tool_call("Bash", {"command": gated(n, grandchild=n == "p1")}, id=f"toolu_{n}") for n in PARALLEL),
            ],
            **shape(1),
        ),
        respond(
            [tool_call("Bash", {"command": gated(SINGLE)}, id=f"toolu_{SINGLE}")],
            expect=results_ok([f"toolu_{n}" for n in PARALLEL]),
            **shape(2),
        ),
        reply("All four checks passed.", expect=results_ok([f"toolu_{SINGLE}"]), **shape(3)),
    ]


# ---------------------------------------------------------------- the points, in the order the session reaches them

POINTS = [
    "awaiting_answer_1",
    "mid_stream_1",
    "answer_unsaved_1",
    "tool_p1_running",
    "tool_p2_running",
    "tool_p3_running",
    "results_unsaved_1",
    "awaiting_answer_2",
    "mid_stream_2",
    "answer_unsaved_2",
    "tool_s4_running",
    "results_unsaved_2",
    "awaiting_answer_3",
    "mid_stream_3",
    "answer_unsaved_3",
]


class Reached(Exception):
    """The walk is at the point to kill."""


@dataclass
class Cli:
    """One CLI process of the session under test, and what the test watches of it."""

    proc: subprocess.Popen
    server: ScriptedServer
    ws: Path
    home: Path
    holds: dict[int, threading.Event]
    lock_fd: int | None = None
    pids: list[int] = field(default_factory=list)

    def wait(self, what: str, cond, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"the CLI exited ({self.proc.returncode}) while waiting for {what}:\n{self.stderr()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.01)

    def stderr(self) -> str:
        return (self.ws.parent / "stderr.txt").read_text()

    @property
    def log(self) -> Path | None:
        logs = list((self.home / "sessions").glob("*.jsonl")) if (self.home / "sessions").is_dir() else []
        return logs[0] if logs else None

    def records(self) -> list[dict]:
        if self.log is None:
            return []
        out = []
        for line in self.log.read_bytes().split(b"\n"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line being written
        return out

    def intents(self) -> set[str]:
        return {r["call_id"] for r in self.records() if r.get("kind") == "intent"}

    def outcomes(self) -> set[str]:
        return {r["call_id"] for r in self.records() if r.get("kind") == "outcome"}

    def lock(self) -> None:
        """Hold the session log's lock: the CLI's next append (a record, a step's save) waits for it."""
        assert self.log is not None
        self.lock_fd = os.open(self.log, os.O_RDWR | os.O_APPEND)
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX)

    def unlock(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

    def blocked_on_lock(self) -> bool:
        """``/proc/locks`` lists the CLI as waiting (``->``) for a flock on the session log."""
        inode = os.stat(self.log).st_ino
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if "->" in fields and "FLOCK" in fields:
                rest = fields[fields.index("->") + 1 :]
                if int(rest[3]) == self.proc.pid and rest[4].endswith(f":{inode}"):
                    return True
        return False

    def marker(self, kind: str, name: str) -> Path:
        return self.ws / f"{kind}_{name}"

    def release(self, *names: str) -> None:
        for n in names:
            self.marker("go", n).touch()

    def started(self, names) -> None:
        """Wait until each call of ``names`` runs (its marker) and its intent record is written; note the pids."""
        self.wait(
            "the calls to start",
            lambda: (
                all(self.marker("started", x).exists() for x in names)
                and self.intents() >= {f"toolu_{x}" for x in names}
            ),
        )
        self.pids += [int(self.marker("pid", x).read_text()) for x in names]
        if "p1" in names:
            self.pids.append(int(self.marker("grand", "p1").read_text()))  # written before started_p1

    def tools(self, names, point: str) -> None:
        """A batch of gated Bash calls, released one by one: a point while each runs (those before it done)."""
        self.started(names)
        for i, name in enumerate(names):
            if point == f"tool_{name}_running":
                assert all(self.marker("done", x).exists() for x in names[:i])
                assert not any(self.marker("done", x).exists() for x in names[i:])
                raise Reached
            self.release(name)
            self.wait(f"{name} to finish", lambda: self.outcomes() >= {f"toolu_{name}"})

    def model_turn(self, n: int, point: str) -> None:
        if point == f"answer_unsaved_{n}":
            self.wait(f"request {n}", lambda: len(self.server.requests) >= n)
            self.lock()
            self.holds[n].set()
            self.wait(f"answer {n} sent", lambda: self.server.requests[n - 1].answered)
            self.wait("the CLI to block saving the answer", self.blocked_on_lock)
            raise Reached
        self.wait(f"request {n}", lambda: len(self.server.requests) >= n)
        if point == f"awaiting_answer_{n}":
            raise Reached
        if point == f"mid_stream_{n}":
            self.wait(f"answer {n} to stall", lambda: self.server.requests[n - 1].events_sent == STALL_AT)
            assert not self.server.requests[n - 1].answered
            raise Reached


def walk(c: Cli, point: str) -> None:
    """Drive the session to ``point``; raises Reached there."""
    c.model_turn(1, point)
    for names, n in ((PARALLEL, 1), ((SINGLE,), 2)):
        if point == f"results_unsaved_{n}":
            c.started(names)
            c.lock()  # held before the calls end: their results' records come right after
            c.release(*names)
            c.wait("the calls to finish", lambda: all(c.marker("done", x).exists() for x in names))
            c.wait("the CLI to block saving the results", c.blocked_on_lock)
            raise Reached
        c.tools(names, point)
        c.model_turn(n + 1, point)
    raise AssertionError(f"no such point: {point}")


# ---------------------------------------------------------------- running the CLI


def cli_env(server: ScriptedServer) -> dict[str, str]:
    """The test's environment (its own HOME and DRIVETRAIN_HOME from conftest, PYTHONPATH as given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update(
        {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_MODEL": "claude-sonnet-4-6"}
    )
    return env


BASE = [
    sys.executable,
    "-m",
    "drivetrain",
    "-p",
    "--output-format",
    "stream-json",
    "--provider",
    "anthropic",
    "--permission-mode",
    "bypassPermissions",
]


def start(server: ScriptedServer, ws: Path, *args: str) -> subprocess.Popen:
    out, err = (open(ws.parent / name, "w") for name in ("stdout.txt", "stderr.txt"))
    with out, err:
        return cli_process.Popen(
            [*BASE, *args],
            cwd=ws,
            env=cli_env(server),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )


def run(steps: list, ws: Path, *args: str) -> tuple[subprocess.CompletedProcess, ScriptedServer]:
    with ScriptedServer(steps) as server:
        proc = cli_process.run(
            [*BASE, *args],
            cwd=ws,
            env=cli_env(server),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT * 2,
        )
        assert proc.returncode == 0, proc.stderr
    return proc, server


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a parent that will never reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


def wire(history) -> list[dict]:
    return [m.to_wire() for m in history]


def without_cache_control(obj):
    if isinstance(obj, dict):
        return {k: without_cache_control(v) for k, v in obj.items() if k != "cache_control"}
    if isinstance(obj, list):
        return [without_cache_control(v) for v in obj]
    return obj


def with_prompt(messages: list[dict], prompt: str) -> list[dict]:
    """The history as the next request sends it with a new prompt: one user turn, not two in a row."""
    block = {"type": "text", "text": prompt}
    if messages and messages[-1]["role"] == "user":
        return [*messages[:-1], {"role": "user", "content": [*messages[-1]["content"], block]}]
    return [*messages, {"role": "user", "content": [block]}]


def sends(expected: list[dict]):
    def check(body):
        got = without_cache_control(body["messages"])
        assert got == without_cache_control(expected), json.dumps(got, indent=1)[:3000]

    return check


# ---------------------------------------------------------------- a repair is saved, once


def crashed_during_tools(store, tmp_path) -> str:
    """A session whose log ends in RunTools (the process died before the call ran): it needs a repair."""
    import asyncio

    from drivetrain import Agent
    from drivetrain.models.anthropic import AnthropicModel
    from drivetrain.tools.bash import Bash

    async def go(server):
        model = AnthropicModel.from_env(
            "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}
        )
        run = Agent(model=model, tools=[Bash()], strict=True, store=store, cwd=tmp_path).start("go")
        await run.step()
        await run.step()
        return run.session_id

    with ScriptedServer([respond([tool_call("Bash", {"command": "true"}, id="toolu_a")])]) as server:
        return asyncio.run(go(server))


def test_a_repair_resumed_in_place_is_in_the_log(tmp_path):
    """Resumed without a prompt, the repaired history is what the model is sent, and what the log replays to:
    the next load has nothing to repair (before the fix, the interrupted result was missing from the log, and
    each load "repaired" it again into a history the model never saw)."""
    home = Path(os.environ["DRIVETRAIN_HOME"])
    store = FileStore(home)
    sid = crashed_during_tools(store, tmp_path)
    with ScriptedServer([reply("resumed")]) as server:
        proc = cli_process.run(
            [*BASE, "--resume", sid],
            cwd=tmp_path,
            env=cli_env(server),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=TIMEOUT * 2,
        )
    assert proc.returncode == 0, proc.stderr
    sent = server.requests[0].body["messages"]
    loaded = load(store, sid)
    assert loaded.repaired is None and [r["kind"] for r in store.read(sid)].count("repair") == 1
    assert without_cache_control(wire(loaded.value.history[:-1])) == without_cache_control(sent)
    assert loaded.value.history[-1].text == "resumed"


def test_a_fork_of_a_crashed_session_leaves_it_untouched(tmp_path):
    home = Path(os.environ["DRIVETRAIN_HOME"])
    store = FileStore(home)
    sid = crashed_during_tools(store, tmp_path)
    before = store.read(sid)
    with ScriptedServer([reply("forked")]) as server:
        proc = cli_process.run(
            [*BASE, "--resume", sid, "--fork-session"],
            cwd=tmp_path,
            env=cli_env(server),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=TIMEOUT * 2,
        )
    assert proc.returncode == 0, proc.stderr
    assert store.read(sid) == before
    fork = json.loads(proc.stdout.splitlines()[-1])["session_id"]
    assert [r["kind"] for r in store.read(fork)].count("repair") == 1  # the repair is the fork's
    assert load(store, fork).repaired is None


# ---------------------------------------------------------------- the test

passed: list[str] = []


# The points and the count of those that passed run on one xdist worker: ``passed`` is this process's.
ONE_WORKER = pytest.mark.xdist_group("fault_points")


@ONE_WORKER
@pytest.mark.parametrize("point", POINTS)
def test_killed_at_each_point_the_session_loads_and_resumes(point, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    home = Path(os.environ["DRIVETRAIN_HOME"])
    holds: dict[int, threading.Event] = {}
    server = ScriptedServer(script(point, holds)).start()
    c = Cli(start(server, ws, "Run the checks."), server, ws, home, holds)
    try:
        with pytest.raises(Reached):
            walk(c, point)
        os.killpg(c.proc.pid, signal.SIGKILL)
        assert c.proc.wait(10) == -signal.SIGKILL
    finally:
        if c.proc.poll() is None:
            os.killpg(c.proc.pid, signal.SIGKILL)
            c.proc.wait()
        c.unlock()
        server.close()
    assert server.violations == [] and server.unexpected == []

    # every Bash process of the killed CLI (and the grandchild one of them left) is ended by the watchdog
    assert c.pids or not point.startswith(("tool_", "results_"))
    left = wait_gone(c.pids, 10)
    for pid in left:  # not left behind, spinning, by a failed test
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"processes outlived the kill of drivetrain: {left} of {c.pids}"

    # the log loads, repaired, to a history the API would accept
    sid = c.log.stem
    store = FileStore(home)
    loaded = load(store, sid)
    history = loaded.value.history
    assert lint(list(history)).problems == []
    assert history[0].role == "user" and history[0].text == "Run the checks."
    if point.startswith(("tool_", "results_")):
        names = PARALLEL if point.endswith(("_1",)) or point.startswith("tool_p") else (SINGLE,)
        assert loaded.repaired is not None
        added = loaded.repaired["results_added"]
        assert [a["tool_use_id"] for a in added] == [f"toolu_{n}" for n in names]
        assert all(a["started"] for a in added)  # each had its intent record
        last = history[-1]
        assert [b.is_error for b in last.content] == [True] * len(names)
        # a call that had ended (its outcome record) "ran to the end"; one still running "may have had side effects"
        ended = names.index(point.split("_")[1]) if point.startswith("tool_") else 0
        assert ["ran to the end" in b.content for b in last.content] == [True] * ended + [False] * (len(names) - ended)
        assert all("may have had side effects" in b.content for b in last.content[ended:])
    else:  # killed before an answer was saved: the log ends with the request that was being made
        assert history[-1].role == "user"
        turn = int(point[-1])
        assert sum(1 for m in history if m.role == "assistant") == turn - 1

    # without a prompt (as a fork, so the crashed session stays as it was): the same request is made again
    before = store.read(sid)
    proc, _ = run(
        [reply("Picked up where it stopped.", expect=sends(wire(history)))], ws, "--resume", sid, "--fork-session"
    )
    assert json.loads(proc.stdout.splitlines()[-1])["result"] == "Picked up where it stopped."
    assert store.read(sid) == before

    # with a prompt: the next user turn, on the same session
    proc, _ = run([reply("Next done.", expect=sends(with_prompt(wire(history), "next")))], ws, "--resume", sid, "next")
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["result"] == "Next done." and result["session_id"] == sid
    after = load(store, sid)
    assert after.repaired is None and lint(list(after.value.history)).problems == []
    passed.append(point)


@ONE_WORKER
def test_every_injection_point_tried_passed(request):
    """Runs after the parametrized test (file order): the count the issue asks for, of the points selected."""
    tried = [
        item.callspec.params["point"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_killed_at_each_point_the_session_loads_and_resumes"
    ]
    print(f"\nfault injection: {len(passed)} of {len(tried)} points tried passed: {', '.join(passed)}")
    assert sorted(passed) == sorted(tried)


# ---------------------------------------------------------------- SIGINT / SIGTERM while three Bash calls run (a fourth has ended)

SLEEPERS = {
    "a": "echo $$ > pid_a; touch started_a; sleep 60",
    "b": "echo $$ > pid_b; touch started_b; sleep 60",
    # a grandchild: a shell that backgrounds a sleep and waits for it
    "c": "echo $$ > pid_c; sh -c 'sleep 60 & echo $! > grand_c; wait'",
    "d": "echo $$ > pid_d; echo early",  # ends at once: its real result is kept
}


def group_members(pgids: set[int]) -> list[int]:
    """Live processes (not zombies) in any of these process groups."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in pgids and fields[0] not in ("Z", "X"):
            out.append(int(stat.parent.name))
    return out


def start_sleepers(ws: Path, server: ScriptedServer) -> tuple[subprocess.Popen, set[int], int]:
    """The CLI with the three calls running; their process groups and the grandchild's pid."""
    c = Cli(start(server, ws, "Sleep three ways."), server, ws, Path(os.environ["DRIVETRAIN_HOME"]), {})
    c.wait(
        "the three calls",
        lambda: (
            all((ws / f"started_{n}").exists() for n in "ab")
            and (ws / "grand_c").exists()
            and (ws / "grand_c").read_text().strip() != ""
            and c.intents() == {"toolu_a", "toolu_b", "toolu_c", "toolu_d"}
            and any(r.get("kind") == "outcome" and r["call_id"] == "toolu_d" for r in c.records())
        ),
    )
    groups = {int((ws / f"pid_{n}").read_text()) for n in "abc"}
    grandchild = int((ws / "grand_c").read_text())
    assert (
        alive(grandchild) and len(group_members(groups)) >= 4
    )  # two sleeps (bash execs the last command), sh, its sleep
    return c.proc, groups, grandchild


def resume_next(ws: Path, sid: str) -> None:
    store = FileStore(Path(os.environ["DRIVETRAIN_HOME"]))
    history = load(store, sid).value.history
    proc, _ = run([reply("Next done.", expect=sends(with_prompt(wire(history), "next")))], ws, "--resume", sid, "next")
    assert json.loads(proc.stdout.splitlines()[-1])["result"] == "Next done."


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_three_bash_calls_ends_them_answers_them_and_saves(sig, code, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    calls = [tool_call("Bash", {"command": cmd}, id=f"toolu_{n}") for n, cmd in SLEEPERS.items()]
    server = ScriptedServer([respond(calls)]).start()
    try:
        proc, groups, grandchild = start_sleepers(ws, server)
        t0 = time.monotonic()
        os.kill(proc.pid, sig)
        try:
            assert proc.wait(2) == code, (ws.parent / "stderr.txt").read_text()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        exited = time.monotonic() - t0
        left = []
        while (left := group_members(groups | {grandchild})) and time.monotonic() - t0 < 2:
            time.sleep(0.02)
        gone = time.monotonic() - t0
    finally:
        server.close()
    assert exited < 2 and left == [] and gone < 2, (exited, left, gone)
    assert not alive(grandchild)
    server.assert_complete()

    out = [json.loads(line) for line in (ws.parent / "stdout.txt").read_text().splitlines()]
    assert out[-1]["subtype"] == "error_interrupted" and out[-1]["signal"] == sig.name
    sid = out[0]["session_id"]
    assert f"--resume {sid}" in (ws.parent / "stderr.txt").read_text()

    store = FileStore(Path(os.environ["DRIVETRAIN_HOME"]))
    loaded = load(store, sid)
    assert loaded.repaired is None  # nothing to repair: the interruption was saved
    last = loaded.value.history[-1]
    assert [b.tool_use_id for b in last.content] == ["toolu_a", "toolu_b", "toolu_c", "toolu_d"]
    assert all(b.is_error and b.content.startswith("Interrupted") for b in last.content[:3])
    assert (last.content[3].is_error, last.content[3].content) == (False, "early")
    interrupted = [r for r in store.read(sid) if r["kind"] == "interrupted"]
    assert [(r["signal"], r["during"]) for r in interrupted] == [(sig.name, "RunTools")]
    assert store.info(sid).status == "interrupted"
    resume_next(ws, sid)


def test_two_sigints_exit_at_once_and_the_log_still_loads(tmp_path):
    """The first SIGINT's orderly stop is held up (here: the session store's lock is held, as a hung disk or
    database would); the second exits at once all the same, and the log, without the interruption's save,
    still loads (repaired) and resumes."""
    ws = tmp_path / "ws"
    ws.mkdir()
    calls = [tool_call("Bash", {"command": cmd}, id=f"toolu_{n}") for n, cmd in SLEEPERS.items()]
    server = ScriptedServer([respond(calls)]).start()
    c = None
    try:
        proc, groups, grandchild = start_sleepers(ws, server)
        c = Cli(proc, server, ws, Path(os.environ["DRIVETRAIN_HOME"]), {})
        c.lock()
        os.kill(proc.pid, signal.SIGINT)
        c.wait("the first SIGINT's stop to block saving", c.blocked_on_lock)
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        try:
            assert proc.wait(5) == 130
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        exited = time.monotonic() - t0
    finally:
        if c is not None:
            c.unlock()
        server.close()
    assert exited < 1, exited
    assert wait_gone(group_members(groups | {grandchild}), 3) == []
    assert not alive(grandchild)

    sid = json.loads((ws.parent / "stdout.txt").read_text().splitlines()[0])["session_id"]
    loaded = load(FileStore(Path(os.environ["DRIVETRAIN_HOME"])), sid)
    assert loaded.repaired is not None  # the interruption was never saved: the load answers the calls
    last = loaded.value.history[-1]
    assert lint(list(loaded.value.history)).problems == []
    assert [b.tool_use_id for b in last.content] == ["toolu_a", "toolu_b", "toolu_c", "toolu_d"]
    assert all(b.is_error for b in last.content)
    assert "ran to the end" in last.content[3].content  # its outcome was on record, its output not saved
    resume_next(ws, sid)


def test_killed_the_moment_its_commands_spawn_none_runs_on(tmp_path):
    """The CLI is frozen (SIGSTOP) as soon as its Bash processes exist, then killed: at that moment it may not
    yet have handed their process groups to the watchdog, so a command must not start before it has."""
    ws = tmp_path / "ws"
    ws.mkdir()
    calls = [tool_call("Bash", {"command": f"touch ran_{n}; sleep 60"}, id=f"toolu_{n}") for n in range(3)]
    server = ScriptedServer([respond(calls)]).start()
    proc = start(server, ws, "Spawn.")
    try:
        deadline = time.monotonic() + TIMEOUT
        kids: list[int] = []
        while not kids and time.monotonic() < deadline and proc.poll() is None:
            for stat in Path("/proc").glob("[0-9]*/stat"):
                try:
                    if (
                        int(stat.read_text().rsplit(")", 1)[1].split()[1]) == proc.pid
                        # bash -c, or the sleep it execs as its last command ("sleep\0" "60\0"): once touch
                        # has run, bash's own command line is gone, and a slow scan found neither
                        and b"sleep 60" in (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
                    ):
                        kids.append(int(stat.parent.name))
                except (OSError, ValueError, IndexError):
                    continue
        os.kill(proc.pid, signal.SIGSTOP)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        server.close()
    assert kids, "no Bash process seen"
    deadline = time.monotonic() + 5
    while (left := group_members(set(kids))) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pgid in kids:  # not left behind by a failed test
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert left == [], f"{left} outlived the kill (commands that ran: {sorted(p.name for p in ws.glob('ran_*'))})"


# ---------------------------------------------------------------- Ctrl-C in interactive mode (a real pty)

PTY_TIMEOUT = 180  # generous: a busy two-core machine starting Python and the SDKs


def spawn_interactive(server: ScriptedServer, ws: Path):
    import pexpect

    env = {**cli_env(server), "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "drivetrain"],
        cwd=str(ws),
        env=env,
        encoding="utf-8",
        timeout=PTY_TIMEOUT,
        dimensions=(40, 160),
    )
    child.delaybeforesend = None
    child.expect_exact("/exit to leave")
    return child


PROMPT = __import__("re").compile(r"\n(?:\x1b\[[0-9;?]*[A-Za-z])*>")  # a line that starts with ">"
CHOICES = "No, and tell the model what to do differently"  # the last of the numbered options


def session_records(ws: Path) -> tuple[str, list[dict]]:
    store = FileStore(Path(os.environ["DRIVETRAIN_HOME"]))
    [info] = store.list(cwd=str(ws))
    return info.session_id, store.read(info.session_id)


def test_ctrl_c_at_an_approval_answers_the_call_saves_and_the_next_prompt_works(tmp_path):
    import pexpect

    ws = tmp_path / "ws"
    ws.mkdir()

    def interrupted_then_next(body):
        result, prompt = body["messages"][-1]["content"]
        assert result["tool_use_id"] == "toolu_x" and result["is_error"], result
        assert result["content"].startswith("Interrupted") and "never ran" in result["content"], result
        assert (prompt["type"], prompt["text"]) == ("text", "next")  # (a cache breakpoint may sit on it)

    steps = [
        respond([tool_call("Bash", {"command": "touch made.txt"}, id="toolu_x")]),
        reply("Left it alone.", expect=interrupted_then_next),
    ]
    with ScriptedServer(steps) as server:
        child = spawn_interactive(server, ws)
        child.expect(PROMPT)
        child.sendline("make the file")
        child.expect_exact("$ touch made.txt")
        child.expect_exact(CHOICES)  # drawn once the question has the keys
        child.send("\x03")  # Ctrl-C at the question
        child.expect_exact("(interrupted")
        child.expect(PROMPT)
        # saved at once, before any next prompt: the call answered, the interruption recorded
        sid, records = session_records(ws)
        assert [(r["signal"], r["during"]) for r in records if r["kind"] == "interrupted"] == [("SIGINT", "RunTools")]
        loaded = load(FileStore(Path(os.environ["DRIVETRAIN_HOME"])), sid)
        assert loaded.repaired is None
        last = loaded.value.history[-1]
        assert [(b.tool_use_id, b.is_error) for b in last.content] == [("toolu_x", True)]
        child.sendline("next")
        child.expect_exact("Left it alone.")
        child.expect(PROMPT)
        child.sendline("/exit")
        child.expect(pexpect.EOF)
        child.close()
    assert child.exitstatus == 0, child.before
    assert not (ws / "made.txt").exists()
    assert lint(list(load(FileStore(Path(os.environ["DRIVETRAIN_HOME"])), sid).value.history)).problems == []


def test_ctrl_c_while_an_approved_call_runs_interrupts_it(tmp_path):
    """After an approval question, Ctrl-C still reaches the run: the question's prompt must not leave the
    terminal's SIGINT going nowhere while the approved command runs."""
    import pexpect

    ws = tmp_path / "ws"
    ws.mkdir()

    def interrupted(body):
        result, prompt = body["messages"][-1]["content"]
        assert result["is_error"] and result["content"].startswith("Interrupted"), result
        assert prompt["text"] == "next"

    steps = [
        respond([tool_call("Bash", {"command": "echo $$ > pid; sleep 60"}, id="toolu_s")]),
        reply("Stopped.", expect=interrupted),
    ]
    with ScriptedServer(steps) as server:
        child = spawn_interactive(server, ws)
        child.expect(PROMPT)
        child.sendline("sleep a minute")
        child.expect_exact(CHOICES)
        child.send("1")
        deadline = time.monotonic() + PTY_TIMEOUT
        while not ((ws / "pid").exists() and (ws / "pid").read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.02)
        pid = int((ws / "pid").read_text())
        t0 = time.monotonic()
        child.send("\x03")  # the terminal's Ctrl-C: a SIGINT to drivetrain (the command has its own session)
        child.expect_exact("(interrupted", timeout=10)
        assert time.monotonic() - t0 < 5 and wait_gone([pid], 2) == []
        child.expect(PROMPT)
        child.sendline("next")
        child.expect_exact("Stopped.")
        child.expect(PROMPT)
        child.sendline("/exit")
        child.expect(pexpect.EOF)
        child.close()
    assert child.exitstatus == 0

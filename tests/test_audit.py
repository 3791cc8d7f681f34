"""The audit log: records appended to the session's log through a store, redacted, created lazily, readable after a
crash. (The store itself has its own conformance suite: test_store_conformance.py.)"""

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from drivetrain.sessions.audit import AuditLog
from drivetrain.sessions.file import FileStore

BEARER = "Bearer abc123def456ghi789jkl"


def test_created_lazily_under_drivetrain_home(tmp_path, monkeypatch):
    home = tmp_path / "dthome"
    monkeypatch.setenv("DRIVETRAIN_HOME", str(home))
    log = AuditLog.for_session("sess-1")
    path = log.store.path("sess-1")
    assert path == home / "sessions" / "sess-1.jsonl"
    assert not home.exists()  # constructing does no work
    log.write("note", text="hello")
    assert path.is_file()
    assert path.stat().st_mode & 0o777 == 0o600


def test_default_home_is_dot_drivetrain(tmp_path, monkeypatch):
    monkeypatch.delenv("DRIVETRAIN_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert AuditLog.for_session("abc").store.path("abc") == tmp_path / ".drivetrain" / "sessions" / "abc.jsonl"
    elsewhere = AuditLog.for_session("abc", home=tmp_path / "h")
    assert elsewhere.store.path("abc") == tmp_path / "h" / "sessions" / "abc.jsonl"


@pytest.mark.parametrize("bad", ["", "../escape", "a/b", ".hidden", "x..y"])
def test_session_id_must_be_a_plain_file_name(bad, tmp_path):
    with pytest.raises(ValueError):
        AuditLog.for_session(bad, home=tmp_path)


def test_records_in_order_with_header_fields(tmp_path):
    log = AuditLog.for_session("s", home=tmp_path)
    log.intent(
        "toolu_1",
        "Bash",
        {"command": "git status"},
        "allow",
        "rule:Bash(git status:*)@/proj/.drivetrain/settings.json",
        "matches an allow rule",
    )
    t0 = time.time()
    log.outcome("toolu_1", "Bash", t0, t0 + 0.25, is_error=False, exit_code=0, result_bytes=120)
    log.denied("toolu_2", "Write", {"file_path": "/etc/passwd", "content": "x"}, "mode:plan", "plan mode")
    log.write("note", anything=[1, 2])
    records = log.store.read("s")
    assert records.torn == []
    assert [r["kind"] for r in records] == ["intent", "outcome", "denied", "note"]
    assert [r["seq"] for r in records] == [1, 2, 3, 4]
    for r in records:
        assert r["session_id"] == "s" and r["v"] == 1
        assert datetime.strptime(r["ts"], "%Y-%m-%dT%H:%M:%S.%f%z").tzinfo is not None
    intent, outcome, denied, _ = records
    assert intent["input"] == {"command": "git status"} and intent["decision"] == "allow"
    assert intent["decided_by"] == "rule:Bash(git status:*)@/proj/.drivetrain/settings.json"
    assert outcome["duration_ms"] == 250.0 and outcome["exit_code"] == 0 and outcome["result_bytes"] == 120
    assert outcome["started_at"].endswith("Z") and outcome["is_error"] is False
    assert denied["decided_by"] == "mode:plan" and denied["reason"] == "plan mode"


def test_outcome_accepts_datetimes(tmp_path):
    log = AuditLog(FileStore(tmp_path), "a")
    start = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    rec = log.outcome("c", "Read", start, start.replace(second=6), is_error=True, error="boom")
    assert rec["started_at"] == "2025-01-02T03:04:05.000Z" and rec["duration_ms"] == 1000.0
    assert rec["session_id"] == "a" and rec == log.store.read("a")[0]  # returned as written


def test_records_are_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_DEPLOY_TOKEN", "dpl-9f8e7d6c5b4a")
    log = AuditLog(FileStore(tmp_path), "a", extra_secrets=["hunter2hunter2"])
    log.intent("c1", "Bash", {"command": f"curl -H 'Authorization: {BEARER}' https://x"}, "allow", "person")
    log.outcome("c1", "Bash", 0.0, 1.0, is_error=True, error="echoed dpl-9f8e7d6c5b4a and hunter2hunter2")
    log.write("note", api_key="sk-ant-api03-abcdefghijklmnop")
    raw = log.store.path("a").read_text()
    for secret in ("abc123def456", "dpl-9f8e7d6c5b4a", "hunter2hunter2", "abcdefghijklmnop"):
        assert secret not in raw
    records = log.store.read("a")
    assert records[0]["input"]["command"] == "curl -H 'Authorization: Bearer [REDACTED]' https://x"
    assert records[2]["api_key"] == "[REDACTED]"


def test_any_text_round_trips(tmp_path):
    log = AuditLog(FileStore(tmp_path), "a")
    text = "naïve 🚀 \u2028 line\nbreak \ud800 lone surrogate"
    log.write("note", text=text, obj=Path("/x"))
    [record] = log.store.read("a")
    assert record["text"] == text and record["obj"] == "/x"
    assert log.store.path("a").read_bytes().count(b"\n") == 1


def test_reserved_field_names_are_refused(tmp_path):
    with pytest.raises(ValueError, match="seq"):
        AuditLog(FileStore(tmp_path), "a").write("note", seq=99)


def test_two_writers_append_and_never_change_a_line(tmp_path):
    a, b = AuditLog.for_session("s", home=tmp_path), AuditLog.for_session("s", home=tmp_path, sync=True)
    path = a.store.path("s")
    before = b""
    for i in range(6):
        (a if i % 3 else b).write("note", i=i)
        now = path.read_bytes()
        assert now.startswith(before) and now.count(b"\n") == i + 1  # earlier bytes untouched
        before = now
    records = a.store.read("s")
    assert [r["i"] for r in records] == list(range(6))
    assert [r["seq"] for r in records] == [1, 2, 3, 4, 5, 6]  # one sequence across writers


def test_a_resumed_log_continues_the_sequence(tmp_path):
    with AuditLog.for_session("s", home=tmp_path) as log:
        log.write("note", big="x" * 300_000)  # the seq is found without reading the whole line
        log.write("note", big="y" * 300_000)
    assert AuditLog.for_session("s", home=tmp_path).write("note")["seq"] == 3


def test_concurrent_processes_get_distinct_sequence_numbers(tmp_path):
    code = (
        "import sys; from drivetrain.sessions.audit import AuditLog\n"
        "log = AuditLog.for_session('p', home=sys.argv[1])\n"
        "for i in range(150): log.write('note', writer=sys.argv[2], i=i, pad='z' * 2000)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(w)]) for w in range(3)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    records = FileStore(tmp_path).read("p")
    assert records.torn == [] and len(records) == 450
    assert [r["seq"] for r in records] == list(range(1, 451))
    for w in "012":
        assert [r["i"] for r in records if r["writer"] == w] == list(range(150))


def test_torn_last_line_is_tolerated_and_reported(tmp_path):
    log = AuditLog.for_session("t", home=tmp_path)
    path = log.store.path("t")
    log.write("intent", call_id="c1")
    log.write("outcome", call_id="c1")
    log.close()
    with open(path, "ab") as f:  # a crash in the middle of the third record
        f.write(b'{"ts": "2025-01-01T00:00:00.000Z", "session_id": "t", "seq": 3, "kind": "inte')
    with pytest.warns(UserWarning, match=f"{path}:3: skipped a record cut off mid-write"):
        records = log.store.read("t")
    assert [r["seq"] for r in records] == [1, 2] and records.torn == [3]

    resumed = AuditLog.for_session("t", home=tmp_path)
    rec = resumed.write("intent", call_id="c2")
    assert rec["seq"] == 3  # the torn record never counted
    lines = path.read_bytes().split(b"\n")
    assert lines[2].endswith(b'"kind": "inte')  # left as it was, closed by a newline
    assert json.loads(lines[3])["call_id"] == "c2"  # ours starts on a line of its own
    with pytest.warns(UserWarning, match=":3: skipped a record cut off"):
        records = resumed.store.read("t")
    assert [r.get("call_id") for r in records] == ["c1", "c1", "c2"] and records.torn == [3]


def test_no_file_until_written(tmp_path):
    log = AuditLog.for_session("x", home=tmp_path / "deep" / "er")
    log.close()
    assert not (tmp_path / "deep").exists()

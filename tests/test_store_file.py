"""What only FileStore has: JSONL files that a crash can tear, a SQLite index that can be lost or damaged, and file
permissions. (What every store does is in test_store_conformance.py.)"""

import json
import logging
import sqlite3
import warnings
from dataclasses import replace

import pytest

from drivetrain.sessions.file import FileStore, read_log
from drivetrain.sessions.open import open_store
from drivetrain.sessions.store import (
    FOLDED_KINDS,
    CorruptLogWarning,
    SessionLogWarning,
    SessionNotFound,
    fold,
)


def _sessions(store):
    store.append(
        "one",
        [
            {"kind": "session", "cwd": "/a", "model": "m", "provider": "p", "parent_id": None, "forked_from_seq": None},
            {"kind": "prompt", "text": "first"},
        ],
    )
    store.append("two", [{"kind": "prompt", "text": "second"}, {"kind": "turn", "turn": 1, "cost_usd": 0.5}])
    return store.list()


def test_files_live_under_home_and_nothing_is_made_before_use(tmp_path):
    home = tmp_path / "dthome"
    store = open_store({"DRIVETRAIN_HOME": str(home)})
    assert isinstance(store, FileStore) and store.path("abc") == home / "sessions" / "abc.jsonl"
    with pytest.raises(SessionNotFound, match="no session 'abc' in .*dthome/sessions"):
        store.read("abc")
    assert not home.exists()
    store.append("abc", [{"kind": "note"}])
    assert sorted(p.name for p in home.iterdir()) == [
        "sessions",
        "sessions.sqlite3",
        "sessions.sqlite3-shm",
        "sessions.sqlite3-wal",
    ]


def test_only_the_owner_may_read_or_write(tmp_path):
    store = FileStore(tmp_path / "dthome")
    _sessions(store)
    for path in (store.home, store.dir):
        assert path.stat().st_mode & 0o777 == 0o700, path
    for path in (store.path("one"), store.path("two"), *store.home.glob("sessions.sqlite3*")):
        assert path.stat().st_mode & 0o777 == 0o600, path


def test_a_torn_last_line_is_skipped_with_a_warning_and_the_next_record_starts_a_line(tmp_path):
    store = FileStore(tmp_path)
    store.append("t", [{"kind": "intent", "call_id": "c1"}, {"kind": "outcome", "call_id": "c1"}])
    path = store.path("t")
    with open(path, "ab") as f:  # a crash in the middle of the third record
        f.write(b'{"ts": "2025-01-01T00:00:00.000Z", "session_id": "t", "seq": 3, "kind": "inte')
    with pytest.warns(SessionLogWarning, match=f"{path}:3: skipped a record cut off mid-write") as caught:
        records = store.read("t")
    assert not any(issubclass(w.category, CorruptLogWarning) for w in caught)
    assert [r["seq"] for r in records] == [1, 2] and records.torn == [3]

    [record] = FileStore(tmp_path).append("t", [{"kind": "intent", "call_id": "c2"}])  # another process, later
    assert record["seq"] == 3  # the torn record never counted
    lines = path.read_bytes().split(b"\n")
    assert lines[2].endswith(b'"kind": "inte')  # left as it was, closed by a newline
    assert json.loads(lines[3]) == record  # ours starts on a line of its own
    with pytest.warns(SessionLogWarning, match=":3: skipped a record cut off") as caught:
        records = store.read("t")
    assert not any(issubclass(w.category, CorruptLogWarning) for w in caught)  # a crash's mark, not damage
    assert [r["call_id"] for r in records] == ["c1", "c1", "c2"] and records.torn == [3]
    assert store.info("t").records == 3


def test_a_line_no_crash_leaves_is_warned_about_loudly(tmp_path, caplog):
    store = FileStore(tmp_path)
    store.append("g", [{"kind": "a"}])
    with open(store.path("g"), "ab") as f:
        f.write(b'not json\n[1, 2]\n\n{"seq": 7}\n')
    store.append("g", [{"kind": "b"}])
    with pytest.warns(CorruptLogWarning) as caught, caplog.at_level(logging.ERROR):
        records = read_log(store.path("g"))
    assert [(r["kind"], r["seq"]) for r in records] == [("a", 1), ("b", 2)] and records.torn == [2, 3, 5]
    assert [str(w.message).split(": ")[0] for w in caught] == [f"{store.path('g')}:{n}" for n in (2, 3, 5)]
    assert "not a drivetrain record" in caplog.text and caplog.records[0].levelname == "ERROR"


def test_an_index_of_the_older_schema_is_rebuilt(tmp_path):
    store = FileStore(tmp_path)
    before = _sessions(store)
    store.close()
    with sqlite3.connect(tmp_path / "sessions.sqlite3") as db:  # schema 1: a rowid table and two indexes
        db.execute("DROP TABLE sessions")
        db.execute(
            "CREATE TABLE sessions (session_id TEXT PRIMARY KEY, cwd TEXT, model TEXT, parent_id TEXT, "
            "created_at TEXT NOT NULL, updated_at TEXT NOT NULL, first_prompt TEXT, num_turns INTEGER NOT NULL, "
            "total_cost_usd REAL, status TEXT NOT NULL, records INTEGER NOT NULL, last_seq INTEGER NOT NULL)"
        )
        db.execute("CREATE INDEX sessions_by_update ON sessions (updated_at)")
        db.execute("PRAGMA user_version = 1")
    with pytest.warns(SessionLogWarning, match="has schema 1, not 2"):
        assert FileStore(tmp_path).list() == before
    with sqlite3.connect(tmp_path / "sessions.sqlite3") as db:
        assert db.execute("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall() == []


def test_a_lost_index_is_rebuilt_from_the_logs(tmp_path):
    before = _sessions(FileStore(tmp_path))
    for path in tmp_path.glob("sessions.sqlite3*"):
        path.unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing index is no surprise: no warning
        assert FileStore(tmp_path).list() == before


def test_a_corrupt_index_is_rebuilt_with_a_warning(tmp_path):
    store = FileStore(tmp_path)
    before = _sessions(store)
    store.close()
    for path in tmp_path.glob("sessions.sqlite3*"):
        path.unlink()
    (tmp_path / "sessions.sqlite3").write_bytes(b"this is not a database, " * 200)
    again = FileStore(tmp_path)
    with pytest.warns(SessionLogWarning, match="sessions.sqlite3 is corrupt"):
        assert again.list() == before
    again.append("one", [{"kind": "turn", "turn": 1, "cost_usd": 0.25}])
    assert again.info("one").total_cost_usd == 0.25 and again.info("one").records == 3


def test_an_index_of_another_schema_is_rebuilt_with_a_warning(tmp_path):
    store = FileStore(tmp_path)
    before = _sessions(store)
    store.close()
    with sqlite3.connect(tmp_path / "sessions.sqlite3") as db:
        db.execute("DELETE FROM sessions")
        db.execute("PRAGMA user_version = 99")
    with pytest.warns(SessionLogWarning, match="has schema 99, not 2"):
        assert FileStore(tmp_path).list() == before


def test_an_index_behind_its_log_catches_up_on_the_next_append(tmp_path):
    store = FileStore(tmp_path)
    store.append("s", [{"kind": "prompt", "text": "hi"}])
    with open(store.path("s"), "ab") as f:  # written, and then the process died before the index saw it
        f.write(
            b'{"ts": "2025-01-01T00:00:00.000Z", "session_id": "s", "seq": 2, "kind": "turn", "v": 1, '
            b'"turn": 1, "cost_usd": 0.5}\n'
        )
    assert store.info("s").records == 1
    store.append("s", [{"kind": "turn", "turn": 2, "cost_usd": 0.25}])
    info = store.info("s")
    assert (info.records, info.num_turns, info.total_cost_usd) == (3, 2, 0.75)
    assert [r["seq"] for r in store.read("s")] == [1, 2, 3]


def test_reindex_forgets_deleted_logs_and_finds_new_ones(tmp_path):
    store = FileStore(tmp_path)
    _sessions(store)
    store.path("two").unlink()
    store.path("three").write_bytes(
        store.path("one").read_bytes().replace(b'"session_id": "one"', b'"session_id": "three"')
    )
    store.reindex()
    assert sorted(s.session_id for s in store.list()) == ["one", "three"]
    assert store.info("three").first_prompt == "first"


def test_a_log_another_writer_deleted_and_began_again_is_indexed_from_the_new_records(tmp_path):
    """A writer remembers the index row it last wrote, and goes on from it only while the log is as it left it."""
    mine, theirs = FileStore(tmp_path), FileStore(tmp_path)
    mine.append("s", [{"kind": "session", "cwd": "/old", "model": "m"}, {"kind": "prompt", "text": "old"}])
    theirs.delete("s")
    theirs.append("s", [{"kind": "session", "cwd": "/new", "model": "m"}, {"kind": "prompt", "text": "new"}])
    mine.append("s", [{"kind": "note"}])  # seq 3 in either log: only the log itself tells them apart
    info = mine.info("s")
    assert (info.cwd, info.first_prompt, info.records) == ("/new", "new", 3)


def test_records_fold_only_counts_move_the_row_on_as_folding_the_whole_log_would(tmp_path):
    """An append of only such records (audit records, the run's steps) updates the row in one statement, without
    reading it; it must come out as the fold of the log, however the appends and writers mix."""
    one, two = FileStore(tmp_path), FileStore(tmp_path)
    one.append("s", [{"kind": "session", "cwd": "/a", "model": "m"}, {"kind": "prompt", "text": "go"}])
    one.append("s", [{"kind": "intent", "call_id": "c1"}])
    two.append("s", [{"kind": "outcome", "call_id": "c1"}, {"kind": "state", "run": {}}])
    one.append("s", [{"kind": "history", "at": 0, "messages": []}, {"kind": "turn", "turn": 1, "cost_usd": 0.5}])
    with open(one.path("s"), "ab") as f:  # a record the index never saw (a crash between log and index)
        f.write(b'{"ts": "2025-01-01T00:00:00.000Z", "session_id": "s", "seq": 8, "kind": "note", "v": 1}\n')
    two.append("s", [{"kind": "intent", "call_id": "c2"}])  # the row is behind: caught up from the log
    one.append("s", [{"kind": "outcome", "call_id": "c2"}])
    for store in (one, two):
        assert store.info("s") == fold(None, store.read("s"))
    assert (one.info("s").records, one.info("s").num_turns, one.info("s").total_cost_usd) == (10, 1, 0.5)


def test_fold_reads_the_kinds_it_names_and_only_counts_the_others():
    start = fold(None, [{"session_id": "s", "ts": "2025-01-01T00:00:00.000Z", "seq": 1, "kind": "note"}])
    later = {"session_id": "s", "ts": "2025-01-02T00:00:00.000Z", "seq": 2}
    samples = {
        "session": {"cwd": "/a"},
        "prompt": {"text": "hi"},
        "turn": {"cost_usd": 1.0},
        "result": {"subtype": "success"},
        "interrupted": {},
    }
    assert samples.keys() == FOLDED_KINDS
    for kind in [*FOLDED_KINDS, "intent", "outcome", "denied", "state", "history", "repair", "checkpoint", "x"]:
        after = fold(start, [{**later, "kind": kind, **samples.get(kind, {"cwd": "/b", "text": "t", "subtype": "s"})}])
        counted = replace(start, updated_at=later["ts"], records=2)
        assert (after == counted) == (kind not in FOLDED_KINDS), kind

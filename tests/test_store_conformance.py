"""The SessionStore contract, run against every store: FileStore (real files, real SQLite) and PostgresStore (a real
PostgreSQL server, started for the test session by tests/pg.py, a schema of its own per test). Each store is made
by open_store() from the environment, as the CLI makes it."""

import threading
import time
import uuid
from datetime import datetime

import pytest

from drivetrain.sessions.audit import AuditLog
from drivetrain.sessions.open import open_store
from drivetrain.sessions.store import HEADER, SessionInfo, SessionNotFound, SessionRecords

pytestmark = pytest.mark.xdist_group("postgres")  # one PostgreSQL server (a session fixture) for the file


@pytest.fixture
def postgres_schema(postgres_dsn):
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute(f"CREATE SCHEMA {name}")
    yield f"{postgres_dsn}&options=-csearch_path%3D{name}"
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute(f"DROP SCHEMA {name} CASCADE")


@pytest.fixture(params=["file", "postgres"])
def make_store(request, tmp_path):
    """Makes store objects on one place: two of them are two writers of the same sessions."""
    if request.param == "file":
        env = {"DRIVETRAIN_HOME": str(tmp_path / "dthome")}
    else:
        env = {"DRIVETRAIN_SESSION_STORE": request.getfixturevalue("postgres_schema")}
    made = []

    def make():
        made.append(open_store(env))
        return made[-1]

    yield make
    for store in made:
        store.close()


@pytest.fixture
def store(make_store):
    return make_store()


def session(cwd="/work/a", model="claude-x", parent_id=None):
    return {
        "kind": "session",
        "cwd": cwd,
        "model": model,
        "provider": "anthropic",
        "parent_id": parent_id,
        "forked_from_seq": None,
    }


def turn(n, cost):
    return {
        "kind": "turn",
        "turn": n,
        "stop_reason": "tool_use",
        "cost_usd": cost,
        "model": "claude-x",
        "duration_ms": 120,
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def tick():
    time.sleep(0.003)  # updated_at has milliseconds: the next record is later


# ---------------------------------------------------------------- the log


def test_records_come_back_in_order_with_their_header(store):
    written = store.append("s1", [session(), {"kind": "prompt", "text": "fix the tests"}], sync=True)
    written += store.append("s1", [turn(1, 0.01)])
    assert [r["seq"] for r in written] == [1, 2, 3]
    records = store.read("s1")
    assert isinstance(records, SessionRecords) and records.torn == []
    assert records == written  # returned as written
    for r in records:
        assert tuple(r)[:5] == HEADER  # the header first, in its order
        assert r["session_id"] == "s1" and r["v"] == 1
        assert r["ts"].endswith("Z") and len(r["ts"]) == len("2025-01-02T03:04:05.678Z")
        datetime.fromisoformat(r["ts"])
    assert [r["kind"] for r in records] == ["session", "prompt", "turn"]
    assert records[0]["cwd"] == "/work/a" and records[0]["parent_id"] is None
    assert records[2]["usage"]["output_tokens"] == 5
    assert [r["ts"] for r in records] == sorted(r["ts"] for r in records)


def test_the_sequence_continues_across_writers(make_store):
    a, b = make_store(), make_store()
    for i in range(6):
        (a if i % 3 else b).append("shared", [{"kind": "note", "i": i}, {"kind": "note", "i": i, "again": True}])
    for reader in (a, b, make_store()):
        records = reader.read("shared")
        assert [r["seq"] for r in records] == list(range(1, 13))
        assert [r["i"] for r in records] == [i for i in range(6) for _ in (0, 1)]
    assert a.info("shared").records == b.info("shared").records == 12


@pytest.mark.parametrize("shared", [True, False], ids=["one store", "a store each"])
def test_concurrent_appends_never_share_a_seq(make_store, shared):
    stores = [make_store()] * 2 if shared else [make_store(), make_store()]
    errors = []

    def write(store, writer):
        try:
            for i in range(25):
                store.append("busy", [{"kind": "note", "writer": writer, "i": i, "part": p} for p in range(i % 3 + 1)])
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=write, args=(s, w)) for w, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    records = stores[0].read("busy")
    total = 2 * sum(i % 3 + 1 for i in range(25))
    assert [r["seq"] for r in records] == list(range(1, total + 1))
    for writer in (0, 1):  # each writer's batches stay whole and in its order
        mine = [(r["i"], r["part"]) for r in records if r["writer"] == writer]
        assert mine == [(i, p) for i in range(25) for p in range(i % 3 + 1)]
    assert stores[1].info("busy").records == total


def test_any_text_and_big_records_round_trip(store):
    text = 'naïve café 🚀 ‮RTL‬ e\u0301 \u2028 line\nbreak\ttab "quoted" back\\slash {"seq": 99} 中文'
    big = "x" * 2_000_000
    nested = {"list": [1, 2.5, None, True, {"deep": ["a", {"b": text}]}], "empty": {}, "n": 10**15}
    store.append("u", [{"kind": "prompt", "text": text}, {"kind": "note", "big": big, "nested": nested}])
    store.append("u", [{"kind": "note", "after": "the big one"}])  # the seq is found after a big record
    first, second, third = store.read("u")
    assert first["text"] == text
    assert second["big"] == big and second["nested"] == nested
    assert third["seq"] == 3 and third["after"] == "the big one"
    assert store.info("u").first_prompt == text


def test_a_record_made_earlier_keeps_its_time(store):
    store.append("late", [session(), {"kind": "prompt", "text": "x", "ts": "2025-01-02T03:04:05.678Z"}])
    [written] = store.append("late", [{"kind": "note", "ts": "2025-01-02T03:04:06.000Z"}])
    records = store.read("late")
    assert [r["ts"] for r in records][1:] == ["2025-01-02T03:04:05.678Z", "2025-01-02T03:04:06.000Z"]
    assert written == records[2] and tuple(written)[:5] == HEADER and "ts" not in list(written)[5:]
    assert store.info("late").updated_at == "2025-01-02T03:04:06.000Z"
    for bad in ("yesterday", "2025-01-02 03:04:05", "2025-01-02T03:04:05Z", 1735787045.678):
        with pytest.raises(ValueError, match="ts"):
            store.append("late", [{"kind": "note", "ts": bad}])


def test_records_and_ids_that_are_refused(store):
    for bad in ("", "../escape", "a/b", ".hidden", "x..y"):
        with pytest.raises(ValueError):
            store.append(bad, [{"kind": "note"}])
        with pytest.raises(ValueError):
            store.read(bad)
    with pytest.raises(ValueError, match="kind"):
        store.append("s", [{"text": "no kind"}])
    with pytest.raises(ValueError, match="seq"):
        store.append("s", [{"kind": "note", "seq": 99}])
    with pytest.raises(ValueError, match="session_id"):
        store.append("s", [{"kind": "result", "session_id": "another"}])
    [result] = store.append("s", [{"kind": "result", "subtype": "success", "session_id": "s"}])  # its own: fine
    assert result["session_id"] == "s" and store.read("s") == [result]
    assert store.append("s", []) == []


def test_unknown_session(store):
    with pytest.raises(SessionNotFound) as caught:
        store.read("nobody-here")
    assert isinstance(caught.value, KeyError)
    assert str(caught.value).startswith("no session 'nobody-here' in ")  # a message, not a quoted key
    assert store.info("nobody-here") is None
    with pytest.raises(SessionNotFound):
        store.delete("nobody-here")


def test_an_audit_log_writes_through_the_store(store):
    audit = AuditLog(store, "audited")
    audit.intent(
        "toolu_1", "Bash", {"command": "curl -H 'Authorization: Bearer abc123def456ghi789jkl' x"}, "allow", "person"
    )
    audit.outcome("toolu_1", "Bash", 0.0, 0.5, is_error=False, exit_code=0)
    records = store.read("audited")
    assert [(r["kind"], r["seq"]) for r in records] == [("intent", 1), ("outcome", 2)]
    assert "abc123def456" not in records[0]["input"]["command"]


# ---------------------------------------------------------------- the index


def test_the_index_follows_the_records(store):
    store.append("s", [session(cwd="/proj", model="m1", parent_id="p0"), {"kind": "prompt", "text": "p" * 250}])
    info = store.info("s")
    assert info == SessionInfo(
        session_id="s",
        cwd="/proj",
        model="m1",
        parent_id="p0",
        created_at=info.created_at,
        updated_at=info.updated_at,
        first_prompt="p" * 200,
        num_turns=0,
        total_cost_usd=None,
        status="running",
        records=2,
    )
    tick()
    store.append("s", [turn(1, 0.25), {"kind": "history", "at": 0, "messages": []}, turn(2, None)])
    tick()
    store.append("s", [{"kind": "prompt", "text": "second prompt"}, turn(3, 0.5)])
    info = store.info("s")
    assert (info.num_turns, info.total_cost_usd, info.first_prompt[:1], info.status) == (3, 0.75, "p", "running")
    tick()
    done = store.append("s", [{"kind": "result", "subtype": "error_max_turns", "is_error": True, "num_turns": 3}])
    info = store.info("s")
    records = store.read("s")
    assert info.status == "error_max_turns" and info.records == len(records) == 8
    assert info.created_at == records[0]["ts"] and info.updated_at == done[0]["ts"] > info.created_at
    store.append("s", [{"kind": "interrupted", "signal": "SIGINT", "during": "CallModel"}])
    assert store.info("s").status == "interrupted"
    store.append("s", [{"kind": "prompt", "text": "go on"}])
    assert store.info("s").status == "running"  # resumed
    assert store.info("s").to_json()["status"] == "running"


def test_total_cost_is_none_until_a_cost_is_known(store):
    store.append("free", [session(), turn(1, None), turn(2, None)])
    assert store.info("free").total_cost_usd is None and store.info("free").num_turns == 2
    store.append("free", [turn(3, 0.0)])
    assert store.info("free").total_cost_usd == 0.0


def _three_sessions(store):
    store.append("alpha-1", [session(cwd="/a"), {"kind": "prompt", "text": "Fix the FLAKY test"}])
    tick()
    store.append("beta-2", [session(cwd="/b"), {"kind": "prompt", "text": "write docs, 100% coverage"}])
    tick()
    store.append("gamma-3", [session(cwd="/a"), {"kind": "prompt", "text": "refactor"}])
    tick()


def test_list_newest_first_by_cwd_and_query(store):
    _three_sessions(store)
    assert [s.session_id for s in store.list()] == ["gamma-3", "beta-2", "alpha-1"]
    store.append("alpha-1", [turn(1, 0.1)])  # updated: now the newest
    assert [s.session_id for s in store.list()] == ["alpha-1", "gamma-3", "beta-2"]
    assert [s.session_id for s in store.list(cwd="/a")] == ["alpha-1", "gamma-3"]
    assert store.list(cwd="/nowhere") == []
    assert [s.session_id for s in store.list(query="flaky")] == ["alpha-1"]  # any case
    assert [s.session_id for s in store.list(query="BETA")] == ["beta-2"]  # the id too
    assert [s.session_id for s in store.list(query="100%")] == ["beta-2"]  # no wildcards
    assert [s.session_id for s in store.list(query="_")] == []
    assert [s.session_id for s in store.list(cwd="/a", query="re")] == ["gamma-3"]
    assert [s.session_id for s in store.list(limit=2)] == ["alpha-1", "gamma-3"]
    assert all(isinstance(s, SessionInfo) for s in store.list())


def test_latest_in_a_folder(store):
    assert store.latest("/a") is None
    _three_sessions(store)
    assert store.latest("/a").session_id == "gamma-3"
    assert store.latest("/b").session_id == "beta-2"
    store.append("alpha-1", [{"kind": "prompt", "text": "again"}])
    assert store.latest("/a").session_id == "alpha-1"
    assert store.latest("/c") is None


def test_delete(store):
    _three_sessions(store)
    store.delete("beta-2")
    with pytest.raises(SessionNotFound):
        store.read("beta-2")
    assert store.info("beta-2") is None
    assert [s.session_id for s in store.list()] == ["gamma-3", "alpha-1"]
    with pytest.raises(SessionNotFound):
        store.delete("beta-2")
    assert store.append("beta-2", [{"kind": "note"}])[0]["seq"] == 1  # a new log from the start
    assert store.read("alpha-1")[0]["kind"] == "session"  # the others untouched


def test_reindex_gives_the_index_the_appends_built(make_store):
    store = make_store()
    _three_sessions(store)
    store.append("alpha-1", [turn(1, 0.1), turn(2, 0.2), {"kind": "result", "subtype": "success"}])
    store.append("gamma-3", [turn(1, None), {"kind": "interrupted", "signal": "SIGTERM", "during": "RunTools"}])
    before = store.list()
    assert [(s.session_id, s.status) for s in before] == [
        ("gamma-3", "interrupted"),
        ("alpha-1", "success"),
        ("beta-2", "running"),
    ]
    store.reindex()
    assert store.list() == before
    make_store().reindex()  # another writer's reindex: the same
    assert store.list() == before and store.info("alpha-1") == before[1]
    store.append("beta-2", [turn(1, 1.5)])
    assert store.info("beta-2").total_cost_usd == 1.5 and store.info("beta-2").records == 3


# ---------------------------------------------------------------- PostgreSQL only


def test_postgres_stores_what_jsonb_cannot_hold_as_replacements(postgres_schema):
    store = open_store({"DRIVETRAIN_SESSION_STORE": postgres_schema})
    try:
        [written] = store.append(
            "odd", [{"kind": "note", "text": "nul\x00 lone\ud800 fine🚀", "x": float("nan"), "key\x00": 1}]
        )
        assert written["text"] == "nul\ufffd lone\ufffd fine🚀" and written["x"] is None and written["key\ufffd"] == 1
        assert store.read("odd") == [written]
    finally:
        store.close()


def test_postgres_reindex_repairs_a_damaged_index(postgres_schema):
    import psycopg

    store = open_store({"DRIVETRAIN_SESSION_STORE": postgres_schema})
    try:
        _three_sessions(store)
        store.append("alpha-1", [turn(1, 0.5)])
        before = store.list()
        with psycopg.connect(postgres_schema, autocommit=True) as db:
            db.execute("UPDATE drivetrain_sessions SET num_turns = 99, status = 'wrong' WHERE session_id = 'alpha-1'")
            db.execute("DELETE FROM drivetrain_sessions WHERE session_id = 'beta-2'")
        assert store.list() != before
        store.reindex()
        assert store.list() == before
    finally:
        store.close()

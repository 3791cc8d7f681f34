"""``PostgresStore``: session logs and their index in PostgreSQL, through psycopg 3.

Two tables, made on first use: ``drivetrain_records`` (a row per record: session_id, seq, ts, kind,
v, and body, the kind's fields as jsonb) and ``drivetrain_sessions`` (the index: a row per session,
with the last seq). An append is one transaction that first locks the session's row (``SELECT …
FOR UPDATE``), so concurrent writers take turns and never share a seq, and the records and the index
change together. ``sync=True`` returns once the commit is on disk; without it the commit does not
wait for that (``synchronous_commit = off``): a crash of the server may lose the last moments, never
half a record.

jsonb holds neither the NUL character nor a lone UTF-16 surrogate, nor NaN or infinities: in a
record's fields those characters become U+FFFD and those numbers null.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from itertools import groupby

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.sessions.store import (
    INDEX_FIELDS,
    VERSION,
    Record,
    SessionInfo,
    SessionNotFound,
    SessionRecords,
    check_session_id,
    fields_of,
    fold,
    iso,
)

_COLUMNS = ", ".join(INDEX_FIELDS)
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS drivetrain_sessions (session_id text PRIMARY KEY, cwd text, model text, "
    "parent_id text, created_at timestamptz, updated_at timestamptz, first_prompt text, "
    "num_turns integer NOT NULL DEFAULT 0, total_cost_usd double precision, status text NOT NULL DEFAULT 'running', "
    "records integer NOT NULL DEFAULT 0, last_seq bigint NOT NULL DEFAULT 0)",
    "CREATE INDEX IF NOT EXISTS drivetrain_sessions_by_update ON drivetrain_sessions (updated_at)",
    "CREATE INDEX IF NOT EXISTS drivetrain_sessions_by_cwd ON drivetrain_sessions (cwd, updated_at)",
    "CREATE TABLE IF NOT EXISTS drivetrain_records (session_id text NOT NULL, seq bigint NOT NULL, "
    "ts timestamptz NOT NULL, kind text NOT NULL, v smallint NOT NULL, body jsonb NOT NULL, "
    "PRIMARY KEY (session_id, seq))",
)
_SCHEMA_LOCK = 0x6472697665  # the advisory lock that makes the schema once, whoever comes first
_RECORDS = "SELECT session_id, seq, ts, kind, v, body FROM drivetrain_records"


class PostgresStore:
    """Session logs and their index in the PostgreSQL database at ``dsn`` (a ``postgresql://`` URL or a
    conninfo string). Connects when first used; one connection per store, shared by its threads."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()  # one transaction at a time on the shared connection

    def append(
        self, session_id: str, records: Sequence[Mapping[str, JsonValue]], *, sync: bool = False
    ) -> list[Record]:
        check_session_id(session_id)
        given = [fields_of(session_id, r) for r in records]
        if not given:
            return []
        with self._lock:
            db = self._db()
            with db.transaction():
                if not sync:
                    db.execute("SET LOCAL synchronous_commit = off")
                info, seq = _lock_session(db, session_id)
                written: list[Record] = []
                rows: list[tuple[str, int, datetime, str, int, Jsonb]] = []
                for kind, fields in given:
                    seq += 1
                    given_ts = fields.pop("ts", None)
                    now = datetime.fromisoformat(given_ts) if given_ts else datetime.now(UTC)
                    now = now.replace(microsecond=now.microsecond // 1000 * 1000)  # ts has milliseconds
                    kind, body = _storable(kind), _storable(json.loads(json.dumps(fields, default=str)))
                    written.append(
                        {"ts": iso(now), "session_id": session_id, "seq": seq, "kind": kind, "v": VERSION, **body}
                    )
                    rows.append((session_id, seq, now, kind, VERSION, Jsonb(body)))
                with db.cursor() as cursor:
                    cursor.executemany(
                        "INSERT INTO drivetrain_records (session_id, seq, ts, kind, v, body) "
                        "VALUES (%s, %s, %s, %s, %s, %s)",
                        rows,
                    )
                _put(db, fold(info, written), seq)
        return written

    def read(self, session_id: str) -> SessionRecords:
        check_session_id(session_id)
        with self._lock:
            rows = self._db().execute(f"{_RECORDS} WHERE session_id = %s ORDER BY seq", (session_id,)).fetchall()
        if not rows:
            raise SessionNotFound(
                f"no session {session_id!r} in the PostgreSQL session store {self._where()} "
                f"(is DRIVETRAIN_SESSION_STORE the store that has it?)"
            )
        return SessionRecords(_record(row) for row in rows)

    def info(self, session_id: str) -> SessionInfo | None:
        check_session_id(session_id)
        with self._lock:
            row = (
                self._db()
                .execute(
                    f"SELECT {_COLUMNS} FROM drivetrain_sessions WHERE session_id = %s AND records > 0", (session_id,)
                )
                .fetchone()
            )
        return _info(row) if row else None

    def list(self, *, cwd: str | None = None, query: str | None = None, limit: int | None = None) -> list[SessionInfo]:
        where: list[str] = ["records > 0"]
        args: list[str | int] = []
        if cwd is not None:
            where.append("cwd = %s")
            args.append(cwd)
        if query:
            where.append("(strpos(lower(coalesce(first_prompt, '')), %s) > 0 OR strpos(lower(session_id), %s) > 0)")
            args += [_storable(query.lower())] * 2
        sql = (
            f"SELECT {_COLUMNS} FROM drivetrain_sessions WHERE {' AND '.join(where)} "
            f"ORDER BY updated_at DESC, session_id DESC"
        )
        if limit is not None:
            sql += " LIMIT %s"
            args.append(limit)
        with self._lock:
            return [_info(row) for row in self._db().execute(sql, args).fetchall()]

    def latest(self, cwd: str) -> SessionInfo | None:
        found = self.list(cwd=cwd, limit=1)
        return found[0] if found else None

    def delete(self, session_id: str) -> None:
        check_session_id(session_id)
        with self._lock:
            db = self._db()
            with db.transaction():
                indexed = db.execute("DELETE FROM drivetrain_sessions WHERE session_id = %s", (session_id,)).rowcount
                logged = db.execute("DELETE FROM drivetrain_records WHERE session_id = %s", (session_id,)).rowcount
        if not indexed and not logged:
            raise SessionNotFound(
                f"no session {session_id!r} to delete in the PostgreSQL session store {self._where()}"
            )

    def reindex(self) -> None:
        with self._lock:
            db = self._db()
            with db.transaction():
                db.execute("LOCK TABLE drivetrain_sessions IN SHARE ROW EXCLUSIVE MODE")  # appends wait
                db.execute("DELETE FROM drivetrain_sessions")
                rebuilt: list[tuple[SessionInfo, int]] = []
                with db.cursor(name="drivetrain_reindex") as cursor:  # streamed: one session in memory at a time
                    cursor.execute(f"{_RECORDS} ORDER BY session_id, seq")
                    for _, rows in groupby(cursor, key=lambda row: row[0]):
                        records = [_record(row) for row in rows]
                        if (info := fold(None, records)) is not None:  # always: a group has a record
                            rebuilt.append((info, records[-1]["seq"]))
                for info, last_seq in rebuilt:
                    db.execute("INSERT INTO drivetrain_sessions (session_id) VALUES (%s)", (info.session_id,))
                    _put(db, info, last_seq)

    def close(self) -> None:
        """Close the connection (a new one is made when the store is next used)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _db(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            conn = psycopg.connect(self.dsn, autocommit=True)
            with conn.transaction():
                conn.execute("SET LOCAL client_min_messages = warning")  # no notice for each table that exists
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                for statement in _SCHEMA:
                    conn.execute(statement)
            self._conn = conn
        return self._conn

    def _where(self) -> str:
        """The database, without the password."""
        try:
            parts = conninfo_to_dict(self.dsn)
        except psycopg.ProgrammingError:
            return "(unreadable URL)"
        return f"(database {parts.get('dbname', '?')} on {parts.get('host') or 'localhost'})"


def _lock_session(db: psycopg.Connection, session_id: str) -> tuple[SessionInfo | None, int]:
    """The session's index entry and last seq, its row locked until the transaction ends."""
    while True:  # a row deleted between the insert and the lock is made again
        db.execute("INSERT INTO drivetrain_sessions (session_id) VALUES (%s) ON CONFLICT DO NOTHING", (session_id,))
        row = db.execute(
            f"SELECT {_COLUMNS}, last_seq FROM drivetrain_sessions WHERE session_id = %s FOR UPDATE", (session_id,)
        ).fetchone()
        if row:
            return (_info(row[:-1]) if row[-1] else None), row[-1]


def _put(db: psycopg.Connection, info: SessionInfo | None, last_seq: int) -> None:
    if info is None:
        return
    values = [getattr(info, name) for name in INDEX_FIELDS[1:]]
    values[3:5] = [datetime.fromisoformat(info.created_at), datetime.fromisoformat(info.updated_at)]
    assignments = ", ".join(f"{name} = %s" for name in INDEX_FIELDS[1:])
    db.execute(
        f"UPDATE drivetrain_sessions SET {assignments}, last_seq = %s WHERE session_id = %s",
        (*values, last_seq, info.session_id),
    )


def _info(row: TupleRow) -> SessionInfo:
    values = list(row)
    values[4:6] = [iso(values[4]), iso(values[5])]  # created_at, updated_at
    return SessionInfo(*values)


def _record(row: tuple[str, int, datetime, str, int, JsonObject]) -> Record:
    session_id, seq, ts, kind, v, body = row
    return {"ts": iso(ts), "session_id": session_id, "seq": seq, "kind": kind, "v": v, **body}


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _storable(value: JsonValue) -> JsonValue:
    """``value`` as jsonb can hold it: no NUL or lone surrogate in strings, no NaN or infinity."""
    match value:
        case str():
            return _UNSTORABLE.sub("\ufffd", value)
        case dict():
            return {_storable(k): _storable(v) for k, v in value.items()}
        case list():
            return [_storable(v) for v in value]
        case float() if not math.isfinite(value):
            return None
    return value

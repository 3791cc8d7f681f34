"""``FileStore``: each session's log as JSONL at ``<home>/sessions/<session_id>.jsonl``, the index in
SQLite at ``<home>/sessions.sqlite3`` (home: ``$DRIVETRAIN_HOME``).

A log is written with O_APPEND under an exclusive ``flock``: any number of writers (threads,
processes) share one sequence, each append is one ``write`` of a line per record, and a line is never
rewritten. A crash mid-write leaves a torn last line; the next append starts on a line of its own,
and readers skip the torn one with a warning. The index is updated under the same lock, so it sees
each session's records in the log's order; when it is missing, corrupt or of another schema version,
it is rebuilt from the logs. Folders are 0o700, files 0o600. Nothing is created until it is used.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from drivetrain.home import drivetrain_home
from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.sessions.store import (
    FOLDED_KINDS,
    HEADER,
    INDEX_FIELDS,
    VERSION,
    CorruptLogWarning,
    Record,
    SessionInfo,
    SessionLogWarning,
    SessionNotFound,
    SessionRecords,
    check_session_id,
    fields_of,
    fold,
    now_ts,
)

INDEX_SCHEMA = 2  # the SQLite index's user_version (2: one b-tree, no secondary indexes)
T = TypeVar("T")
IndexRows = list[tuple[SessionInfo, int]]  # each session's index entry and its last seq
log = logging.getLogger(__name__)


def read_log(path: Path) -> SessionRecords:
    """Every whole record of one JSONL log (shared-locked while read, so no write is seen half done).

    A line cut off by a crash is skipped with a ``SessionLogWarning``; any other line that is not a
    record is skipped with a ``CorruptLogWarning`` and an error logged. Both are listed in ``.torn``."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
    finally:
        os.close(fd)
    return parse_log(data, Path(path))


def parse_log(data: bytes, path: Path) -> SessionRecords:
    records, torn = SessionRecords(), []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict) and all(k in record for k in HEADER):
            records.append(record)
            continue
        torn.append(number)
        if record is None and line.startswith(b'{"ts": "'):  # one of ours, cut off mid-write
            warnings.warn(
                f"{path}:{number}: skipped a record cut off mid-write (drivetrain stopped while "
                f"writing it); the records around it are whole",
                SessionLogWarning,
                stacklevel=3,
            )
        else:
            message = (
                f"{path}:{number}: skipped a line that is not a drivetrain record: the file was changed "
                f"by something else or the disk is damaged; records may be missing"
            )
            log.error("%s", message)
            warnings.warn(message, CorruptLogWarning, stacklevel=3)
    records.torn = torn
    return records


_SEQ = re.compile(rb'\{"ts": "[^"]*", "session_id": "[^"]*", "seq": (\d+)')  # the head of one of our records


def _last_seq(fd: int, size: int) -> int:
    """The seq of the last whole record in the file (0 if none), found by reading back from the end.

    Only newlines are searched for and only a line's head is read (``seq`` comes first), so a
    huge last record costs no more than a small one.
    """
    line_end = _rfind_newline(fd, size)  # a line without its newline is torn: never counted
    while line_end >= 0:
        start = _rfind_newline(fd, line_end) + 1
        match = _SEQ.match(os.pread(fd, min(line_end - start, 4096), start))
        if match:
            return int(match.group(1))
        line_end = start - 1
    return 0


def _rfind_newline(fd: int, end: int) -> int:
    """The offset of the last b"\\n" before ``end``, or -1."""
    while end > 0:
        start = max(0, end - 65536)
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            return start + found
        end = start
    return -1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _open_locked(path: Path) -> int:
    """The log opened for appending, exclusively locked; a file deleted while we waited is not written to."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink:
            return fd
        os.close(fd)


class FileStore:
    """JSONL logs in ``<home>/sessions/``, the index in ``<home>/sessions.sqlite3`` (home: $DRIVETRAIN_HOME)."""

    def __init__(self, home: Path | None = None):
        self.home = Path(home).expanduser() if home is not None else drivetrain_home()
        self.dir = self.home / "sessions"
        self._index = _Index(self.home / "sessions.sqlite3")
        self._filling = threading.Lock()
        self._tail: dict[str, tuple[int, int, int]] = {}  # session -> (inode, size, seq) after our last append

    def path(self, session_id: str) -> Path:
        """Where the session's log is (or would be)."""
        return self.dir / f"{check_session_id(session_id)}.jsonl"

    def append(
        self, session_id: str, records: Sequence[Mapping[str, JsonValue]], *, sync: bool = False
    ) -> list[Record]:
        path = self.path(session_id)
        given = [fields_of(session_id, r) for r in records]
        if not given:
            return []
        self._ready()  # never while a log is locked: filling the index reads the logs
        try:
            fd = _open_locked(path)
        except FileNotFoundError:  # the first log
            self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.dir.mkdir(exist_ok=True, mode=0o700)
            fd = _open_locked(path)
        lost = None
        try:
            written = self._write(fd, session_id, given, sync)
            try:  # under the lock, so the index sees each session's records in the log's order
                self._index_append(path, written)
            except sqlite3.DatabaseError as e:
                if not _corrupt(e):
                    raise
                lost = e
        finally:
            os.close(fd)  # and the lock with it
        if lost:
            self._rebuild_index(lost)
        return written

    def _write(self, fd: int, session_id: str, given: list[tuple[str, JsonObject]], sync: bool) -> list[Record]:
        stat = os.fstat(fd)
        size = stat.st_size
        seen = self._tail.get(session_id)
        ours = seen is not None and seen[:2] == (stat.st_ino, size)  # the file ends where our last append did
        seq = seen[2] if seen is not None and ours else _last_seq(fd, size)
        # a torn line (a crash mid-write) is closed, so our first record starts on a line of its own; our own
        # appends end in a newline, so the byte is read only when another writer was last
        prefix = b"\n" if size and not ours and os.pread(fd, 1, size - 1) != b"\n" else b""
        written: list[Record] = []
        lines = [prefix]
        for kind, fields in given:
            seq += 1
            record = {
                "ts": fields.pop("ts", None) or now_ts(),
                "session_id": session_id,
                "seq": seq,
                "kind": kind,
                "v": VERSION,
                **fields,
            }
            text = json.dumps(record, ensure_ascii=False, default=str)
            lines.append(text.encode("utf-8", "backslashreplace") + b"\n")  # a lone surrogate stays JSON
            written.append(json.loads(text))
        data = b"".join(lines)
        _write_all(fd, data)  # one write, unbuffered: the records reach the OS as they are appended
        size += len(data)
        if sync:
            os.fsync(fd)
            if stat.st_size == 0:  # a new file: its name must be durable too
                _fsync_dir(self.dir)
        self._tail[session_id] = (stat.st_ino, size, seq)
        return written

    def _index_append(self, path: Path, written: list[Record]) -> None:
        session_id, first = written[0]["session_id"], written[0]["seq"]
        if all(r["kind"] not in FOLDED_KINDS for r in written) and self._index.count(
            session_id, first - 1, len(written), written[-1]
        ):
            return  # records fold only counts (audit records, the run's steps): one statement, nothing read
        found = self._index.get(session_id)
        info, last_seq = found if found else (None, 0)
        if last_seq != first - 1:  # the index missed records (a crash between log and index)
            info = None
            written = parse_log(path.read_bytes(), path)  # we hold the lock: read it as it is
        info = fold(info, written)
        if info is not None:  # always: written is never empty
            self._index.put(info, written[-1]["seq"])

    def read(self, session_id: str) -> SessionRecords:
        path = self.path(session_id)
        try:
            return read_log(path)
        except FileNotFoundError:
            raise SessionNotFound(
                f"no session {session_id!r} in {self.dir} (is $DRIVETRAIN_HOME the home that has it?)"
            ) from None

    def info(self, session_id: str) -> SessionInfo | None:
        check_session_id(session_id)
        found = self._indexed(lambda index: index.get(session_id))
        return found[0] if found else None

    def list(self, *, cwd: str | None = None, query: str | None = None, limit: int | None = None) -> list[SessionInfo]:
        return self._indexed(lambda index: index.select(cwd, query, limit))

    def latest(self, cwd: str) -> SessionInfo | None:
        found = self.list(cwd=cwd, limit=1)
        return found[0] if found else None

    def delete(self, session_id: str) -> None:
        path = self.path(session_id)
        self._ready()
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            if not self._indexed(lambda index: index.remove(session_id)):
                raise SessionNotFound(f"no session {session_id!r} to delete in {self.dir}") from None
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # no writer is half way through it
            path.unlink(missing_ok=True)
            self._tail.pop(session_id, None)
            self._index.remove(session_id)
        finally:
            os.close(fd)

    def reindex(self) -> None:
        self._ready()
        self._indexed(lambda index: index.replace(self._scan()))

    def close(self) -> None:
        """Close the index (it opens again when next used)."""
        self._index.close()

    # -- the index: opened, filled and, when corrupt, rebuilt

    def _ready(self) -> None:
        with self._filling:
            if self._index.open():  # new, or replaced: fill it from the logs
                self._index.replace(self._scan())

    def _indexed(self, op: Callable[[_Index], T]) -> T:
        self._ready()
        try:
            return op(self._index)
        except sqlite3.DatabaseError as e:
            if not _corrupt(e):
                raise
            self._rebuild_index(e)
            return op(self._index)

    def _rebuild_index(self, error: Exception) -> None:
        warnings.warn(
            f"the session index {self._index.path} is corrupt ({error}); rebuilding it from the logs",
            SessionLogWarning,
            stacklevel=3,
        )
        self._index.discard()
        self._ready()

    def _scan(self) -> IndexRows:
        rows: IndexRows = []
        for path in sorted(self.dir.glob("*.jsonl")) if self.dir.is_dir() else ():
            try:
                records = read_log(self.path(path.stem))
            except (ValueError, FileNotFoundError):  # not a session's log; deleted meanwhile
                continue
            info = fold(None, records)
            if info is not None:
                rows.append((replace(info, session_id=path.stem), max(r["seq"] for r in records)))
        return rows


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _row(info: SessionInfo, last_seq: int) -> tuple[str | int | float | None, ...]:
    return (*(getattr(info, name) for name in INDEX_FIELDS), last_seq)


def _use_wal(db: sqlite3.Connection) -> None:
    """Write-ahead logging (readers never wait for the writer), set once per file. Switching to it needs the
    file to itself and SQLite does not wait for that, so another connection's first use means a retry."""
    for attempt in range(500):
        try:
            if db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal":
                return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or attempt == 499:
                raise
        time.sleep(0.01)


def _corrupt(error: sqlite3.DatabaseError) -> bool:
    """A damaged file or not a database at all (not: locked, busy, full disk)."""
    # Set on the errors SQLite reports; absent on those the sqlite3 module raises itself (a closed database).
    code: int = getattr(error, "sqlite_errorcode", 0)
    return (code & 0xFF) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


_COLUMNS = ", ".join(INDEX_FIELDS)
_ROW = ", ".join("?" * (len(INDEX_FIELDS) + 1))  # the index fields and last_seq
# Every append rewrites its session's row, and a person lists sessions now and then: so one b-tree
# (WITHOUT ROWID, keyed by session_id), and no index on updated_at or cwd. Each append then writes one
# page to the WAL instead of four (the rowid table, its key, two indexes): ~1/3 of an append's time,
# checkpoints (and their fsyncs) four times rarer. Without them, listing 10,000 sessions takes the same
# time and the latest in a folder ~2 ms instead of ~0.3.
_SCHEMA = (
    "CREATE TABLE sessions (session_id TEXT PRIMARY KEY, cwd TEXT, model TEXT, parent_id TEXT, "
    "created_at TEXT NOT NULL, updated_at TEXT NOT NULL, first_prompt TEXT, num_turns INTEGER NOT NULL, "
    "total_cost_usd REAL, status TEXT NOT NULL, records INTEGER NOT NULL, last_seq INTEGER NOT NULL) WITHOUT ROWID",
)


class _Index:
    """A FileStore's SQLite index: one row per session. It never reads a log itself."""

    def __init__(self, path: Path):
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # one transaction at a time on the shared connection

    def open(self) -> bool:
        """Connect, creating the index if need be; True when it is new and must be filled from the logs."""
        with self._lock:
            if self._db is not None:
                return False
            try:
                return self._connect()
            except sqlite3.DatabaseError as e:
                if not _corrupt(e):
                    raise
                warnings.warn(
                    f"the session index {self.path} is corrupt ({e}); rebuilding it from the logs",
                    SessionLogWarning,
                    stacklevel=4,
                )
                self._remove_files()
                return self._connect()

    def _connect(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))  # SQLite's -wal follows
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        try:
            _use_wal(db)
            db.execute("PRAGMA synchronous=NORMAL")  # no fsync per commit: the logs are the durable part
            db.create_function("lower_text", 1, lambda s: s.lower() if isinstance(s, str) else s, deterministic=True)
            db.execute("BEGIN IMMEDIATE")
            version: int = db.execute("PRAGMA user_version").fetchone()[0]
            fresh = version != INDEX_SCHEMA
            if fresh:
                if version:
                    warnings.warn(
                        f"the session index {self.path} has schema {version}, not {INDEX_SCHEMA}; "
                        f"rebuilding it from the logs",
                        SessionLogWarning,
                        stacklevel=5,
                    )
                db.execute("DROP TABLE IF EXISTS sessions")
                for statement in (*_SCHEMA, f"PRAGMA user_version = {INDEX_SCHEMA}"):
                    db.execute(statement)
            db.execute("COMMIT")
        except BaseException:
            db.close()
            raise
        self._db = db
        return fresh

    def get(self, session_id: str) -> tuple[SessionInfo, int] | None:
        with self._lock:
            row = (
                self._conn()
                .execute(f"SELECT {_COLUMNS}, last_seq FROM sessions WHERE session_id = ?", (session_id,))
                .fetchone()
            )
        return (SessionInfo(*row[:-1]), row[-1]) if row else None

    def count(self, session_id: str, after_seq: int, n: int, last: Record) -> bool:
        """The session's row, if it is at ``after_seq``, moved on by ``n`` records that ``fold`` only counts, the last
        one ``last``. False when it is not there or not at ``after_seq`` (nothing changed)."""
        with self._lock:
            return (
                self._conn()
                .execute(
                    "UPDATE sessions SET updated_at = ?, records = records + ?, last_seq = ? "
                    "WHERE session_id = ? AND last_seq = ?",
                    (last["ts"], n, last["seq"], session_id, after_seq),
                )
                .rowcount
                == 1
            )

    def put(self, info: SessionInfo, last_seq: int) -> None:
        with self._lock:
            self._conn().execute(f"INSERT OR REPLACE INTO sessions VALUES ({_ROW})", _row(info, last_seq))

    def remove(self, session_id: str) -> bool:
        with self._lock:
            return self._conn().execute("DELETE FROM sessions WHERE session_id = ?", (session_id,)).rowcount > 0

    def replace(self, rows: IndexRows) -> None:
        with self._lock:
            db = self._conn()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM sessions")
                db.executemany(
                    f"INSERT INTO sessions VALUES ({_ROW})", [_row(info, last_seq) for info, last_seq in rows]
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def select(self, cwd: str | None, query: str | None, limit: int | None) -> list[SessionInfo]:
        where: list[str] = ["1"]
        args: list[str | int] = []
        if cwd is not None:
            where.append("cwd = ?")
            args.append(cwd)
        if query:
            where.append("(instr(lower_text(coalesce(first_prompt, '')), ?) OR instr(lower_text(session_id), ?))")
            args += [query.lower()] * 2
        sql = f"SELECT {_COLUMNS} FROM sessions WHERE {' AND '.join(where)} ORDER BY updated_at DESC, session_id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        with self._lock:
            return [SessionInfo(*row) for row in self._conn().execute(sql, args)]

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("the session index is not open")  # FileStore opens it first
        return self._db

    def discard(self) -> None:
        """Close and delete the index files (they are rebuilt from the logs)."""
        with self._lock:
            self._close()
            self._remove_files()

    def _remove_files(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

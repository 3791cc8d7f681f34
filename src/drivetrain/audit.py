"""The audit log: one append-only JSONL file per session of what was asked, decided and done.

Each record is one line, written with a single ``write`` on a file opened with
O_APPEND and flushed straight to the OS (``fsync=True`` also forces it to disk). A
line is never rewritten. Every record starts with ``ts`` (ISO 8601, UTC), ``session_id``,
``seq`` (1, 2, 3, … across every writer of the file: an exclusive ``flock`` is held while
appending), ``kind`` and ``v`` (the format version); its other fields go through
``redact`` first, so no secret the redactor recognises reaches the disk.

The kinds the loop writes: ``intent`` (a call about to run, with the decision that let
it), ``outcome`` (how it went) and ``denied`` (a call that never ran). Nothing is
created until the first record is written.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from drivetrain.events import HookReported, PermissionDecided, ToolFinished, ToolStarted
from drivetrain.home import drivetrain_home
from drivetrain.redact import redact

AUDIT_VERSION = 1  # each record's "v"
_HEADER = {"ts", "session_id", "seq", "kind", "v"}  # seq must precede the fields: see _last_seq


def _iso(t: float | datetime) -> str:
    if not isinstance(t, datetime):
        t = datetime.fromtimestamp(t, timezone.utc)
    return t.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AuditLog:
    """Append-only JSONL records for one session. Safe to share a file between writers."""

    def __init__(self, path: Path, *, session_id: str = "", fsync: bool = False,
                 extra_secrets: Iterable[str] = ()):
        self.path = Path(path)
        self.session_id = session_id or self.path.stem
        self.fsync = fsync
        self.extra_secrets = tuple(extra_secrets)
        self._fd: int | None = None
        self._seq = 0
        self._size = -1  # the file's size after our last write: a change means another writer
        self._decided: dict[str, tuple[str, str]] = {}  # call id -> (decided_by, reason), until it starts
        self._started: dict[str, float] = {}

    @classmethod
    def for_session(cls, session_id: str, home: Path | None = None, **kw: Any) -> AuditLog:
        """The log at ``<home or $DRIVETRAIN_HOME>/audit/<session_id>.jsonl``."""
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", session_id) or ".." in session_id:
            raise ValueError(f"not a usable session id for a file name: {session_id!r}")
        base = Path(home).expanduser() if home is not None else drivetrain_home()
        return cls(base / "audit" / f"{session_id}.jsonl", session_id=session_id, **kw)

    # -- the records the loop writes

    def intent(self, call_id: str, tool: str, input: Any, decision: str, decided_by: str,
               reason: str = "") -> dict:
        """Before a call runs: what will run, and who or what allowed it."""
        return self.write("intent", call_id=call_id, tool=tool, input=input, decision=decision,
                          decided_by=decided_by, reason=reason)

    def outcome(self, call_id: str, tool: str, started_at: float | datetime, ended_at: float | datetime,
                is_error: bool, exit_code: int | None = None, error: str | None = None,
                result_bytes: int | None = None) -> dict:
        """After a call ran. Times are wall-clock (``time.time()``) or datetimes."""
        duration = _seconds(ended_at) - _seconds(started_at)
        return self.write("outcome", call_id=call_id, tool=tool, started_at=_iso(started_at),
                          ended_at=_iso(ended_at), duration_ms=round(duration * 1000, 1),
                          is_error=is_error, exit_code=exit_code, error=error, result_bytes=result_bytes)

    def denied(self, call_id: str, tool: str, input: Any, decided_by: str, reason: str = "") -> dict:
        """A call that was never run."""
        return self.write("denied", call_id=call_id, tool=tool, input=input, decided_by=decided_by,
                          reason=reason)

    def observe(self, event: Any) -> None:
        """An ``Agent`` observer: a record for every decision, before every call runs, and after it."""
        match event:
            case PermissionDecided(call=c, behavior="deny", by=by, reason=reason):
                self.denied(c.id, c.name, c.input, by, reason)
            case PermissionDecided(call=c, behavior="defer"):
                self.write("deferred", call_id=c.id, tool=c.name, input=c.input)
            case PermissionDecided(call=c, by=by, reason=reason):
                self._decided[c.id] = (by, reason)
            case ToolStarted(call=c, input=inp, by=by):
                by, reason = self._decided.pop(c.id, (by, ""))
                self.intent(c.id, c.name, inp, "allow", by, reason)
                self._started[c.id] = time.time()
            case ToolFinished(call=c, result=res, duration_ms=ms, meta=meta) if meta is not None:
                ended = time.time()
                text = res.text
                self.outcome(c.id, c.name, self._started.pop(c.id, ended - ms / 1000), ended, res.is_error,
                             meta.get("exit_code"), text[:500] if res.is_error else None, len(text.encode()))
            case ToolFinished(call=c, result=res) if c.id in self._decided:  # allowed, yet never started
                self._decided.pop(c.id)
                self.write("not_run", call_id=c.id, tool=c.name, reason=res.text[:500])
            case HookReported(event=name, errors=errors):
                self.write("hook_error", hook_event=name, errors=list(errors))

    # -- the mechanism

    def write(self, kind: str, **fields: Any) -> dict:
        """Append one record; returns it as written."""
        if clash := _HEADER & fields.keys():
            raise ValueError(f"reserved audit field names: {sorted(clash)}")
        fields = redact(fields, extra_secrets=self.extra_secrets)
        fd = self._open()
        fcntl.flock(fd, fcntl.LOCK_EX)  # seq and the torn-line check must see the other writers
        try:
            size = os.fstat(fd).st_size
            prefix = b""
            if size != self._size:
                self._seq = max(self._seq, _last_seq(fd, size))
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    prefix = b"\n"  # a torn line (a crash mid-write): ours starts on a line of its own
            self._seq += 1
            record = {"ts": _iso(datetime.now(timezone.utc)), "session_id": self.session_id,
                      "seq": self._seq, "kind": kind, "v": AUDIT_VERSION, **fields}
            line = json.dumps(record, ensure_ascii=False, default=str)
            data = prefix + line.encode("utf-8", "backslashreplace") + b"\n"  # a lone surrogate stays JSON
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if self.fsync:
                os.fsync(fd)
            self._size = size + len(data)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return record

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _seconds(t: float | datetime) -> float:
    return t.timestamp() if isinstance(t, datetime) else float(t)


_SEQ = re.compile(rb'"seq": (\d+)')


def _last_seq(fd: int, size: int) -> int:
    """The seq of the last whole record in the file (0 if none), found by reading back from the end.

    Only newlines are searched for and only a line's head is read (``seq`` comes first), so a
    huge last record costs no more than a small one.
    """
    line_end = _rfind_newline(fd, size)  # a line without its newline is torn: never counted
    while line_end >= 0:
        start = _rfind_newline(fd, line_end) + 1
        match = _SEQ.search(os.pread(fd, min(line_end - start, 4096), start))
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


class AuditTrail(list):
    """The records of an audit file, in order. ``torn`` lists the numbers (1-based) of lines
    that were not whole JSON records: a crash mid-write leaves one at the end."""

    torn: list[int]


def read_audit(path: Path) -> AuditTrail:
    """Every whole record in ``path``; lines cut off by a crash are skipped and listed in ``.torn``."""
    trail = AuditTrail()
    trail.torn = []
    for number, line in enumerate(Path(path).read_bytes().split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            trail.torn.append(number)
            continue
        if isinstance(record, dict):
            trail.append(record)
        else:
            trail.torn.append(number)
    return trail

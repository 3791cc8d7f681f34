"""The audit log: what was asked, decided and done, as records in the session's log.

``AuditLog`` writes through a ``SessionStore`` (``drivetrain.sessions.store``): the same append-only log per
session that is the trace and the resume format, so there is one log, not two. Every record's fields
go through ``redact`` first, so no secret the redactor recognises reaches the store; the store adds
the header (``ts``, ``session_id``, ``seq``, ``kind``, ``v``).

The kinds written here: ``intent`` (a call about to run, with the decision that let it), ``outcome``
(how it went), ``denied`` (a call that never ran), ``deferred``, ``not_run`` and ``hook_error``.
Nothing is created until the first record is written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from types import MethodType

from drivetrain.control.redact import redact
from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.loop.events import Event, HookReported, PermissionDecided, ToolFinished, ToolStarted
from drivetrain.sessions.file import FileStore
from drivetrain.sessions.store import AuditKind, SessionStore, check_session_id, iso


class AuditLog:
    """The audit records of one session, appended to its log in ``store``. Safe to share a log between writers."""

    def __init__(self, store: SessionStore, session_id: str, *, sync: bool = False, extra_secrets: Iterable[str] = ()):
        self.store = store
        self.session_id = check_session_id(session_id)
        self.sync = sync  # fsync every record (the loop syncs at turn boundaries instead)
        self.extra_secrets = tuple(extra_secrets)
        self._owned: FileStore | None = None  # the store for_session made, closed by close()
        self._decided: dict[str, tuple[str, str]] = {}  # call id -> (decided_by, reason), until it starts
        self._started: dict[str, float] = {}

    @classmethod
    def for_session(
        cls, session_id: str, home: Path | None = None, *, sync: bool = False, extra_secrets: Iterable[str] = ()
    ) -> AuditLog:
        """The log at ``<home or $DRIVETRAIN_HOME>/sessions/<session_id>.jsonl``."""
        store = FileStore(home)
        log = cls(store, session_id, sync=sync, extra_secrets=extra_secrets)
        log._owned = store
        return log

    # -- the records the loop writes

    def intent(
        self, call_id: str, tool: str, input: JsonObject, decision: str, decided_by: str, reason: str = ""
    ) -> JsonObject:
        """Before a call runs: what will run, and who or what allowed it."""
        return self.write(
            "intent", call_id=call_id, tool=tool, input=input, decision=decision, decided_by=decided_by, reason=reason
        )

    def outcome(
        self,
        call_id: str,
        tool: str,
        started_at: float | datetime,
        ended_at: float | datetime,
        is_error: bool,
        exit_code: int | None = None,
        error: str | None = None,
        result_bytes: int | None = None,
    ) -> JsonObject:
        """After a call ran. Times are wall-clock (``time.time()``) or datetimes."""
        duration = _seconds(ended_at) - _seconds(started_at)
        return self.write(
            "outcome",
            call_id=call_id,
            tool=tool,
            started_at=iso(started_at),
            ended_at=iso(ended_at),
            duration_ms=round(duration * 1000, 1),
            is_error=is_error,
            exit_code=exit_code,
            error=error,
            result_bytes=result_bytes,
        )

    def denied(self, call_id: str, tool: str, input: JsonObject, decided_by: str, reason: str = "") -> JsonObject:
        """A call that was never run."""
        return self.write("denied", call_id=call_id, tool=tool, input=input, decided_by=decided_by, reason=reason)

    def observe(self, event: Event) -> None:
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
                self.outcome(
                    c.id,
                    c.name,
                    self._started.pop(c.id, ended - ms / 1000),
                    ended,
                    res.is_error,
                    meta.get("exit_code"),
                    text[:500] if res.is_error else None,
                    len(text.encode()),
                )
            case ToolFinished(call=c, result=res) if c.id in self._decided:  # allowed, yet never started
                self._decided.pop(c.id)
                self.write("not_run", call_id=c.id, tool=c.name, reason=res.text[:500])
            case HookReported(event=name, errors=errors):
                self.write("hook_error", hook_event=name, errors=list(errors))

    # -- the mechanism

    def write(self, kind: AuditKind, **fields: JsonValue) -> JsonObject:
        """Append one record; returns it as written."""
        fields = redact(fields, extra_secrets=self.extra_secrets)
        [record] = self.store.append(self.session_id, [{"kind": kind, **fields}], sync=self.sync)
        return record

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _seconds(t: float | datetime) -> float:
    return t.timestamp() if isinstance(t, datetime) else float(t)


def attached(observers: Iterable[Callable[[Event], None]]) -> AuditLog | None:
    """The audit log among an agent's observers (``AuditLog.observe`` is how one is attached), if there is one."""
    for observe in observers:
        if isinstance(observe, MethodType) and isinstance(observe.__self__, AuditLog):
            return observe.__self__
    return None

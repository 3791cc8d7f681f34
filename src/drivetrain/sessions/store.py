"""The session store: one append-only log per session, and an index of the sessions.

The log is at once the audit trail, the trace and the resume format; its record kinds are in
docs/sessions.md. Every record starts with the header ``ts`` (ISO 8601 UTC, ms), ``session_id``,
``seq`` (1, 2, 3, … per session, assigned here), ``kind`` and ``v`` (the format version). The index
(one ``SessionInfo`` per session) is derived from the records on every append and can be rebuilt
from the logs at any time with ``reindex()``.

This module is the contract; the stores are ``FileStore`` (``drivetrain.sessions.file``: JSONL logs and
a SQLite index under ``$DRIVETRAIN_HOME``) and ``PostgresStore`` (``drivetrain.sessions.postgres``).
``open_store()`` picks one from ``$DRIVETRAIN_SESSION_STORE``. Nothing is created until it is used.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Literal, Protocol

from drivetrain.jsontypes import JsonObject, JsonValue

VERSION = 1  # each record's "v"
HEADER = ("ts", "session_id", "seq", "kind", "v")  # in this order, first in every record
STORE_ENV = "DRIVETRAIN_SESSION_STORE"
FIRST_PROMPT_CHARS = 200

Record = JsonObject  # one JSON object of a log

# What a record is (docs/sessions.md): the kinds drivetrain writes. A store keeps any non-empty string it is given.
LoopKind = Literal[
    "session", "checkpoint", "prompt", "history", "turn", "state", "interrupted", "repair", "result", "attempts"
]
InterventionKind = Literal["loop_detected", "limit_approaching", "limit_reached", "compacted"]  # loop.events'
AuditKind = Literal["intent", "outcome", "denied", "deferred", "not_run", "hook_error"]  # sessions.audit's
# a subagent's session and its parent's, each naming the other; an attempt's session and the run it was one of
LinkKind = Literal["subagent", "subagent_of", "attempt_of"]
RecordKind = Literal[LoopKind, InterventionKind, AuditKind, LinkKind]


class SessionNotFound(KeyError):
    """No log for this session id in this store."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class SessionLogWarning(UserWarning):
    """A line of a session log was skipped: cut off by a crash mid-write."""


class CorruptLogWarning(SessionLogWarning):
    """A line of a session log was skipped that no crash of drivetrain leaves: the file was damaged."""


class SessionRecords(list[Record]):
    """A session's records in seq order. ``torn`` lists the numbers (1-based) of the log lines skipped."""

    def __init__(self, records: Iterable[Record] = (), torn: Iterable[int] = ()):
        super().__init__(records)
        self.torn = list(torn)


@dataclass(frozen=True)
class SessionInfo:
    """One session as the index knows it, derived from its records (see ``fold``)."""

    session_id: str
    cwd: str | None
    model: str | None
    parent_id: str | None
    created_at: str  # ts of the first record
    updated_at: str  # ts of the last record
    first_prompt: str | None  # the first 200 characters of the first prompt
    num_turns: int
    total_cost_usd: float | None  # None while no turn had a known cost
    status: str  # "running", a result's subtype, or "interrupted"
    records: int

    def to_json(self) -> JsonObject:
        return asdict(self)


INDEX_FIELDS = tuple(f.name for f in dataclasses.fields(SessionInfo))  # the index's columns, in order


class SessionStore(Protocol):
    """Where session logs live. Every method is safe to call from several threads and processes."""

    def append(
        self, session_id: str, records: Sequence[Mapping[str, JsonValue]], *, sync: bool = False
    ) -> list[Record]:
        """Append ``{"kind": …, **fields}`` records in order; returns them as written, with their header.
        ``sync`` makes them durable before returning (the loop asks for it at turn boundaries)."""
        ...

    def read(self, session_id: str) -> SessionRecords:
        """Every record of a session, in seq order. Raises ``SessionNotFound``."""
        ...

    def info(self, session_id: str) -> SessionInfo | None: ...

    def list(self, *, cwd: str | None = None, query: str | None = None, limit: int | None = None) -> list[SessionInfo]:
        """Newest ``updated_at`` first; ``query`` is a case-insensitive substring of first_prompt or session_id."""
        ...

    def latest(self, cwd: str) -> SessionInfo | None:
        """The session last updated in ``cwd`` (what ``--continue`` resumes)."""
        ...

    def delete(self, session_id: str) -> None:
        """Remove a session's log and index entry. Raises ``SessionNotFound``."""
        ...

    def reindex(self) -> None:
        """Rebuild the index from the logs."""
        ...


def check_session_id(session_id: str) -> str:
    """The id itself, if it can name a file; ValueError otherwise."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", session_id) or ".." in session_id:
        raise ValueError(f"not a usable session id (letters, digits, '.', '_', '-'): {session_id!r}")
    return session_id


# ---------------------------------------------------------------- records and the index, for every store


def now_ts() -> str:
    return iso(datetime.now(UTC))


def iso(t: float | datetime) -> str:
    """ISO 8601 in UTC with milliseconds and a "Z", as every ``ts`` is written."""
    if not isinstance(t, datetime):
        t = datetime.fromtimestamp(t, UTC)
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def fields_of(session_id: str, given: Mapping[str, JsonValue]) -> tuple[str, JsonObject]:
    """The kind and the fields of a record to append; the rest of the header is the store's to write.

    A ``session_id`` field equal to the session's own (a RunResult carries one) is dropped. A ``ts`` (as
    ``now_ts()`` writes it) is the time of a record appended later than it was made (a batch task's, held until
    the task ends); the store keeps it in the record's header."""
    kind = given.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"a record needs a non-empty string 'kind', not {kind!r}")
    fields = {k: v for k, v in given.items() if k != "kind" and not (k == "session_id" and v == session_id)}
    if clash := (set(HEADER) - {"ts"}) & fields.keys():
        raise ValueError(f"reserved record field names: {sorted(clash)}")
    if "ts" in fields and not (isinstance(fields["ts"], str) and _TS.fullmatch(fields["ts"])):
        raise ValueError(
            f"a record's own 'ts' must be UTC with milliseconds, as now_ts() writes it, not {fields['ts']!r}"
        )
    return kind, fields


# The kinds ``fold`` reads beyond their ``ts``; a record of any other kind is only counted, so a store may move
# an index row on by such records without reading it (FileStore does).
FOLDED_KINDS: frozenset[RecordKind] = frozenset({"session", "prompt", "turn", "result", "interrupted"})


def fold(info: SessionInfo | None, records: Iterable[Record]) -> SessionInfo | None:
    """The index entry after ``records``, starting from ``info`` (None: from nothing)."""
    for r in records:
        if info is None:
            info = SessionInfo(r["session_id"], None, None, None, r["ts"], r["ts"], None, 0, None, "running", 0)
        info = replace(info, updated_at=r["ts"], records=info.records + 1)
        if r["kind"] in FOLDED_KINDS:  # any other kind is only counted
            info = _folded(info, r)
    return info


def _folded(info: SessionInfo, r: Record) -> SessionInfo:
    """``info`` changed by a record of one of the ``FOLDED_KINDS`` (a case added here must be named there)."""
    match r["kind"]:
        case "session":
            return replace(info, cwd=r.get("cwd"), model=r.get("model"), parent_id=r.get("parent_id"))
        case "prompt":
            if info.first_prompt is None:
                return replace(info, status="running", first_prompt=str(r.get("text", ""))[:FIRST_PROMPT_CHARS])
            return replace(info, status="running")
        case "turn":
            cost = r.get("cost_usd")
            if isinstance(cost, (int, float)) and not isinstance(cost, bool):
                return replace(info, num_turns=info.num_turns + 1, total_cost_usd=(info.total_cost_usd or 0.0) + cost)
            return replace(info, num_turns=info.num_turns + 1)
        case "result":
            return replace(info, status=str(r.get("subtype") or "ended"))
        case "interrupted":
            return replace(info, status="interrupted")
    return info

"""A run saved to its session's log after every step, and loaded back — repaired — after anything.

The log is the session store's (``store.py``): one append-only record stream per session, shared
with the audit records. After each step the driver appends what changed: the history's new part
(``history``: cut at ``at``, then these messages), a ``turn`` record per model response, and the
run's value without its history (``state``). Records of a turn boundary are fsync'd.

Loading replays the ``history`` records and takes the last ``state``. A crash can stop a run
anywhere, so the value is then repaired until the API would accept its next request: every
tool_use without a result gets an ``is_error`` result saying whether the call had started (the
audit log's ``intent``), finished (``outcome``) or never ran; stray results are dropped; the
repair is itself a record. A model call that never answered is simply made again: no user text
is invented.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from drivetrain.control.redact import redact
from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.loop.events import INTERVENTIONS, Event, ModelResponded
from drivetrain.loop.repair import close_open_calls
from drivetrain.loop.state import CallModel, Done, RunState, RunTools, SubmitPrompt
from drivetrain.messages import Message
from drivetrain.pricing import cost_usd
from drivetrain.sessions.store import RecordKind, SessionStore

log = logging.getLogger("drivetrain.sessions.log")


class SessionLog:
    """Appends a run's steps to one session in a store."""

    def __init__(self, store: SessionStore, session_id: str, model: str = ""):
        self.store, self.session_id, self.model = store, session_id, model
        self._saved: tuple[Message, ...] = ()  # the history as the log holds it
        self._counters: JsonObject | None = None  # the run's other fields, as the log holds them

    def begin(
        self,
        *,
        cwd: str,
        model: str,
        provider: str = "",
        parent_id: str | None = None,
        forked_from_seq: int | None = None,
    ) -> None:
        self.store.append(
            self.session_id,
            [
                {
                    "kind": "session",
                    "cwd": cwd,
                    "model": model,
                    "provider": provider,
                    "parent_id": parent_id,
                    "forked_from_seq": forked_from_seq,
                }
            ],
            sync=True,
        )

    def loaded(self, value: RunState) -> None:
        """The run the log already holds (after ``load``): only what changes after it is written."""
        self._saved = value.history
        self._counters = value.counters_json()

    def save(
        self, before: RunState, after: RunState, events: Sequence[Event] = (), *, extra: Iterable[JsonObject] = ()
    ) -> None:
        """One step: the prompt it submitted, the history's change, each model response, the new value."""
        records: list[JsonObject] = []
        if isinstance(before.state, SubmitPrompt) and not isinstance(after.state, SubmitPrompt):
            records.append({"kind": "prompt", "text": before.state.prompt})
        # The value before the history: a write cut short then loses the new messages, never the state that
        # explains them (an answer without its state could not be told from a pause_turn to resend).
        counters = after.counters_json()
        records.append({"kind": "state", **state_delta(self._counters, counters)})
        self._counters = counters
        if (cut := _changed_from(self._saved, after.history)) is not None:
            records.append({"kind": "history", "at": cut, "messages": [m.to_wire() for m in after.history[cut:]]})
            self._saved = after.history
        boundary = isinstance(after.state, Done)
        for e in events:
            if type(e) in INTERVENTIONS:
                records.append({"kind": INTERVENTIONS[type(e)], **asdict(e)})
            if isinstance(e, ModelResponded):
                boundary = True
                r = e.response
                records.append(
                    {
                        "kind": "turn",
                        "turn": e.turn,
                        "stop_reason": r.stop_reason,
                        "usage": r.usage.to_wire(),
                        "cost_usd": cost_usd(self.model, r.usage),
                        "model": r.model or self.model,
                    }
                )
        records += extra
        self.store.append(self.session_id, redact(records), sync=boundary or isinstance(after.state, RunTools))

    def write(self, kind: RecordKind, sync: bool = True, **fields: JsonValue) -> None:
        self.store.append(self.session_id, [{"kind": kind, **fields}], sync=sync)


def state_delta(old: JsonObject | None, new: JsonObject) -> JsonObject:
    """A ``state`` record's fields: ``run`` the fields that changed, ``add`` those that only grew (the new
    entries of a dict, the new tail of a list). The path, the trajectory and the repeat guard grow with the
    run: written whole at every step they would make the log quadratic in its length."""
    if old is None:
        return {"run": new}
    run: JsonObject = {}
    add: JsonObject = {}
    for key, value in new.items():
        was = old.get(key)
        if value == was:
            continue
        if isinstance(value, list) and isinstance(was, list) and value[: len(was)] == was:
            add[key] = value[len(was) :]
        elif isinstance(value, dict) and isinstance(was, dict) and was.keys() <= value.keys() and key != "state":
            add[key] = {k: v for k, v in value.items() if was.get(k) != v}
        else:
            run[key] = value
    return {"run": run, "add": add} if add else {"run": run}


def apply_state(counters: JsonObject | None, record: JsonObject) -> JsonObject:
    """The run's fields after a ``state`` record (see ``state_delta``)."""
    out = {**(counters or {}), **record["run"]}
    for key, grown in record.get("add", {}).items():
        if isinstance(grown, list):
            out[key] = out[key] + grown
        else:
            out[key] = {**out[key], **grown}
    return out


def _changed_from(saved: tuple[Message, ...], now: tuple[Message, ...]) -> int | None:
    """Where ``now`` first differs from ``saved`` (None: not at all). Messages are compared by identity first."""
    if saved is now:
        return None
    n = min(len(saved), len(now))
    i = 0
    while i < n and (saved[i] is now[i] or saved[i] == now[i]):
        i += 1
    return None if i == len(saved) == len(now) else i


@dataclass(frozen=True)
class Loaded:
    value: RunState
    seq: int  # the last record's seq
    repaired: JsonObject | None  # the repair record written, if the history needed one


def load(store: SessionStore, session_id: str, *, why: str = "the process ended", save_repair: bool = True) -> Loaded:
    """The run as the log left it, repaired so its next request is valid. Raises ``SessionNotFound``.

    A repair is appended to the log (``save_repair``) with the history it changed, so the log replays to
    the repaired run: the next load finds nothing to repair, and the steps saved after it (deltas from the
    repaired history) replay onto what the model was really sent. A fork loads without saving: the old
    session stays as it was, and the repair is recorded in the fork."""
    records = store.read(session_id)
    history: list[Message] = []
    counters: JsonObject | None = None
    started: set[str] = set()
    finished: set[str] = set()
    for r in records:
        match r.get("kind"):
            case "history":
                history = history[: r["at"]] + [Message.from_wire(m) for m in r["messages"]]
            case "state":
                counters = apply_state(counters, r)
            case "intent":
                started.add(r["call_id"])
            case "outcome":
                finished.add(r["call_id"])
    if counters is not None:
        value = RunState.from_json({**counters, "session_id": session_id}, history=tuple(history))
    else:
        value = RunState(session_id, tuple(history), CallModel())
    value, note = close_open_calls(value, started, finished, why)
    fixed: JsonObject | None = None
    if note:
        fixed = {"kind": "repair", **note}
        if save_repair:
            written: list[JsonObject] = [fixed]
            if (cut := _changed_from(tuple(history), value.history)) is not None:
                written.append({"kind": "history", "at": cut, "messages": [m.to_wire() for m in value.history[cut:]]})
            written.append({"kind": "state", "run": value.counters_json()})
            store.append(session_id, redact(written), sync=True)
        log.warning("session %s: %s", session_id, note["note"])
    return Loaded(value, records[-1]["seq"] if records else 0, fixed)

"""What a finished (or paused) run returns: ``RunResult``, the same fields as the CLI's JSON result line."""

from __future__ import annotations

from dataclasses import dataclass, field

from drivetrain.control.approval import PendingCall
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.state import Subtype
from drivetrain.messages import Message, StopReason, Usage


@dataclass
class RunResult:
    """How a run ended (``subtype``, ``result``: the final answer), what it cost, and its history and trajectory."""

    subtype: Subtype
    stop_reason: StopReason | None
    result: str
    num_turns: int
    session_id: str
    duration_ms: int
    usage: Usage
    total_cost_usd: float | None
    history: list[Message]
    trajectory: list[StopReason]
    note: str = ""
    pending: list[PendingCall] = field(default_factory=list)  # set when the run paused for approval
    attempts: JsonObject | None = None  # a run of several attempts (small/attempts.py): each, the chosen one, why

    @property
    def is_error(self) -> bool:
        return self.subtype not in ("success", "awaiting_approval")

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "type": "result",
            "subtype": self.subtype,
            "is_error": self.is_error,
            "result": self.result,
            "stop_reason": self.stop_reason,
            "num_turns": self.num_turns,
            "session_id": self.session_id,
            "duration_ms": self.duration_ms,
            "usage": self.usage.to_wire(),
            "total_cost_usd": self.total_cost_usd,
        }
        if self.note:
            out["note"] = self.note
        if self.pending:
            out["pending"] = [p.to_json() for p in self.pending]
        if self.attempts is not None:
            out["attempts"] = self.attempts
        return out

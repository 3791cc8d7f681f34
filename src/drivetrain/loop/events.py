"""What a run reports as it goes: one event per thing that happened, in order.

Observers (``Agent.observers``) see each event the moment it happens, which is
how the audit log records a call's intent *before* the call runs; iterating a
``Run`` yields the same events after each step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from drivetrain.control.approval import PendingCall
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.budget import Limit
from drivetrain.loop.result import RunResult
from drivetrain.loop.state import CompactTrigger
from drivetrain.messages import Message, ToolResultBlock, ToolUseBlock
from drivetrain.models.base import ModelResponse

Behavior = Literal["allow", "deny", "defer"]  # what a permission decision came to: a verdict's kind
LoopPattern = Literal["repeat", "cycle", "same_error"]
LoopAction = Literal["refused", "noted", "ended"]


@dataclass(frozen=True)
class ModelResponded:
    turn: int
    response: ModelResponse


@dataclass(frozen=True)
class ToolCalled:
    """The model asked for a call (before any permission decision)."""

    call: ToolUseBlock


@dataclass(frozen=True)
class PermissionDecided:
    call: ToolUseBlock
    behavior: Behavior
    by: str  # rule:…, mode:…, hook:…, person, callback, non-interactive
    reason: str = ""


@dataclass(frozen=True)
class ToolStarted:
    """An allowed call is about to run, with the input it will run with."""

    call: ToolUseBlock
    input: JsonObject
    by: str


@dataclass(frozen=True)
class ToolFinished:
    call: ToolUseBlock
    result: ToolResultBlock
    duration_ms: float
    meta: JsonObject | None = None  # e.g. {"exit_code": 1}; None when the call never ran


@dataclass(frozen=True)
class ResultsSent:
    message: Message  # the user message carrying every tool_result of a turn


@dataclass(frozen=True)
class ApprovalRequired:
    pending: tuple[PendingCall, ...]


@dataclass(frozen=True)
class HookReported:
    event: str
    errors: tuple[str, ...]


@dataclass(frozen=True)
class LoopDetected:
    """The run intervened in a loop (``guard.py``, ``calls.py``)."""

    pattern: LoopPattern
    action: LoopAction
    detail: str


@dataclass(frozen=True)
class LimitApproaching:
    """A limit is nearly used up (``Budget.soft``); an observer may raise it now (``agent.budget``)."""

    limit: Limit
    used: float
    maximum: float


@dataclass(frozen=True)
class LimitReached:
    limit: Limit
    used: float
    maximum: float


@dataclass(frozen=True)
class Compacted:
    """The history was replaced by a summary (or the attempt failed: ``failed`` says why)."""

    trigger: CompactTrigger
    tokens_before: int
    tokens_after: int
    failed: str = ""


@dataclass(frozen=True)
class Finished:
    result: RunResult


Event = (
    ModelResponded
    | ToolCalled
    | PermissionDecided
    | ToolStarted
    | ToolFinished
    | ResultsSent
    | ApprovalRequired
    | HookReported
    | LoopDetected
    | LimitApproaching
    | LimitReached
    | Compacted
    | Finished
)

# The run's interventions and warnings, by the name the session log and stream-json give them.
INTERVENTIONS = {
    LoopDetected: "loop_detected",
    LimitApproaching: "limit_approaching",
    LimitReached: "limit_reached",
    Compacted: "compacted",
}

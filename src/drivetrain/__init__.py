"""drivetrain: the LLM agent loop, done properly.

The model only expresses intent (a tool_use block); the harness executes it,
feeds back a faithful tool_result, and asks again until the model ends its turn.
"""

from typing import TYPE_CHECKING

from drivetrain.agent import Agent, Run
from drivetrain.control.approval import Allow, Approver, Defer, Deny, PendingCall, PermissionDecider, Verdict
from drivetrain.control.hooks import Hooks
from drivetrain.control.permissions import Policy
from drivetrain.errors import ConfigError, HarnessError, ModelError
from drivetrain.loop.budget import Budget
from drivetrain.loop.context import ContextSettings
from drivetrain.loop.events import (
    ApprovalRequired,
    Compacted,
    Event,
    Finished,
    HookReported,
    LimitApproaching,
    LimitReached,
    LoopDetected,
    ModelResponded,
    PermissionDecided,
    ResultsSent,
    ToolCalled,
    ToolFinished,
    ToolStarted,
)
from drivetrain.loop.nodes import Node, NodeContext, Note, PlanFirst, Proceed, SendBack, Verify
from drivetrain.loop.result import RunResult
from drivetrain.loop.state import (
    AwaitApproval,
    CallModel,
    Compact,
    Done,
    Recover,
    RunNode,
    RunState,
    RunTools,
    State,
    SubmitPrompt,
)
from drivetrain.messages import (
    Message,
    RawBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    lint,
    repair,
)
from drivetrain.models.base import Model, ModelRequest, ModelResponse
from drivetrain.sessions.audit import AuditLog
from drivetrain.sessions.file import FileStore
from drivetrain.sessions.open import open_store
from drivetrain.sessions.rewind import Checkpoints
from drivetrain.sessions.store import SessionInfo, SessionNotFound, SessionRecords, SessionStore
from drivetrain.telemetry.run import Telemetry
from drivetrain.telemetry.settings import CommonAttributes, TelemetryContent
from drivetrain.tools import builtin_tools
from drivetrain.tools.base import Tool, ToolContext, ToolError, ToolResult, tool

if TYPE_CHECKING:  # what the lazy names below are, for a type checker (nothing is imported at run time)
    from drivetrain.plans.plan import Plan, Step, make_plan
    from drivetrain.plans.scheduler import PlanResult, apply_plan

# Plans load on first use: ``import drivetrain`` stays the loop, without the planner and scheduler.
_LAZY = {
    "Plan": "drivetrain.plans.plan",
    "Step": "drivetrain.plans.plan",
    "make_plan": "drivetrain.plans.plan",
    "PlanResult": "drivetrain.plans.scheduler",
    "apply_plan": "drivetrain.plans.scheduler",
}


def __getattr__(name: str) -> object:
    if name == "run_plan":  # the old name of apply_plan, for one release
        import warnings

        warnings.warn("drivetrain.run_plan is now drivetrain.apply_plan", DeprecationWarning, stacklevel=2)
        name = "apply_plan"
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'drivetrain' has no attribute {name!r}")


__all__ = [
    "Agent",
    "Allow",
    "ApprovalRequired",
    "Approver",
    "AuditLog",
    "AwaitApproval",
    "Budget",
    "CallModel",
    "Checkpoints",
    "CommonAttributes",
    "Compact",
    "Compacted",
    "ConfigError",
    "ContextSettings",
    "Defer",
    "Deny",
    "Done",
    "Event",
    "FileStore",
    "Finished",
    "HarnessError",
    "HookReported",
    "Hooks",
    "LimitApproaching",
    "LimitReached",
    "LoopDetected",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponded",
    "ModelResponse",
    "Node",
    "NodeContext",
    "Note",
    "PendingCall",
    "PermissionDecided",
    "PermissionDecider",
    "Plan",
    "PlanFirst",
    "PlanResult",
    "Policy",
    "Proceed",
    "RawBlock",
    "Recover",
    "RedactedThinkingBlock",
    "ResultsSent",
    "Run",
    "RunNode",
    "RunResult",
    "RunState",
    "RunTools",
    "SendBack",
    "SessionInfo",
    "SessionNotFound",
    "SessionRecords",
    "SessionStore",
    "State",
    "Step",
    "SubmitPrompt",
    "Telemetry",
    "TelemetryContent",
    "TextBlock",
    "ThinkingBlock",
    "Tool",
    "ToolCalled",
    "ToolContext",
    "ToolError",
    "ToolFinished",
    "ToolResult",
    "ToolResultBlock",
    "ToolStarted",
    "ToolUseBlock",
    "Usage",
    "Verdict",
    "Verify",
    "apply_plan",
    "builtin_tools",
    "lint",
    "make_plan",
    "open_store",
    "repair",
    "tool",
]

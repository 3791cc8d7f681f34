"""drivetrain: the LLM agent loop, done properly.

The model only expresses intent (a tool_use block); the harness executes it,
feeds back a faithful tool_result, and asks again until the model ends its turn.
"""

from drivetrain.errors import ConfigError, HarnessError, ModelError
from drivetrain.approval import Allow, Approver, Defer, Deny, PendingCall, PermissionDecider, Verdict
from drivetrain.audit import AuditLog
from drivetrain.context import ContextSettings
from drivetrain.budget import Budget
from drivetrain.events import (
    ApprovalRequired, Compacted, Event, Finished, HookReported, LimitApproaching, LimitReached, LoopDetected,
    ModelResponded, PermissionDecided, ResultsSent, ToolCalled, ToolFinished, ToolStarted,
)
from drivetrain.hooks import Hooks
from drivetrain.agent import Agent, Run, RunResult
from drivetrain.state import (
    AwaitApproval, CallModel, Compact, Done, Recover, RunNode, RunState, RunTools, State, SubmitPrompt,
)
from drivetrain.messages import (
    Message, RawBlock, RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock, Usage,
    lint, repair,
)
from drivetrain.models.base import Model, ModelRequest, ModelResponse
from drivetrain.nodes import Node, NodeContext, Note, PlanFirst, Proceed, SendBack, Verify
from drivetrain.permissions import Policy
from drivetrain.plan import Plan, Step, make_plan
from drivetrain.rewind import Checkpoints
from drivetrain.scheduler import PlanResult, run_plan
from drivetrain.store import SessionInfo, SessionNotFound, SessionRecords, SessionStore, open_store
from drivetrain.store_file import FileStore
from drivetrain.tools import builtin_tools
from drivetrain.tools.base import Tool, ToolContext, ToolError, ToolResult, tool

__all__ = [
    "Allow", "ApprovalRequired", "Approver", "AuditLog", "AwaitApproval", "Defer", "Deny", "HookReported", "Hooks",
    "PendingCall", "PermissionDecided", "PermissionDecider", "Policy", "SubmitPrompt", "ToolStarted", "Verdict",
    "builtin_tools", "ContextSettings", "Budget", "Compacted", "LimitApproaching", "LimitReached", "LoopDetected",
    "Compact", "RunNode", "RunState", "Node", "NodeContext", "Note", "PlanFirst", "Proceed", "SendBack", "Verify",
    "Plan", "Step", "make_plan", "Checkpoints", "PlanResult", "run_plan",
    "FileStore", "SessionInfo", "SessionNotFound", "SessionRecords", "SessionStore", "open_store",
    "Agent", "CallModel", "ConfigError", "Done", "Event", "Finished", "HarnessError", "Message", "Model",
    "ModelError", "ModelRequest", "ModelResponded", "ModelResponse", "RawBlock", "Recover", "RedactedThinkingBlock",
    "ResultsSent", "Run", "RunResult", "RunTools", "State", "TextBlock", "ThinkingBlock", "Tool", "ToolCalled",
    "ToolContext", "ToolError", "ToolFinished", "ToolResult", "ToolResultBlock", "ToolUseBlock", "Usage", "lint",
    "repair", "tool",
]

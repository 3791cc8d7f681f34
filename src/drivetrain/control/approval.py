"""Approval is a pause, not a flag: an approver answers allow, deny or defer for a call that asks.

Defer turns into a saved, resumable state: the run stops in ``AwaitApproval``
with the pending calls listed, and resumes later, in this process or another,
with a verdict per call id.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from drivetrain.control.permissions.rules import Behavior
from drivetrain.jsontypes import JsonObject
from drivetrain.tools.base import ToolContext


@dataclass(frozen=True)
class Allow:
    updated_input: JsonObject | None = None  # the approver may edit the call before it runs
    by: str = "callback"  # who decided, for the audit log: "rule:…", "mode:…", "hook:…", "person", "callback"
    reason: str = ""


@dataclass(frozen=True)
class Deny:
    message: str = "Denied."  # fed back to the model as an is_error result
    by: str = "callback"


@dataclass(frozen=True)
class Defer:
    """Pause the run; a verdict for this call will come later (``Run.resume``)."""


Verdict = Allow | Deny | Defer


@dataclass(frozen=True)
class PendingCall:
    id: str
    name: str
    input: JsonObject
    reason: str = ""  # why it needs approval

    def to_json(self) -> JsonObject:
        return {"id": self.id, "name": self.name, "input": self.input, "reason": self.reason}


class PermissionAnswer(Protocol):
    """A decider's answer for one call: ``drivetrain.control.permissions.Decision`` is one."""

    @property
    def behavior(self) -> Behavior: ...

    @property
    def reason(self) -> str: ...

    @property
    def source(self) -> str: ...  # the rule's settings file or flag, "mode:<mode>", "builtin", …


class PermissionDecider(Protocol):
    """Decides what a tool call may do before anyone is asked: ``drivetrain.Policy`` is one."""

    def decide(
        self, tool_name: str, tool_input: JsonObject, ctx: ToolContext | str | os.PathLike[str]
    ) -> PermissionAnswer: ...


Approver = Callable[[PendingCall], Verdict | Awaitable[Verdict]]


async def ask(approver: Approver | None, call: PendingCall) -> Verdict:
    """Ask the approver; with none (non-interactive), what would ask is denied and the model is told why.

    An approver that fails (raises, or returns something that is not a verdict) denies the call, naming the
    failure: the call still gets its result, so the history stays valid and the run goes on.
    """
    if approver is None:
        return Deny(
            f"Permission to use {call.name} was denied: it needs approval ({call.reason or 'no rule allows it'}) "
            "and nobody can approve it in this non-interactive run. Try another way, or ask the user to "
            "allow it with --allowedTools or a settings rule.",
            by="non-interactive",
        )
    try:
        verdict = approver(call)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if not isinstance(verdict, (Allow, Deny, Defer)):
            raise TypeError(f"the approver returned {verdict!r}, not Allow, Deny or Defer")
    except Exception as e:  # cancellation and KeyboardInterrupt still end the run
        return Deny(
            f"Permission to use {call.name} was denied: the approval step failed "
            f"({type(e).__name__}: {e}), so the call was not run.",
            by="approver-failure",
        )
    return verdict


def verdict_to_json(v: Verdict) -> JsonObject:
    if isinstance(v, Allow):
        return {"behavior": "allow", "updated_input": v.updated_input, "by": v.by, "reason": v.reason}
    if isinstance(v, Deny):
        return {"behavior": "deny", "message": v.message, "by": v.by}
    return {"behavior": "defer"}


def verdict_from_json(d: JsonObject) -> Verdict:
    match d.get("behavior"):
        case "allow":
            return Allow(d.get("updated_input"), d.get("by", "callback"), d.get("reason", ""))
        case "deny":
            return Deny(d.get("message", "Denied."), d.get("by", "callback"))
        case "defer":
            return Defer()
    raise ValueError(f"not a verdict: {d!r}")

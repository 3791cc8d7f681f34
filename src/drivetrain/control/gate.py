"""The one gate every step passes: hooks, the permission policy and the approver, answering with verdicts.

The loop asks the gate and gets an ``Allow``, a ``Deny`` or a ``Defer``; how the answer was reached
(a hook, a rule, a mode, a person) is in the verdict's ``by``. The gate also carries what hooks add
besides a verdict (context for the model, a rewritten tool result, a request to stop the run), and
reports hook failures and stop requests to the run through ``report``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from drivetrain.control.approval import Allow, Approver, Deny, PendingCall, PermissionDecider, Verdict, ask
from drivetrain.control.hooks import HookEvent, HookOutcome, HookRunner
from drivetrain.control.permissions.rules import Behavior
from drivetrain.jsontypes import JsonObject
from drivetrain.messages import InvalidToolUseBlock, ToolResultBlock, ToolUseBlock
from drivetrain.tools.base import Tool, ToolContext

Report = Callable[[HookEvent, HookOutcome], None]  # (hook event, outcome): the run notes errors and stop requests
ToolOutput = str | list[JsonObject]  # a tool result's content: text, or content blocks


@dataclass(frozen=True)
class Admitted:
    """A prompt the UserPromptSubmit hooks let through, with the context they add."""

    verdict: Allow | Deny
    context: tuple[str, ...] = ()


@dataclass
class Gate:
    hooks: HookRunner | None = None
    policy: PermissionDecider | None = None  # None: every call is allowed
    approver: Approver | None = None  # None: what would ask is denied (non-interactive)

    async def admit(self, payload: JsonObject, report: Report) -> Admitted:
        if not self.hooks:
            return Admitted(Allow())
        out = await self.hooks.run("UserPromptSubmit", payload)
        report("UserPromptSubmit", out)
        if out.block:
            return Admitted(Deny(f"A UserPromptSubmit hook blocked the prompt: {out.reason}", by="hook"))
        return Admitted(Allow(by="hook"), tuple(c for c in out.additional_context if c))

    async def decide(
        self, call: ToolUseBlock, tools: dict[str, Tool], ctx: ToolContext, payload: JsonObject, report: Report
    ) -> Verdict:
        """May this call run (and with what input)? Hooks first, then the policy, then the approver."""
        if call.name not in tools:
            return Deny(f"No tool named {call.name!r}. Available tools: {', '.join(tools)}.", by="harness")
        # the provider could not decode the arguments: never run on a guess
        if isinstance(call, InvalidToolUseBlock) and call.input_error:
            schema = json.dumps(tools[call.name].input_schema)
            return Deny(
                f"{call.input_error}\nThe call was not run. Call {call.name} again with arguments that "
                f"match its input schema: {schema}",
                by="harness",
            )
        tool_input, hook_by = call.input, ""
        hook_says: Behavior | None = None
        if self.hooks:
            out = await self.hooks.run(
                "PreToolUse",
                {**payload, "tool_name": call.name, "tool_input": call.input, "tool_use_id": call.id},
                tool_name=call.name,
            )
            report("PreToolUse", out)
            hook_by = "hook:" + ", ".join(out.sources)
            if out.block or out.decision == "deny":
                return Deny(f"A PreToolUse hook blocked this call: {out.reason or 'no reason given'}", by=hook_by)
            if out.updated_input is not None:
                tool_input = out.updated_input
            hook_says = out.decision
        changed = tool_input if tool_input is not call.input else None
        decision = self.policy.decide(call.name, tool_input, ctx) if self.policy is not None else None
        behavior = decision.behavior if decision is not None else "allow"
        source = f"{decision.source}" if decision is not None else "no policy"
        reason = decision.reason if decision is not None else ""
        if behavior == "deny":  # a deny rule wins over everything, hooks included
            return Deny(
                f"Permission denied: {reason}\nIt will be denied again (with sudo too): do it another way.", by=source
            )
        if hook_says == "allow" and behavior == "ask":
            return Allow(changed, by=hook_by, reason="allowed by a PreToolUse hook")
        if behavior == "allow" and hook_says != "ask":
            return Allow(changed, by=source, reason=reason)
        if hook_says == "ask":
            reason = "a PreToolUse hook asked for approval"
        verdict = await ask(self.approver, PendingCall(call.id, call.name, tool_input, reason))
        if isinstance(verdict, Allow) and verdict.updated_input is None and changed is not None:
            verdict = Allow(changed, verdict.by, verdict.reason)
        return verdict

    async def after(
        self,
        call: ToolUseBlock,
        tool_input: JsonObject,
        content: ToolOutput,
        is_error: bool,
        payload: JsonObject,
        report: Report,
    ) -> ToolOutput:
        """The result as the model will see it: PostToolUse hooks may add context or replace the output."""
        if not self.hooks:
            return content
        text = content if isinstance(content, str) else ToolResultBlock(call.id, content).text
        out = await self.hooks.run(
            "PostToolUse",
            {
                **payload,
                "tool_name": call.name,
                "tool_input": tool_input,
                "tool_use_id": call.id,
                "tool_response": {"content": text, "is_error": is_error},
            },
            tool_name=call.name,
        )
        report("PostToolUse", out)
        extra = list(out.additional_context)
        if out.block:
            extra.append(f"PostToolUse hook: {out.reason}")
        if out.updated_output is not None:
            content = out.updated_output
        if not extra:
            return content
        if isinstance(content, str):
            return "\n\n".join([content, *extra])
        return [*content, *({"type": "text", "text": e} for e in extra)]

    async def compact(self, payload: JsonObject, report: Report) -> Verdict:
        """May the history be compacted now? A PreCompact hook that blocks says no."""
        if not self.hooks:
            return Allow()
        out = await self.hooks.run("PreCompact", payload)
        report("PreCompact", out)
        if out.block:
            return Deny(out.reason or "a PreCompact hook blocked it", by="hook:" + ", ".join(out.sources))
        return Allow()

    async def stop(self, payload: JsonObject, report: Report) -> Verdict:
        """May the run end here? ``Deny`` carries what the Stop hooks want done first."""
        if not self.hooks:
            return Allow()
        out = await self.hooks.run("Stop", payload)
        report("Stop", out)
        if out.block:
            return Deny(out.reason or "keep working", by="hook:" + ", ".join(out.sources))
        return Allow()

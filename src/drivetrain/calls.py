"""One turn's tool calls, from intent to result: hooks, permission, approval, execution.

Decisions are made one call at a time (a person answers one question at a
time); the allowed calls then run concurrently. Every call ends in exactly one
tool_result: a denial or a failure is a result the model reads, never a gap.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import TYPE_CHECKING

from drivetrain.approval import Allow, Defer, Deny, PendingCall, Verdict, ask
from drivetrain.errors import HarnessError
from drivetrain.events import PermissionDecided, ToolStarted
from drivetrain.messages import ToolResultBlock, ToolUseBlock
from drivetrain.tools.base import ToolError, ToolResult

if TYPE_CHECKING:
    from drivetrain.loop import Run


async def decide_all(run: Run, calls: tuple[ToolUseBlock, ...], verdicts: dict[str, Verdict]) -> dict[str, Verdict]:
    """A verdict for every call not decided yet (calls decided before a pause keep theirs)."""
    verdicts = dict(verdicts)
    for call in calls:
        if call.id not in verdicts:
            verdict = await _decide(run, call)
            verdicts[call.id] = verdict
            behavior, by, reason = _describe(verdict)
            run.emit(PermissionDecided(call, behavior, by, reason))
    return verdicts


def _describe(v: Verdict) -> tuple[str, str, str]:
    if isinstance(v, Allow):
        return "allow", v.by, v.reason
    if isinstance(v, Deny):
        return "deny", v.by, v.message
    return "defer", "approver", "waiting for a decision"


async def _decide(run: Run, call: ToolUseBlock) -> Verdict:
    agent = run.agent
    if call.name not in run.tools:
        return Deny(f"No tool named {call.name!r}. Available tools: {', '.join(run.tools)}.", by="harness")
    if getattr(call, "input_error", None):  # the provider could not decode the arguments: never run on a guess
        schema = json.dumps(run.tools[call.name].input_schema)
        return Deny(f"{call.input_error}\nThe call was not run. Call {call.name} again with arguments that "
                    f"match its input schema: {schema}", by="harness")
    tool_input, hook_says, hook_by = call.input, None, ""
    if agent.hooks:
        out = await agent.hooks.run("PreToolUse", run.hook_payload(
            "PreToolUse", tool_name=call.name, tool_input=call.input, tool_use_id=call.id), tool_name=call.name)
        run.report_hooks("PreToolUse", out)
        hook_by = "hook:" + ", ".join(out.sources)
        if out.block or out.decision == "deny":
            return Deny(f"A PreToolUse hook blocked this call: {out.reason or 'no reason given'}", by=hook_by)
        if out.updated_input is not None:
            tool_input = out.updated_input
        hook_says = out.decision
    changed = tool_input if tool_input is not call.input else None
    decision = agent.policy.decide(call.name, tool_input, run.tool_context()) if agent.policy is not None else None
    behavior = decision.behavior if decision is not None else "allow"
    source = f"{decision.source}" if decision is not None else "no policy"
    reason = decision.reason if decision is not None else ""
    if behavior == "deny":  # a deny rule wins over everything, hooks included
        return Deny(f"Permission denied: {reason}", by=source)
    if hook_says == "allow" and behavior == "ask":
        return Allow(changed, by=hook_by, reason="allowed by a PreToolUse hook")
    if behavior == "allow" and hook_says != "ask":
        return Allow(changed, by=source, reason=reason)
    if hook_says == "ask":
        reason = "a PreToolUse hook asked for approval"
    verdict = await ask(agent.approver, PendingCall(call.id, call.name, tool_input, reason))
    if isinstance(verdict, Allow) and verdict.updated_input is None and changed is not None:
        verdict = Allow(changed, verdict.by, verdict.reason)
    return verdict


async def execute(run: Run, call: ToolUseBlock, verdict: Verdict) -> tuple[ToolResultBlock, float, dict | None]:
    """Run one decided call. Returns its result block, duration in ms, and the tool's metadata."""
    if isinstance(verdict, Deny):
        # A denial repeated unchanged is a loop too: counted like a result, so it is forbidden, then ends the run.
        text = _note_repeat(run, call.name, call.input, verdict.message)
        if run.seen_calls[_repeat_key(call.name, call.input)][2] > REPEAT_LIMIT:
            run.stuck_turns += 1
        return ToolResultBlock(call.id, text, True), 0.0, None
    assert not isinstance(verdict, Defer), "deferred calls are never executed"
    tool_input = verdict.updated_input if verdict.updated_input is not None else call.input
    refusal = _refuse_repeat(run, call, tool_input)
    if refusal is not None:
        run.stuck_turns += 1
        return refusal, 0.0, None
    run.emit(ToolStarted(call, tool_input, verdict.by))  # the audit log's intent record: before the call runs
    started = time.monotonic()
    result = await _call_tool(run, call.name, tool_input)
    content = result.content if result.content not in ("", []) else "(no output)"
    content = _note_repeat(run, call.name, tool_input, content)
    if run.agent.hooks:
        content = await _post_hooks(run, call, tool_input, content, result.is_error)
    return ToolResultBlock(call.id, content, result.is_error), (time.monotonic() - started) * 1000, result.meta


REPEAT_LIMIT = 3  # the same call with the same result this many times: the next identical one is not run


def _repeat_key(name: str, tool_input: dict) -> str:
    return f"{name}\0{json.dumps(tool_input, sort_keys=True, default=str)}"


def forbidden(run: Run) -> tuple[tuple[str, dict], ...]:
    """Calls made twice or more with the same result each time: the model may not make them again
    (a provider that decodes under a grammar leaves them out of it)."""
    out = []
    for key, (_, _, times) in run.seen_calls.items():
        if times >= 2:
            name, _, raw = key.partition("\0")
            out.append((name, json.loads(raw)))
    return tuple(out)


def _refuse_repeat(run: Run, call: ToolUseBlock, tool_input: dict) -> ToolResultBlock | None:
    """A call already made REPEAT_LIMIT times, each with the same result, is a loop: answer without running it."""
    seen = run.seen_calls.get(_repeat_key(call.name, tool_input))
    if seen is None or seen[2] < REPEAT_LIMIT:
        return None
    return ToolResultBlock(call.id, f"Not run: you have made this exact {call.name} call {seen[2]} times (first in "
                           f"turn {seen[0]}) and got the same result each time. Do something different: use "
                           "the result you already have, call another tool, or change the input.", True)


def _note_repeat(run: Run, name: str, tool_input: dict, content):
    """A call repeated with the same input and the same result is a loop, not progress: say so.

    Small models especially re-issue a call after reading its result; telling them plainly that
    nothing changed is the cheapest way out. The result itself is passed on unchanged.
    """
    if not isinstance(content, str):
        return content
    key = _repeat_key(name, tool_input)
    digest = hashlib.sha256(content.encode()).hexdigest()
    seen = run.seen_calls.get(key)
    if seen is None or seen[1] != digest:
        run.seen_calls[key] = (run.num_turns, digest, 1)
        return content
    run.seen_calls[key] = (seen[0], digest, seen[2] + 1)
    if run.agent.profile.collapse:
        return content  # the model's view collapses the copies and says so (context.collapse_repeats)
    return (f"{content}\n\n[drivetrain: this is the same {name} call you made in turn {seen[0]}, with the same "
            "result. Repeating it will not change anything: use this result, or do something different.]")


async def _call_tool(run: Run, name: str, tool_input: dict) -> ToolResult:
    try:
        return await run.tools[name].call(tool_input, run.tool_context())
    except (HarnessError, asyncio.CancelledError):
        raise
    except Exception as e:  # tool failures are data: the model sees the real error
        text = str(e) or type(e).__name__
        return ToolResult(text if isinstance(e, ToolError) else f"{type(e).__name__}: {text}", True)


async def _post_hooks(run: Run, call: ToolUseBlock, tool_input: dict, content, is_error: bool):
    text = content if isinstance(content, str) else ToolResultBlock(call.id, content).text
    out = await run.agent.hooks.run("PostToolUse", run.hook_payload(
        "PostToolUse", tool_name=call.name, tool_input=tool_input, tool_use_id=call.id,
        tool_response={"content": text, "is_error": is_error}), tool_name=call.name)
    run.report_hooks("PostToolUse", out)
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

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
import uuid
from dataclasses import replace

from drivetrain.control.approval import Allow, Defer, Deny, Verdict
from drivetrain.errors import HarnessError
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.context import cap_result
from drivetrain.loop.draft import Draft
from drivetrain.loop.events import Behavior, LoopDetected, PermissionDecided, ToolFinished, ToolStarted
from drivetrain.messages import ToolResultBlock, ToolResultContent, ToolUseBlock, Usage
from drivetrain.tools.base import ToolError, ToolResult

TOOL_GRACE_S = 3.0  # past the run's wall budget before a call still running is cancelled
HARNESS_CALL = "drivetrain_check_"  # the id prefix of a call the harness makes itself (``harness_call``)

Outcome = tuple[ToolResultBlock, float, JsonObject | None]  # a call's result, its duration in ms, the tool's metadata


async def decide_all(w: Draft, calls: tuple[ToolUseBlock, ...], verdicts: dict[str, Verdict]) -> dict[str, Verdict]:
    """A verdict for every call not decided yet (calls decided before a pause keep theirs)."""
    verdicts = dict(verdicts)
    for call in calls:
        if call.id not in verdicts:
            verdict = await w.deps.gate.decide(call, w.deps.tools, w.deps.context, w.payload("PreToolUse"), w.report)
            verdicts[call.id] = verdict
            behavior, by, reason = _describe(verdict)
            w.emit(PermissionDecided(call, behavior, by, reason))
    return verdicts


def _describe(v: Verdict) -> tuple[Behavior, str, str]:
    if isinstance(v, Allow):
        return "allow", v.by, v.reason
    if isinstance(v, Deny):
        return "deny", v.by, v.message
    return "defer", "approver", "waiting for a decision"


async def execute(w: Draft, call: ToolUseBlock, verdict: Verdict) -> Outcome:
    """Run one decided call. Returns its result block, duration in ms, and the tool's metadata."""
    if isinstance(verdict, Deny):
        # A denial repeated unchanged is a loop too: counted like a result, so it is forbidden, then ends the run.
        text = _note_repeat(w, call.name, call.input, verdict.message)
        if w.seen_calls[repeat_key(call.name, call.input)][2] > w.deps.agent.repeat_limit:
            w.stuck_turns += 1
        return ToolResultBlock(call.id, text, True), 0.0, None
    assert not isinstance(verdict, Defer), "deferred calls are never executed"
    tool_input = verdict.updated_input if verdict.updated_input is not None else call.input
    refusal = _refuse_repeat(w, call, tool_input)
    if refusal is not None:
        w.stuck_turns += 1
        return refusal, 0.0, None
    w.emit(ToolStarted(call, tool_input, verdict.by))  # the audit log's intent record: before the call runs
    started = time.monotonic()
    result = await _call_tool(w, call, tool_input)
    content = result.content if result.content not in ("", []) else "(no output)"
    content = _note_repeat(w, call.name, tool_input, content)
    content = cap_result(w, call.id, content)  # the history and the log hold the capped text
    content = await w.deps.gate.after(call, tool_input, content, result.is_error, w.payload("PostToolUse"), w.report)
    return ToolResultBlock(call.id, content, result.is_error), (time.monotonic() - started) * 1000, result.meta


async def harness_call(w: Draft, name: str, tool_input: JsonObject) -> ToolResult:
    """A call the harness makes itself (a check running again a command the model ran): decided by the same gate
    (hooks, policy, approver), run by the same tool (inside the sandbox when the run has one), recorded in the
    audit log like any call, and never shown to the model as its own. Denied, or left for a person who cannot
    answer now, it does not run, and the result says so."""
    call = ToolUseBlock(f"{HARNESS_CALL}{uuid.uuid4().hex[:12]}", name, tool_input)
    verdict = (await decide_all(w, (call,), {}))[call.id]
    if not isinstance(verdict, Allow):
        text = verdict.message if isinstance(verdict, Deny) else "Not run: it waits for a decision."
        w.emit(ToolFinished(call, ToolResultBlock(call.id, text, True), 0.0))
        return ToolResult(text, True)
    tool_input = verdict.updated_input if verdict.updated_input is not None else tool_input
    w.emit(ToolStarted(call, tool_input, verdict.by))
    started = time.monotonic()
    result = await _call_tool(w, call, tool_input)
    block = ToolResultBlock(
        call.id, result.content if result.content not in ("", []) else "(no output)", result.is_error
    )
    w.emit(ToolFinished(call, block, (time.monotonic() - started) * 1000, result.meta or {}))
    return result


def repeat_key(name: str, tool_input: JsonObject) -> str:
    """A call's fingerprint: the tool and its input, normalised (key order does not matter)."""
    return f"{name}\0{json.dumps(tool_input, sort_keys=True, default=str)}"


def _refuse_repeat(w: Draft, call: ToolUseBlock, tool_input: JsonObject) -> ToolResultBlock | None:
    """A call already made ``repeat_limit`` times, each with the same result, is a loop: answer without running
    it, with what it got before. So is the next step of a cycle (``guard.py``)."""
    agent = w.deps.agent
    if call.name in agent.repeat_exempt:
        return None
    key = repeat_key(call.name, tool_input)
    if key in w.blocked:
        w.emit(LoopDetected("cycle", "refused", f"{call.name} {json.dumps(tool_input)[:200]}"))
        return ToolResultBlock(call.id, f"Not run: {w.blocked[key]}", True)
    seen = w.seen_calls.get(key)
    if seen is None or seen[2] < agent.repeat_limit:
        return None
    w.emit(LoopDetected("repeat", "refused", f"{call.name} {json.dumps(tool_input)[:200]} ×{seen[2]}"))
    got = seen[3] if len(seen) > 3 else ""
    return ToolResultBlock(
        call.id,
        f"Not run: you have made this exact {call.name} call {seen[2]} times (first in "
        f"turn {seen[0]}) and got the same result each time"
        + (f", which began: {got!r}" if got else "")
        + ". Do something different: use "
        "the result you already have, call another tool, or change the input.",
        True,
    )


def _note_repeat(w: Draft, name: str, tool_input: JsonObject, content: ToolResultContent) -> ToolResultContent:
    """A call repeated with the same input and the same result is a loop, not progress: say so.

    Small models especially re-issue a call after reading its result; telling them plainly that
    nothing changed is the cheapest way out. The result itself is passed on unchanged.
    """
    if not isinstance(content, str):
        return content
    key = repeat_key(name, tool_input)
    digest = hashlib.sha256(content.encode()).hexdigest()
    seen = w.seen_calls.get(key)
    if seen is None or seen[1] != digest:
        w.seen_calls[key] = (w.num_turns, digest, 1, content[:300])
        return content
    w.seen_calls[key] = (seen[0], digest, seen[2] + 1, content[:300])
    if w.deps.agent.profile.collapse or name in w.deps.agent.repeat_exempt:
        return content  # the model's view collapses the copies and says so (context.collapse_repeats)
    return (
        f"{content}\n\n[drivetrain: this is the same {name} call you made in turn {seen[0]}, with the same "
        "result. Repeating it will not change anything: use this result, or do something different.]"
    )


async def _call_tool(w: Draft, call: ToolUseBlock, tool_input: JsonObject) -> ToolResult:
    wall = w.deps.agent.budget.wall_time_s
    deadline = w.deps.started + wall if wall is not None else None
    # A call ends with the run's wall budget: Bash kills its command at the deadline itself (its result says what
    # ran); any other tool (an MCP server's, a subagent) is cancelled a moment after it.
    limit = asyncio.timeout(None if deadline is None else deadline - time.monotonic() + TOOL_GRACE_S)
    try:
        context = replace(w.deps.context, tool_use_id=call.id, deadline=deadline)
        async with limit:
            result = await w.deps.tools[call.name].call(tool_input, context)
    except (HarnessError, asyncio.CancelledError):
        raise
    except Exception as e:  # tool failures are data: the model sees the real error
        if isinstance(e, TimeoutError) and limit.expired():
            return ToolResult(
                f"Stopped when the run's wall-time budget ({wall} s) ran out: the call did not finish.", True
            )
        text = str(e) or type(e).__name__
        return ToolResult(text if isinstance(e, ToolError) else f"{type(e).__name__}: {text}", True)
    if isinstance(used := (result.meta or {}).get("usage"), dict):  # a subagent's requests are the run's too
        w.usage = w.usage + Usage(**used)
    return result

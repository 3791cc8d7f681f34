"""The agent loop: one handler per state, and ``step`` over a run's value.

``step(value, deps) -> (value, events)``: each handler does its state's work on a ``Draft`` of the
next value and returns the next state; its return annotation *is* the graph's edges (``graph.py``).
The value given is never changed. ``Agent`` and ``Run``, the handle that drives a run, are in ``drivetrain/agent.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from drivetrain.control.approval import Defer, Deny, PendingCall, Verdict
from drivetrain.errors import HarnessError, ModelError
from drivetrain.loop import budget, calls, compaction, guard
from drivetrain.loop.context import request_view
from drivetrain.loop.draft import Deps, Draft
from drivetrain.loop.events import (
    ApprovalRequired,
    Compacted,
    Event,
    LimitApproaching,
    LimitReached,
    LoopDetected,
    LoopPattern,
    ModelResponded,
    ResultsSent,
    ToolCalled,
    ToolFinished,
)
from drivetrain.loop.nodes import DraftContext, Note, SendBack
from drivetrain.loop.repair import close_open_calls
from drivetrain.loop.state import (
    AwaitApproval,
    CallModel,
    Compact,
    Done,
    FinalAsk,
    NodePoint,
    Recover,
    RunNode,
    RunState,
    RunTools,
    State,
    SubmitPrompt,
)
from drivetrain.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from drivetrain.models.base import ModelRequest, ModelResponse
from drivetrain.pricing import window_of
from drivetrain.tools.base import tool_spec

STUCK_LIMIT = 2  # turns in a row with a refused repeat before the run asks for the answer (or ends)
MAX_COMPACT_FAILURES = 2  # failed compactions in a row before the run stops trying
FINAL_ASK: dict[FinalAsk, str] = {
    "turn_limit": "This is your last turn: no more tools can run. Answer now with the result of the task "
    "as far as you got it: what you found or changed, and what is left undone.",
    "stuck": "You keep repeating a call that was refused, so no more tools will run. Answer now with the "
    "result of the task from what you already have, and say what is left undone.",
    "empty": "Your reply was empty. Answer now: give the result of the task in a few sentences.",
}
LIMIT_ASK = (
    "This run has reached its {limit} limit, so no more tools can run. Answer now: summarize what was "
    "done, what you found, and what is left undone."
)


async def step(
    value: RunState,
    deps: Deps,
    emit: Callable[[Event], None] | None = None,
    interrupted: Callable[[RunState], None] | None = None,
) -> tuple[RunState, list[Event]]:
    """Do the current state's work; return the next value and what happened. ``value`` is not changed.

    Cancelled while tools run (Ctrl-C), every open call is answered as interrupted and that valid value is
    handed to ``interrupted`` before the ``CancelledError`` propagates.
    """
    w = Draft(value, deps, emit)
    match value.state:
        case SubmitPrompt() as s:
            nxt: State = await submit_prompt(s, w)
        case CallModel() as s:
            nxt = await call_model(s, w)
        case RunTools() as s:
            try:
                nxt = await run_tools(s, w)
            except asyncio.CancelledError:
                if interrupted is not None:
                    interrupted(w.freeze(CallModel()))
                raise
        case Recover() as s:
            nxt = recover(s, w)
        case Compact() as s:
            nxt = await compact(s, w)
        case RunNode() as s:
            nxt = await run_node(s, w)
        case AwaitApproval() as s:
            w.emit(ApprovalRequired(tuple(PendingCall(c.id, c.name, c.input) for c in s.pending)))
            nxt = s
        case Done() as s:
            nxt = s
    if w.hook_stop is not None and not isinstance(nxt, Done):
        # a hook said {"continue": false}: stop after this step, so the history it left stays valid
        nxt = Done("stopped_by_hook", None, w.hook_stop)
    return w.freeze(nxt), w.events


def next_prompt(s: Done, prompt: str) -> SubmitPrompt:
    """The edge out of Done: the next user prompt (``Run.submit``, or a saved session resumed with a prompt)."""
    return SubmitPrompt(prompt)


def with_prompt(value: RunState, prompt: str) -> RunState:
    """The next user prompt for a run that ended — or stopped anywhere else: a pause for approval the user
    moved on from, an interruption. Its open calls are answered first, so the history stays valid."""
    done = value.state
    if not isinstance(done, Done):
        why = "the user moved on without approving it" if isinstance(done, AwaitApproval) else "interrupted"
        value, _ = close_open_calls(value.evolve(state=CallModel()), why=why)
        done = Done("interrupted")
        value = value.evolve(state=done)
    return value.evolve(state=next_prompt(done, prompt), path=value.path + ("SubmitPrompt",))


# ---------------------------------------------------------------- the handlers: each return annotation is an edge


async def submit_prompt(s: SubmitPrompt, w: Draft) -> CallModel | RunNode | Done:
    admitted = await w.deps.gate.admit(w.payload("UserPromptSubmit", prompt=s.prompt), w.report)
    if isinstance(admitted.verdict, Deny):
        return Done("prompt_blocked", None, admitted.verdict.message)
    w.prompts += 1
    w.warned = ()  # a new invocation: its limits are warned about afresh
    blocks = (TextBlock(s.prompt), *(TextBlock(c) for c in admitted.context))
    last = w.history[-1] if w.history else None
    if last is not None and last.role == "user":  # e.g. resumed after an interruption: one user turn, not two
        w.set_last(Message("user", (*last.content, *blocks)))
    else:
        w.append(Message("user", blocks))
    return enter_node(w, "start", CallModel())


async def call_model(s: CallModel, w: Draft) -> RunTools | Recover | CallModel | Compact | RunNode | Done:
    a, p, d = w.deps.agent, w.deps.agent.profile, w.deps
    if not s.final:
        since = w.deps.spent  # the limits count this invocation only
        measured = budget.measures(
            a.budget,
            a.max_turns,
            turns=w.num_turns - since.turns,
            usage=w.usage - since.usage,
            model=d.model.name,
            elapsed_s=w.deps.elapsed(),
            tool_calls=w.tool_calls - since.tool_calls,
        )
        if hit := budget.reached(measured):
            w.emit(LimitReached(*hit))
            if not a.budget.wrap_up:
                return Done(
                    budget.SUBTYPES[hit[0]], w.trajectory[-1] if w.trajectory else None, note=budget.describe(*hit)
                )
            s = CallModel(s.max_tokens, final=hit[0])  # one last request, without tools, for a summary
        for m in budget.approaching(measured, a.budget.soft, w.warned):
            w.warned += (m[0],)
            w.emit(LimitApproaching(*m))
    if p.final and not s.final and a.max_turns is not None and w.num_turns - w.deps.spent.turns == a.max_turns - 1 > 0:
        s = CallModel(s.max_tokens, final="turn_limit")
    if s.final:
        w.ask(final_ask(s.final))
    w.check(a.strict)
    max_tokens = s.max_tokens or a.max_tokens
    choice = "none" if s.final else s.tool_choice
    view = request_view(w.history, w.deps, w.deps.model, w.deps.outputs)
    if (
        not s.final
        and s.compact
        and w.compact_failures < MAX_COMPACT_FAILURES
        and compaction.estimate_tokens(view, d.system) >= a.compact_at * context_window(w.deps)
    ):
        return Compact("auto")  # what would be sent (old outputs already cleared) still nears the window
    request = ModelRequest(
        view,
        d.system,
        [tool_spec(t) for t in d.outfit.tools],
        max_tokens,
        tool_choice=choice,
        keep_prefix=p.prefixcache,
    )
    wall, started = a.budget.wall_time_s, w.deps.elapsed()
    try:
        if wall is None or s.final:
            response = await w.deps.model.respond(request)
        else:  # the wall budget holds during a request too: a local model's long reply is minutes on a CPU
            response = await asyncio.wait_for(w.deps.model.respond(request), max(wall - started, 0.001))
    except HarnessError as e:  # a fault of the upstream that outlasted the retries has a subtype of its own
        upstream = isinstance(e, ModelError) and e.fault is not None
        return Done("error_upstream" if upstream else "error_during_execution", None, str(e))
    except TimeoutError:
        assert wall is not None
        over: budget.Measure = ("wall_time_s", w.deps.elapsed(), wall)
        w.emit(LimitReached(*over))
        last = w.trajectory[-1] if w.trajectory else None
        return Done(budget.SUBTYPES["wall_time_s"], last, note=budget.describe(*over))
    w.num_turns += 1
    w.usage = w.usage + response.usage
    w.trajectory.append(response.stop_reason)
    w.emit(ModelResponded(w.num_turns, response))
    if s.final:
        done = final_answer(s.final, response, w)
        # A stuck model's answer goes through the end_turn nodes: a check that knows what is left (and the call
        # that does it) can send it back to work, which is the way out of its rut. Their limits bound it.
        return enter_node(w, "end_turn", done) if s.final == "stuck" else done
    next_state = after_response(response, max_tokens, w)
    if isinstance(next_state, Done) and next_state.subtype == "success":
        return await stop_gate(next_state, w)
    return next_state


def after_response(response: ModelResponse, max_tokens: int, w: Draft) -> RunTools | Recover | CallModel | Done:
    reason = response.stop_reason
    agent = w.deps.agent
    if reason == "max_tokens" and response.content and isinstance(response.content[-1], ToolUseBlock):
        return Recover(response, max_tokens)
    w.append(response.message)
    if reason == "pause_turn":
        if w.continuations >= agent.max_continuations:
            return Done(
                "error_max_continuations",
                reason,
                response.message.text,
                note=f"The server paused {w.continuations + 1} times in a row; gave up.",
            )
        w.continuations += 1
        return CallModel()  # resend as is: the paused content is the last message, no new user text
    w.continuations = 0
    if reason == "tool_use" and response.message.tool_uses:
        w.tool_calls += len(response.message.tool_uses)
        for call in response.message.tool_uses:
            w.emit(ToolCalled(call))
        return RunTools(tuple(response.message.tool_uses))
    note = f"The answer was cut off at max_tokens ({max_tokens})." if reason == "max_tokens" else ""
    text = response.message.text
    if agent.profile.final and not text.strip() and reason == "end_turn":
        w.pop()  # it says nothing, and an empty text block is not valid history
        return CallModel(final="empty")
    return Done("success", reason, text, note)


def final_ask(why: FinalAsk | budget.Limit) -> str:
    """What the last request, made without tools, asks for."""
    match why:
        case "turn_limit" | "stuck" | "empty":
            return FINAL_ASK[why]
    return LIMIT_ASK.format(limit=budget.NAMES[why])


def final_answer(why: FinalAsk | budget.Limit, response: ModelResponse, w: Draft) -> Done:
    """The answer to the last request, made without tools: the run ends with it either way."""
    kept = tuple(
        b
        for b in response.content
        if not isinstance(b, ToolUseBlock) and not (isinstance(b, TextBlock) and not b.text.strip())
    )
    w.append(Message("assistant", kept or (TextBlock("(no answer)"),)))
    text = response.message.text
    match why:
        case "turn_limit":
            return Done(
                "error_max_turns",
                response.stop_reason,
                text,
                note=f"Reached the turn limit ({w.deps.agent.max_turns}); the last turn asked for the answer.",
            )
        case "stuck":
            return Done(
                "error_loop_detected",
                response.stop_reason,
                text,
                note="The model kept repeating refused calls; the last turn asked for the answer.",
            )
        case "empty":
            return Done("success", response.stop_reason, text)
    return Done(
        budget.SUBTYPES[why],
        response.stop_reason,
        text,
        note=f"Reached the {budget.NAMES[why]} limit; the last request asked for a summary.",
    )


async def stop_gate(done: Done, w: Draft) -> CallModel | RunNode | Done:
    verdict = await w.deps.gate.stop(
        w.payload("Stop", stop_hook_active=w.stop_refusals > 0, last_assistant_message=done.result), w.report
    )
    if not isinstance(verdict, Deny) or w.stop_refusals >= w.deps.agent.max_stop_refusals:
        return enter_node(w, "end_turn", done)
    w.stop_refusals += 1
    w.append(Message.user(f"A Stop hook refused to let you stop: {verdict.message}"))
    return CallModel()


async def run_tools(s: RunTools, w: Draft) -> AwaitApproval | CallModel | Done:
    stuck_before = w.stuck_turns
    running = False
    finished: dict[str, calls.Outcome] = {}

    async def run_one(call: ToolUseBlock) -> calls.Outcome:
        outcome = await calls.execute(w, call, verdicts[call.id])
        finished[call.id] = outcome
        # as each call ends, not when the last one does: its outcome is on record even if the process dies
        # while the others still run, so a repair can say it ran to the end
        w.emit(ToolFinished(call, *outcome))
        return outcome

    try:
        verdicts = await calls.decide_all(w, s.calls, s.verdicts)
        if any(isinstance(v, Defer) for v in verdicts.values()):
            decided: dict[str, Verdict] = {k: v for k, v in verdicts.items() if not isinstance(v, Defer)}
            return AwaitApproval(s.calls, decided)
        running = True
        outcomes = await asyncio.gather(*(run_one(c) for c in s.calls), return_exceptions=True)
    except asyncio.CancelledError:  # interrupted (Ctrl-C): answer every call so the history stays valid
        text = (
            "Interrupted by the user before this call finished."
            if running
            else "Interrupted by the user while the calls were being approved: this call never ran, so it had "
            "no effect."
        )
        message = Message(
            "user", tuple(finished[c.id][0] if c.id in finished else ToolResultBlock(c.id, text, True) for c in s.calls)
        )  # a call that had ended keeps its real result
        w.append(message)
        w.emit(ResultsSent(message))
        raise
    failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
    results: list[ToolResultBlock] = []
    for call, outcome in zip(s.calls, outcomes):
        if call.id in finished:  # ran (an observer may have failed on its ToolFinished: that is the failure)
            outcome = finished[call.id]
        elif isinstance(outcome, BaseException):
            outcome = (ToolResultBlock(call.id, f"Not run: the harness failed ({outcome}).", True), 0.0, None)
            w.emit(ToolFinished(call, *outcome))
        results.append(outcome[0])
    if w.stuck_turns == stuck_before:
        w.stuck_turns = 0  # no call of this turn was a refused repeat
    results = guard.after_turn(w, s.calls, results)
    message = Message("user", tuple(results))
    w.append(message)  # always answered, even on failure: the history stays valid
    w.emit(ResultsSent(message))
    if failure is not None:
        if not isinstance(failure, Exception):
            raise failure  # cancellation, KeyboardInterrupt: after the history is made valid
        return Done("error_during_execution", None, str(failure))
    if w.stuck_turns >= STUCK_LIMIT or w.error_streak[1] >= guard.SAME_ERROR_END:
        pattern: LoopPattern = "same_error" if w.stuck_turns < STUCK_LIMIT else "repeat"
        w.emit(LoopDetected(pattern, "ended", "the model went on repeating after being told"))
        if w.deps.agent.profile.final:
            return CallModel(final="stuck")
        return Done(
            "error_loop_detected",
            "tool_use",
            note="Stopped: the model kept repeating itself "
            "(the same refused call, or the same error) after being told.",
        )
    return CallModel()


def recover(s: Recover, w: Draft) -> CallModel:
    larger = min(s.max_tokens * 2, w.deps.agent.max_tokens_ceiling)
    if larger > s.max_tokens:
        return CallModel(max_tokens=larger)  # drop the cut-off response and ask again with more room
    w.append(s.response.message)
    text = (
        f"This tool call was cut off at max_tokens ({s.max_tokens}) before its input was complete, "
        "so it was not run. Make the call again with a smaller input (for example, write a long "
        "file in several parts)."
    )
    message = Message("user", tuple(ToolResultBlock(c.id, text, True) for c in s.response.message.tool_uses))
    w.append(message)
    w.emit(ResultsSent(message))
    return CallModel()


async def compact(s: Compact, w: Draft) -> CallModel | Done:
    """Replace the history by the original task, a summary, and the last rounds (``compaction.py``)."""
    d = w.deps
    go_on = s.then or CallModel(compact=False)  # not again before this request, whatever happens here
    verdict = await w.deps.gate.compact(w.payload("PreCompact", trigger=s.trigger), w.report)
    before = compaction.estimate_tokens(w.history, d.system)
    if isinstance(verdict, Deny):
        w.compact_failures = MAX_COMPACT_FAILURES  # asked not to: no more automatic tries this run
        w.emit(Compacted(s.trigger, before, before, failed=verdict.message))
        return go_on
    window = context_window(d)
    request = compaction.summary_request(w.history, d.system, window, s.focus)
    failed = ""
    try:
        response = await w.deps.model.respond(request)
        w.usage = w.usage + response.usage  # budgets count the summary too
        summary = response.message.text.strip()
        if not summary:
            failed = "the summary came back empty"
    except HarnessError as e:
        failed = str(e)
    if failed:
        w.compact_failures += 1
        if w.compact_failures >= MAX_COMPACT_FAILURES:
            failed += f"; compaction failed {w.compact_failures} times in a row, so it will not be tried again"
        w.emit(Compacted(s.trigger, before, before, failed=failed))
        return go_on
    w.history, w.linted = compaction.compacted(w.history, summary, window), 0
    w.compactions, w.compact_failures = w.compactions + 1, 0
    w.emit(Compacted(s.trigger, before, compaction.estimate_tokens(w.history, d.system)))
    return go_on


async def run_node(s: RunNode, w: Draft) -> CallModel | RunNode | Done:
    """A node the user added (``nodes.py``): it proceeds, adds a note, or sends the model back to work."""
    node = next(n for n in w.deps.nodes if n.name == s.name)
    w.node_visits[s.name] = w.node_visits.get(s.name, 0) + 1
    result = await node.run(DraftContext(w))
    if isinstance(result, SendBack) and isinstance(s.then, Done):
        w.append(Message.user(result.text))
        return CallModel(tool_choice=result.tool_choice)
    if isinstance(result, (Note, SendBack)):  # a send-back before the first request is a note
        w.ask(result.text)
    return enter_node(w, node.at, s.then, after=s.name)


Then = TypeVar("Then", bound=CallModel | Done)


def enter_node(w: Draft, point: NodePoint, then: Then, after: str | None = None) -> RunNode | Then:
    """The next node added at ``point`` (after the node ``after``) that has runs left, else ``then``."""
    nodes = [n for n in w.deps.nodes if n.at == point]
    if after is not None:
        nodes = nodes[[n.name for n in nodes].index(after) + 1 :]
    node = next((n for n in nodes if w.node_visits.get(n.name, 0) < n.limit), None)
    return RunNode(node.name, then) if node is not None else then


def context_window(deps: Deps) -> int:
    """The window the history is kept within: the agent's setting, else the run's model's own
    (``pricing.window_of``)."""
    return deps.agent.context_window or window_of(deps.model)


def resume_approval(s: AwaitApproval, decisions: dict[str, Verdict]) -> RunTools:
    """The edge out of a pause: a verdict for each pending call, given by ``Run.resume``."""
    missing = [c.id for c in s.pending if c.id not in decisions or isinstance(decisions[c.id], Defer)]
    if missing:
        raise ValueError(f"no decision for pending call(s) {', '.join(missing)}")
    return RunTools(s.calls, {**s.verdicts, **decisions})

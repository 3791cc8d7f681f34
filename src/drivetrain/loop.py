"""The agent loop: one handler per state, ``step`` over a run's value, and the ``Run`` handle that drives it.

``step(value, deps) -> (value, events)``: each handler does its state's work on a draft of the
next value and returns the next state; its return annotation *is* the graph's edges. A ``Run``
can be iterated event by event (the manual loop) or driven to the end (``Agent.run``).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from drivetrain import budget, calls, compaction, loops
from drivetrain.approval import Approver, Defer, Deny, PendingCall, PermissionDecider, Verdict
from drivetrain.context import ContextSettings, request_view, session_outputs, window_of
from drivetrain.errors import HarnessError
from drivetrain.events import (
    ApprovalRequired, Compacted, Event, Finished, HookReported, LimitApproaching, LimitReached, LoopDetected,
    ModelResponded, ResultsSent, ToolCalled, ToolFinished,
)
from drivetrain.budget import Budget
from drivetrain.gate import Gate
from drivetrain.hooks import HookOutcome
from drivetrain.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage, ensure_valid
from drivetrain.models.base import Model, ModelRequest, ModelResponse
from drivetrain.nodes import POINTS, Node, NodeContext, Note, SendBack
from drivetrain.pricing import cost_usd
from drivetrain.profiles import FULL, Profile
from drivetrain.rewind import Checkpoints
from drivetrain.session import Loaded, SessionLog, close_open_calls, load
from drivetrain.state import (  # noqa: F401  (the states are part of this module's interface)
    AwaitApproval, CallModel, Compact, Done, Recover, RunNode, RunState, RunTools, State, SubmitPrompt,
)
from drivetrain.store import SessionStore
from drivetrain.tools.base import Tool, ToolContext, tool_spec

MAX_NUDGES = 2  # replies that only describe calls, sent back with a request to act
STUCK_LIMIT = 2
MAX_COMPACT_FAILURES = 2  # turns in a row with a refused repeat before the run asks for the answer
NUDGE = ("Nothing was run: your reply described tool calls in text instead of making them. "
         "Make the next call now.")
FINAL_ASK = {
    "turn_limit": "This is your last turn: no more tools can run. Answer now with the result of the task "
                  "as far as you got it: what you found or changed, and what is left undone.",
    "stuck": "You keep repeating a call that was refused, so no more tools will run. Answer now with the "
             "result of the task from what you already have, and say what is left undone.",
    "empty": "Your reply was empty. Answer now: give the result of the task in a few sentences.",
}
LIMIT_ASK = ("This run has reached its {limit} limit, so no more tools can run. Answer now: summarize what was "
             "done, what you found, and what is left undone.")
_NARRATED = re.compile(r'```(?:json|bash|sh|python)?\s*\n\s*(?:\{\s*"name"\s*:|\S)|<tool_call>|\{\s*"name"\s*:\s*"\w+"\s*,'
                       r'\s*"(?:arguments|parameters)"')


def narrates_calls(text: str) -> bool:
    """Does a final answer describe calls (a tool call in JSON, a command in a fence) instead of making them?"""
    return bool(_NARRATED.search(text))

# ---------------------------------------------------------------- result


@dataclass
class RunResult:
    subtype: str
    stop_reason: str | None
    result: str
    num_turns: int
    session_id: str
    duration_ms: int
    usage: Usage
    total_cost_usd: float | None
    history: list[Message]
    trajectory: list[str]
    note: str = ""
    pending: list[PendingCall] = field(default_factory=list)  # set when the run paused for approval

    @property
    def is_error(self) -> bool:
        return self.subtype not in ("success", "awaiting_approval")

    def to_json(self) -> dict:
        out = {
            "type": "result", "subtype": self.subtype, "is_error": self.is_error, "result": self.result,
            "stop_reason": self.stop_reason, "num_turns": self.num_turns, "session_id": self.session_id,
            "duration_ms": self.duration_ms, "usage": self.usage.to_wire(), "total_cost_usd": self.total_cost_usd,
        }
        if self.note:
            out["note"] = self.note
        if self.pending:
            out["pending"] = [p.to_json() for p in self.pending]
        return out


# ---------------------------------------------------------------- agent


@dataclass
class Agent:
    model: Model
    tools: list[Tool] = field(default_factory=list)
    system: str = ""
    max_turns: int | None = None
    max_tokens: int = 8192
    max_tokens_ceiling: int = 32768  # how far a cut-off tool call may raise max_tokens on retry
    max_continuations: int = 10  # consecutive pause_turn resends
    max_stop_refusals: int = 10  # consecutive Stop-hook refusals
    cwd: Path = field(default_factory=Path.cwd)
    policy: PermissionDecider | None = None  # None: every call is allowed
    approver: Approver | None = None  # None: what would ask is denied (non-interactive)
    hooks: Any = None  # drivetrain.hooks.Hooks
    observers: list[Callable[[Event], None]] = field(default_factory=list)  # see each event as it happens
    strict: bool = False  # raise on a history the linter rejects (tests) instead of repairing it
    profile: Profile = FULL  # the aids the loop gives a small model (profiles.py)
    budget: Budget = field(default_factory=Budget)  # limits besides max_turns: cost, tokens, wall time, calls
    context_window: int | None = None  # tokens; None: the model's own (local: its n_ctx; context.window_of)
    compact_at: float = 0.8  # compact the history when it reaches this fraction of the context window
    repeat_limit: int = 3  # the same call with the same result this many times: the next one is not run
    repeat_exempt: tuple[str, ...] = ()  # tools that may repeat (polling), never refused as loops
    store: SessionStore | None = None  # where each run is saved after every step (None: not saved)
    checkpoints: Checkpoints | None = None  # the workspace snapshotted before each prompt, for rewind
    nodes: list[Node] = field(default_factory=list)  # added to the loop at their points (nodes.py): Verify, Plan …
    context_settings: ContextSettings = ContextSettings()  # output caps and clearing old results (context.py)

    def start(self, prompt: str | None = None, history: list[Message] | None = None,
              session_id: str | None = None) -> Run:
        state: State = SubmitPrompt(prompt) if prompt is not None else CallModel()
        value = RunState(session_id or str(uuid.uuid4()), tuple(history or ()), state)
        run = Run(self, value, self._log(value.session_id))
        if run.log is not None:
            run.log.begin(cwd=str(self.cwd), model=self.model.name)
            run.log.save(RunState(value.session_id), value)
        return run

    def resume(self, session_id: str, prompt: str | None = None, *, fork: bool = False,
               fork_id: str | None = None) -> Run:
        """A saved session, repaired if it was cut short, continued (``fork``: as a new session, ``fork_id`` or a
        new id, the old one untouched). With ``prompt``, it is the next user turn; without, an interrupted run
        goes on where it stopped (a model call that never answered is made again)."""
        loaded = self._load(session_id, save_repair=not fork)
        value = loaded.value
        if prompt is not None:
            value = with_prompt(value, prompt)
        elif isinstance(value.state, Done):
            raise ValueError(f"session {session_id} has finished ({value.state.subtype}): give a prompt to continue it")
        if fork:
            value = value.evolve(session_id=fork_id or str(uuid.uuid4()))
        run = Run(self, value, self._log(value.session_id))
        assert run.log is not None
        if fork:
            run.log.begin(cwd=str(self.cwd), model=self.model.name, parent_id=session_id, forked_from_seq=loaded.seq)
            run.log.save(RunState(value.session_id), value, extra=[loaded.repaired] if loaded.repaired else [])
        else:
            run.log.loaded(loaded.value)
            if value is not loaded.value:
                run.log.save(loaded.value, value)
        return run

    def load(self, session_id: str) -> Run:
        """A saved session as it stands (repaired if it was cut short), e.g. to compact or inspect it."""
        loaded = self._load(session_id)
        run = Run(self, loaded.value, self._log(session_id))
        run.log.loaded(loaded.value)
        return run

    def _load(self, session_id: str, save_repair: bool = True) -> Loaded:
        if self.store is None:
            raise ValueError("a saved session needs a store: Agent(store=…)")
        return load(self.store, session_id, save_repair=save_repair)

    def _log(self, session_id: str) -> SessionLog | None:
        return SessionLog(self.store, session_id, self.model.name) if self.store is not None else None

    async def run(self, prompt: str | None = None, history: list[Message] | None = None) -> RunResult:
        return await self.start(prompt, history).finish()

    def run_sync(self, prompt: str | None = None, history: list[Message] | None = None) -> RunResult:
        return asyncio.run(self.run(prompt, history))

    def restore(self, snapshot: dict | RunState) -> Run:
        """A run saved with ``Run.snapshot()`` (or its value), possibly by another process, continued by this agent."""
        return Run(self, snapshot if isinstance(snapshot, RunState) else RunState.from_json(snapshot))

    @property
    def gate(self) -> Gate:
        return Gate(self.hooks, self.policy, self.approver)


@dataclass
class Deps:
    """What a step works with besides the run's value: the agent's settings, its model, tools and gate."""

    agent: Agent
    model: Model
    tools: dict[str, Tool]
    gate: Gate
    session_id: str = ""
    _context: ToolContext | None = None
    started: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, agent: Agent, session_id: str = "") -> Deps:
        names = [n.name for n in agent.nodes]
        if len(set(names)) != len(names) or any(n.at not in POINTS for n in agent.nodes):
            raise ValueError(f"each added node needs its own name and a point among {POINTS}: got "
                             f"{[(n.name, n.at) for n in agent.nodes]}")
        return cls(agent, agent.model, {t.name: t for t in agent.tools}, agent.gate, session_id)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def context(self) -> ToolContext:
        """What tools know of the run (made once per run: the policy's workspace roots resolved, the session's
        outputs folder named, which the policy lets read tools into)."""
        if self._context is None:
            policy = self.agent.policy
            roots = getattr(policy, "roots", None)  # a policy that confines files names the workspace
            hide = getattr(policy, "search_filter", None)  # and the files a search must skip
            self._context = ToolContext(cwd=self.agent.cwd, roots=roots(self.agent.cwd) if roots else [],
                                        read_filter=hide(self.agent.cwd) if hide else None,
                                        outputs=session_outputs(self.session_id) if self.session_id else None)
        return self._context


# ---------------------------------------------------------------- one step


class Draft:
    """The working copy of one step: the next value is drafted here, then frozen.

    The value the step was given is never changed. History edits go through ``append``, ``set_last``
    and ``pop`` so the draft knows how much of the already-checked history is still unchanged.
    """

    _COPIED = ("num_turns", "prompts", "usage", "continuations", "stop_refusals", "nudges", "stuck_turns",
               "hook_stop", "tool_calls", "turn_marks", "error_streak", "warned", "compactions", "compact_failures")  # immutable: copied as they are

    def __init__(self, value: RunState, deps: Deps, emit: Callable[[Event], None] | None):
        self.value, self.deps, self._emit = value, deps, emit
        self.history = list(value.history)
        self.linted = value.linted if value.linted_of is value.history else 0  # a history replaced: check it all
        for name in self._COPIED:
            setattr(self, name, getattr(value, name))
        self.trajectory = list(value.trajectory)
        self.seen_calls = dict(value.seen_calls)
        self.blocked = dict(value.blocked)
        self.node_visits = dict(value.node_visits)
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)
        if self._emit is not None:
            self._emit(event)

    def append(self, message: Message) -> None:
        self.history.append(message)

    def set_last(self, message: Message) -> None:
        self.history[-1] = message
        self.linted = min(self.linted, len(self.history) - 1)

    def pop(self) -> Message:
        message = self.history.pop()
        self.linted = min(self.linted, len(self.history))
        return message

    def payload(self, event: str, **fields: Any) -> dict:
        return {"session_id": self.value.session_id, "cwd": str(self.deps.agent.cwd), "hook_event_name": event,
                **fields}

    def report(self, event: str, outcome: HookOutcome) -> None:
        if outcome.stop:
            self.hook_stop = f"A {event} hook stopped the run: {outcome.stop_reason or 'no reason given'}"
        if outcome.errors:
            self.emit(HookReported(event, tuple(outcome.errors)))

    def ask(self, text: str) -> None:
        """Tell the model something: added to the last user message (after its results), or as a new one."""
        last = self.history[-1] if self.history else None
        if last is not None and last.role == "user":
            self.set_last(Message("user", (*last.content, TextBlock(text))))
        else:
            self.append(Message.user(text))

    def freeze(self, state: State) -> RunState:
        v = self.value
        path = v.path or (type(v.state).__name__,)
        if state is not v.state:
            path += (type(state).__name__,)
        history = tuple(self.history)
        return replace(v, history=history, state=state, path=path, trajectory=tuple(self.trajectory),
                       seen_calls=self.seen_calls, blocked=self.blocked, node_visits=self.node_visits,
                       linted=self.linted, linted_of=history,
                       **{name: getattr(self, name) for name in self._COPIED})


async def step(value: RunState, deps: Deps, emit: Callable[[Event], None] | None = None
               ) -> tuple[RunState, list[Event]]:
    """Do the current state's work; return the next value and what happened. ``value`` is not changed.

    Cancelled while tools run (Ctrl-C), every open call is answered as interrupted and the
    ``CancelledError`` carries that valid value as ``run_state`` before it propagates.
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
            except asyncio.CancelledError as e:
                e.run_state = w.freeze(CallModel())  # type: ignore[attr-defined]
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
    if not isinstance(value.state, Done):
        why = "the user moved on without approving it" if isinstance(value.state, AwaitApproval) else "interrupted"
        value, _ = close_open_calls(value.evolve(state=CallModel()), why=why)
        value = value.evolve(state=Done("interrupted"))
    return value.evolve(state=next_prompt(value.state, prompt), path=value.path + ("SubmitPrompt",))


# ---------------------------------------------------------------- the handlers: each return annotation is an edge


async def submit_prompt(s: SubmitPrompt, w: Draft) -> CallModel | RunNode | Done:
    admitted = await w.deps.gate.admit(w.payload("UserPromptSubmit", prompt=s.prompt), w.report)
    if isinstance(admitted.verdict, Deny):
        return Done("prompt_blocked", None, admitted.verdict.message)
    w.prompts += 1
    blocks = (TextBlock(s.prompt), *(TextBlock(c) for c in admitted.context))
    last = w.history[-1] if w.history else None
    if last is not None and last.role == "user":  # e.g. resumed after an interruption: one user turn, not two
        w.set_last(Message("user", (*last.content, *blocks)))
    else:
        w.append(Message("user", blocks))
    return enter_node(w, "start", CallModel())


async def call_model(s: CallModel, w: Draft) -> RunTools | Recover | CallModel | Compact | RunNode | Done:
    a, p = w.deps.agent, w.deps.agent.profile
    if not s.final:
        measured = budget.measures(a.budget, a.max_turns, turns=w.num_turns, usage=w.usage, model=a.model.name,
                                   elapsed_s=w.deps.elapsed(), tool_calls=w.tool_calls)
        if hit := budget.reached(measured):
            w.emit(LimitReached(*hit))
            if not a.budget.wrap_up:
                return Done(budget.SUBTYPES[hit[0]], w.trajectory[-1] if w.trajectory else None,
                            note=budget.describe(*hit))
            s = CallModel(s.max_tokens, final=hit[0])  # one last request, without tools, for a summary
        for m in budget.approaching(measured, a.budget.soft, w.warned):
            w.warned += (m[0],)
            w.emit(LimitApproaching(*m))
    if p.final and not s.final and a.max_turns is not None and w.num_turns == a.max_turns - 1 > 0:
        s = CallModel(s.max_tokens, final="turn_limit")
    if s.final:
        w.ask(FINAL_ASK.get(s.final) or LIMIT_ASK.format(limit=budget.NAMES[s.final]))
    checked = ensure_valid(w.history, strict=a.strict, start=max(w.linted - 1, 0))
    if checked is not w.history:  # repaired
        w.history, w.linted = checked, 0
    w.linted = len(w.history)  # the last message is checked again next time: its answer may be new
    max_tokens = s.max_tokens or a.max_tokens
    choice = "none" if s.final else s.tool_choice or ("any" if p.act and w.num_turns == 0 else None)
    view = request_view(w.history, a, w.deps.model, w.value.session_id)
    if not s.final and s.compact and w.compact_failures < MAX_COMPACT_FAILURES and \
            compaction.estimate_tokens(view, a.system) >= a.compact_at * context_window(a):
        return Compact("auto")  # what would be sent (old outputs already cleared) still nears the window
    request = ModelRequest(view, a.system, [tool_spec(t) for t in a.tools], max_tokens, tool_choice=choice,
                           forbidden_calls=calls.forbidden(w.seen_calls) if p.exclude else ())
    try:
        response = await w.deps.model.respond(request)
    except HarnessError as e:
        return Done("error_during_execution", None, str(e))
    w.num_turns += 1
    w.usage = w.usage + response.usage
    w.trajectory.append(response.stop_reason)
    w.emit(ModelResponded(w.num_turns, response))
    if s.final:
        return final_answer(s.final, response, w)
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
            return Done("error_max_continuations", reason, response.message.text,
                        note=f"The server paused {w.continuations + 1} times in a row; gave up.")
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
    if agent.profile.act and w.nudges < MAX_NUDGES and narrates_calls(text):
        w.nudges += 1
        w.ask(NUDGE)
        return CallModel(tool_choice="any")
    if agent.profile.final and not text.strip() and reason == "end_turn":
        w.pop()  # it says nothing, and an empty text block is not valid history
        return CallModel(final="empty")
    return Done("success", reason, text, note)


def final_answer(why: str, response: ModelResponse, w: Draft) -> Done:
    """The answer to the last request, made without tools: the run ends with it either way."""
    kept = tuple(b for b in response.content if not isinstance(b, ToolUseBlock)
                 and not (isinstance(b, TextBlock) and not b.text.strip()))
    w.append(Message("assistant", kept or (TextBlock("(no answer)"),)))
    text = response.message.text
    if why == "turn_limit":
        return Done("error_max_turns", response.stop_reason, text,
                    note=f"Reached the turn limit ({w.deps.agent.max_turns}); the last turn asked for the answer.")
    if why == "stuck":
        return Done("error_loop_detected", response.stop_reason, text,
                    note="The model kept repeating refused calls; the last turn asked for the answer.")
    if why in budget.SUBTYPES:
        return Done(budget.SUBTYPES[why], response.stop_reason, text,
                    note=f"Reached the {budget.NAMES[why]} limit; the last request asked for a summary.")
    return Done("success", response.stop_reason, text)


async def stop_gate(done: Done, w: Draft) -> CallModel | RunNode | Done:
    verdict = await w.deps.gate.stop(w.payload("Stop", stop_hook_active=w.stop_refusals > 0,
                                               last_assistant_message=done.result), w.report)
    if not isinstance(verdict, Deny) or w.stop_refusals >= w.deps.agent.max_stop_refusals:
        return enter_node(w, "end_turn", done)
    w.stop_refusals += 1
    w.append(Message.user(f"A Stop hook refused to let you stop: {verdict.message}"))
    return CallModel()


async def run_tools(s: RunTools, w: Draft) -> AwaitApproval | CallModel | Done:
    stuck_before = w.stuck_turns
    running = False
    finished: dict[str, tuple[ToolResultBlock, float, dict | None]] = {}

    async def run_one(call: ToolUseBlock) -> tuple[ToolResultBlock, float, dict | None]:
        outcome = await calls.execute(w, call, verdicts[call.id])
        finished[call.id] = outcome
        # as each call ends, not when the last one does: its outcome is on record even if the process dies
        # while the others still run, so a repair can say it ran to the end
        w.emit(ToolFinished(call, *outcome))
        return outcome

    try:
        verdicts = await calls.decide_all(w, s.calls, s.verdicts)
        if any(isinstance(v, Defer) for v in verdicts.values()):
            decided = {k: v for k, v in verdicts.items() if not isinstance(v, Defer)}
            return AwaitApproval(s.calls, decided)
        running = True
        outcomes = await asyncio.gather(*(run_one(c) for c in s.calls), return_exceptions=True)
    except asyncio.CancelledError:  # interrupted (Ctrl-C): answer every call so the history stays valid
        text = ("Interrupted by the user before this call finished." if running else
                "Interrupted by the user while the calls were being approved: this call never ran, so it had "
                "no effect.")
        message = Message("user", tuple(finished[c.id][0] if c.id in finished else ToolResultBlock(c.id, text, True)
                                        for c in s.calls))  # a call that had ended keeps its real result
        w.append(message)
        w.emit(ResultsSent(message))
        raise
    failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
    results = []
    for call, outcome in zip(s.calls, outcomes):
        if call.id in finished:  # ran (an observer may have failed on its ToolFinished: that is the failure)
            outcome = finished[call.id]
        elif isinstance(outcome, BaseException):
            outcome = (ToolResultBlock(call.id, f"Not run: the harness failed ({outcome}).", True), 0.0, None)
            w.emit(ToolFinished(call, *outcome))
        results.append(outcome[0])
    if w.stuck_turns == stuck_before:
        w.stuck_turns = 0  # no call of this turn was a refused repeat
    results = loops.after_turn(w, s.calls, results)
    message = Message("user", tuple(results))
    w.append(message)  # always answered, even on failure: the history stays valid
    w.emit(ResultsSent(message))
    if failure is not None:
        if not isinstance(failure, Exception):
            raise failure  # cancellation, KeyboardInterrupt: after the history is made valid
        return Done("error_during_execution", None, str(failure))
    if w.stuck_turns >= STUCK_LIMIT or w.error_streak[1] >= loops.SAME_ERROR_END:
        pattern = "same_error" if w.stuck_turns < STUCK_LIMIT else "repeat"
        w.emit(LoopDetected(pattern, "ended", "the model went on repeating after being told"))
        if w.deps.agent.profile.final:
            return CallModel(final="stuck")
        return Done("error_loop_detected", "tool_use", note="Stopped: the model kept repeating itself "
                    "(the same refused call, or the same error) after being told.")
    return CallModel()


def recover(s: Recover, w: Draft) -> CallModel:
    larger = min(s.max_tokens * 2, w.deps.agent.max_tokens_ceiling)
    if larger > s.max_tokens:
        return CallModel(max_tokens=larger)  # drop the cut-off response and ask again with more room
    w.append(s.response.message)
    text = (f"This tool call was cut off at max_tokens ({s.max_tokens}) before its input was complete, "
            "so it was not run. Make the call again with a smaller input (for example, write a long "
            "file in several parts).")
    message = Message("user", tuple(ToolResultBlock(c.id, text, True) for c in s.response.message.tool_uses))
    w.append(message)
    w.emit(ResultsSent(message))
    return CallModel()


async def compact(s: Compact, w: Draft) -> CallModel | Done:
    """Replace the history by the original task, a summary, and the last rounds (``compaction.py``)."""
    a = w.deps.agent
    go_on = s.then or CallModel(compact=False)  # not again before this request, whatever happens here
    verdict = await w.deps.gate.compact(w.payload("PreCompact", trigger=s.trigger), w.report)
    before = compaction.estimate_tokens(w.history, a.system)
    if isinstance(verdict, Deny):
        w.compact_failures = MAX_COMPACT_FAILURES  # asked not to: no more automatic tries this run
        w.emit(Compacted(s.trigger, before, before, failed=verdict.message))
        return go_on
    window = context_window(a)
    request = compaction.summary_request(w.history, a.system, window)
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
    w.emit(Compacted(s.trigger, before, compaction.estimate_tokens(w.history, a.system)))
    return go_on


async def run_node(s: RunNode, w: Draft) -> CallModel | RunNode | Done:
    """A node the user added (``nodes.py``): it proceeds, adds a note, or sends the model back to work."""
    node = next(n for n in w.deps.agent.nodes if n.name == s.name)
    w.node_visits[s.name] = w.node_visits.get(s.name, 0) + 1
    result = await node.run(NodeContext(w))
    if isinstance(result, SendBack) and isinstance(s.then, Done):
        w.append(Message.user(result.text))
        return CallModel()
    if isinstance(result, (Note, SendBack)):  # a send-back before the first request is a note
        w.ask(result.text)
    return enter_node(w, node.at, s.then, after=s.name)


def enter_node(w: Draft, point: str, then: State, after: str | None = None) -> State:
    """The next node added at ``point`` (after the node ``after``) that has runs left, else ``then``."""
    nodes = [n for n in w.deps.agent.nodes if n.at == point]
    if after is not None:
        nodes = nodes[[n.name for n in nodes].index(after) + 1:]
    node = next((n for n in nodes if w.node_visits.get(n.name, 0) < n.limit), None)
    return RunNode(node.name, then) if node is not None else then


def context_window(agent: Agent) -> int:
    """The window the history is kept within: the agent's setting, else the model's own (``context.window_of``)."""
    return agent.context_window or window_of(agent.model)


def resume_approval(s: AwaitApproval, decisions: dict[str, Verdict]) -> RunTools:
    """The edge out of a pause: a verdict for each pending call, given by ``Run.resume``."""
    missing = [c.id for c in s.pending if c.id not in decisions or isinstance(decisions[c.id], Defer)]
    if missing:
        raise ValueError(f"no decision for pending call(s) {', '.join(missing)}")
    return RunTools(s.calls, {**s.verdicts, **decisions})


# ---------------------------------------------------------------- the handle


class Run:
    """The friendly handle around a run's value: step it, iterate its events, pause and resume it."""

    def __init__(self, agent: Agent, value: RunState, log: SessionLog | None = None):
        self.agent = agent
        self.value = value
        self.log = log  # the session log each step is saved to
        self.deps = Deps.of(agent, value.session_id)
        self.cancelled_by = "cancel"  # what a cancellation is recorded as (the CLI says which signal)
        self._started = time.monotonic()
        self._result: RunResult | None = self._finish(value.state) if isinstance(value.state, Done) else None

    # -- driving

    async def step(self) -> list[Event]:
        """Do the current state's work and move to the next state. Returns what happened."""
        if isinstance(self.value.state, Done):
            if self._result is not None:
                return []
            self._result = self._finish(self.value.state)
            if self.log is not None:
                self.log.write("result", **{k: v for k, v in self._result.to_json().items() if k != "type"})
            event = Finished(self._result)
            self._observe(event)
            return [event]
        before = self.value
        extra = []
        if isinstance(before.state, SubmitPrompt) and self.agent.checkpoints is not None:
            extra.append(await self._checkpoint(before))
        try:
            self.value, events = await step(before, self.deps, self._observe)
        except asyncio.CancelledError as e:
            self.value = getattr(e, "run_state", before)  # every open call answered as interrupted
            if self.log is not None:
                self.log.save(before, self.value, extra=[{"kind": "interrupted", "signal": self.cancelled_by,
                                                           "during": type(before.state).__name__}])
            raise
        if self.log is not None:
            self.log.save(before, self.value, events, extra=extra)
        return events

    async def _checkpoint(self, value: RunState) -> dict:
        """The workspace as it is before this prompt, with every file Write/Edit touched so far (``rewind.py``)."""
        touched = {c.input.get("file_path") for m in value.history for c in m.tool_uses
                   if c.name in ("Write", "Edit") and isinstance(c.input.get("file_path"), str)}
        prompt = value.prompts + 1
        cp = self.agent.checkpoints
        try:
            commit = await asyncio.to_thread(cp.snapshot, value.session_id, prompt,
                                             [self.agent.cwd / t for t in sorted(touched)])
        except HarnessError as e:  # no git, say: the run goes on without a checkpoint, and the log says why
            return {"kind": "checkpoint", "prompt": prompt, "ref": None, "error": str(e)}
        return {"kind": "checkpoint", "prompt": prompt, "ref": cp.ref(value.session_id, prompt), "commit": commit}

    def _observe(self, event: Event) -> None:
        for observe in self.agent.observers:
            observe(event)

    async def __aiter__(self) -> AsyncIterator[Event]:
        while not self.done and not self.paused:
            for event in await self.step():
                yield event
        if self.paused:
            for event in await self.step():  # announce what is pending
                yield event

    async def finish(self) -> RunResult:
        """Drive to the end (or to a pause for approval) and return the result."""
        async for _ in self:
            pass
        return self.result

    def resume(self, decisions: dict[str, Verdict]) -> None:
        """Give a verdict for each pending call; the run then continues with the next step."""
        s = self.value.state
        if not isinstance(s, AwaitApproval):
            raise RuntimeError(f"nothing to resume: the run is in {type(s).__name__}")
        nxt = resume_approval(s, decisions)
        self.value = self.value.evolve(state=nxt, path=(self.value.path or ("AwaitApproval",)) + ("RunTools",))

    def submit(self, prompt: str) -> None:
        """The next user prompt: the same run, one more turn (after it ended, paused or was interrupted)."""
        self.value = with_prompt(self.value, prompt)
        self._result = None
        self._started = time.monotonic()

    async def compact(self) -> list[Event]:
        """Compact the history now (``/compact``): the summary replaces it; a finished run stays finished."""
        s = self.value.state
        if not isinstance(s, (Done, CallModel)):
            raise RuntimeError(f"cannot compact in the middle of a step (the run is in {type(s).__name__})")
        self.value = self.value.evolve(state=Compact("manual", s if isinstance(s, Done) else None),
                                       path=self.value.path + ("Compact",))
        self._result = None
        events = await self.step()
        if isinstance(self.value.state, Done):
            self._result = self._finish(self.value.state)
        return events

    def snapshot(self) -> dict:
        """The run as JSON-ready data (history, state, counters); ``Agent.restore`` continues it."""
        return self.value.to_json()

    # -- the value, read-only

    @property
    def state(self) -> State:
        return self.value.state

    @property
    def history(self) -> list[Message]:
        return list(self.value.history)

    @property
    def session_id(self) -> str:
        return self.value.session_id

    @property
    def num_turns(self) -> int:
        return self.value.num_turns

    @property
    def usage(self) -> Usage:
        return self.value.usage

    @property
    def trajectory(self) -> list[str]:
        return list(self.value.trajectory)

    @property
    def path(self) -> list[str]:
        return list(self.value.path)

    @property
    def done(self) -> bool:
        return self._result is not None

    @property
    def paused(self) -> bool:
        return isinstance(self.value.state, AwaitApproval)

    @property
    def pending(self) -> list[PendingCall]:
        s = self.value.state
        if not isinstance(s, AwaitApproval):
            return []
        return [PendingCall(c.id, c.name, c.input) for c in s.pending]

    @property
    def result(self) -> RunResult:
        if self.paused:
            return self._finish(Done("awaiting_approval", "tool_use"))
        if self._result is None:
            raise RuntimeError("the run has not finished")
        return self._result

    def _finish(self, s: Done) -> RunResult:
        v = self.value
        return RunResult(
            subtype=s.subtype, stop_reason=s.stop_reason, result=s.result, num_turns=v.num_turns,
            session_id=v.session_id, duration_ms=int((time.monotonic() - self._started) * 1000),
            usage=v.usage, total_cost_usd=cost_usd(self.agent.model.name, v.usage),
            history=list(v.history), trajectory=list(v.trajectory), note=s.note, pending=self.pending,
        )



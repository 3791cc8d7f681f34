"""The agent loop: a closed set of states, one handler per state, and the run that walks them.

Each handler does its state's work and returns the next state; its return
annotation *is* the graph's edges. A ``Run`` can be iterated event by event (the
manual loop) or driven to the end (``Agent.run``).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Union

from drivetrain import calls
from drivetrain.approval import Approver, Defer, PendingCall, PermissionDecider, Verdict
from drivetrain.context import model_view
from drivetrain.errors import HarnessError
from drivetrain.events import (
    ApprovalRequired, Event, Finished, HookReported, ModelResponded, ResultsSent, ToolCalled, ToolFinished,
)
from drivetrain.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage, ensure_valid
from drivetrain.models.base import Model, ModelRequest, ModelResponse
from drivetrain.pricing import cost_usd
from drivetrain.profiles import FULL, Profile
from drivetrain.tools.base import Tool, ToolContext, tool_spec

# ---------------------------------------------------------------- states


@dataclass(frozen=True)
class SubmitPrompt:
    prompt: str


@dataclass(frozen=True)
class CallModel:
    max_tokens: int | None = None  # raised above the default while recovering from a cut-off tool call
    tool_choice: str | None = None  # "any": the model must act (it described calls instead of making them)
    final: str = ""  # why this is the last request, made without tools for the answer ("" when it is not)


@dataclass(frozen=True)
class RunTools:
    calls: tuple[ToolUseBlock, ...]
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # decided before a pause


@dataclass(frozen=True)
class AwaitApproval:
    calls: tuple[ToolUseBlock, ...]
    verdicts: dict[str, Verdict]  # the calls already decided; the others are pending

    @property
    def pending(self) -> list[ToolUseBlock]:
        return [c for c in self.calls if c.id not in self.verdicts]


@dataclass(frozen=True)
class Recover:
    response: ModelResponse  # cut off at max_tokens inside a tool_use: never executed
    max_tokens: int


@dataclass(frozen=True)
class Done:
    subtype: str  # success | error_max_turns | error_max_continuations | error_during_execution | prompt_blocked
    stop_reason: str | None = None
    result: str = ""
    note: str = ""


State = Union[SubmitPrompt, CallModel, RunTools, AwaitApproval, Recover, Done]

MAX_NUDGES = 2  # replies that only describe calls, sent back with a request to act
STUCK_LIMIT = 2  # turns in a row with a refused repeat before the run asks for the answer
NUDGE = ("Nothing was run: your reply described tool calls in text instead of making them. "
         "Make the next call now.")
FINAL_ASK = {
    "turn_limit": "This is your last turn: no more tools can run. Answer now with the result of the task "
                  "as far as you got it: what you found or changed, and what is left undone.",
    "stuck": "You keep repeating a call that was refused, so no more tools will run. Answer now with the "
             "result of the task from what you already have, and say what is left undone.",
    "empty": "Your reply was empty. Answer now: give the result of the task in a few sentences.",
}
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

    def start(self, prompt: str | None = None, history: list[Message] | None = None,
              session_id: str | None = None) -> Run:
        run = Run(self, list(history or []), session_id)
        if prompt is not None:
            run.state = SubmitPrompt(prompt)
        return run

    async def run(self, prompt: str | None = None, history: list[Message] | None = None) -> RunResult:
        return await self.start(prompt, history).finish()

    def run_sync(self, prompt: str | None = None, history: list[Message] | None = None) -> RunResult:
        return asyncio.run(self.run(prompt, history))

    def restore(self, snapshot: dict) -> Run:
        """A run saved with ``Run.snapshot()``, possibly by another process, continued by this agent."""
        from drivetrain.checkpoint import restore
        return restore(self, snapshot)


class Run:
    def __init__(self, agent: Agent, history: list[Message], session_id: str | None = None):
        self.agent = agent
        self.history = history
        self.state: State = CallModel()
        self.session_id = session_id or str(uuid.uuid4())
        self.num_turns = 0
        self.usage = Usage()
        self.trajectory: list[str] = []
        self.continuations = 0
        self.stop_refusals = 0
        self.tools = {t.name: t for t in agent.tools}
        self.seen_calls: dict[str, tuple[int, str, int]] = {}  # call -> (first turn, result digest, times)
        self.stuck_turns = 0  # turns in a row whose calls included a refused repeat
        self.nudges = 0  # replies that described calls instead of making them, sent back
        self._started = time.monotonic()
        self._result: RunResult | None = None
        self._sent: list[Message] = []  # the history as last sent (and linted)
        self._events: list[Event] = []
        self._hook_stop: str | None = None
        self.path: list[str] = []  # every state this run has been in, in order: the walk through the graph

    # -- driving

    async def step(self) -> list[Event]:
        """Do the current state's work and move to the next state. Returns what happened."""
        self._events = []
        before = self.state
        if not self.path:
            self.path.append(type(before).__name__)
        match self.state:
            case SubmitPrompt() as s:
                self.state = await self._submit_prompt(s)
            case CallModel() as s:
                self.state = await self._call_model(s)
            case RunTools() as s:
                self.state = await self._run_tools(s)
            case Recover() as s:
                self.state = self._recover(s)
            case AwaitApproval() as s:
                self.emit(ApprovalRequired(tuple(self.pending)))
            case Done() as s:
                if self._result is None:
                    self._result = self._finish(s)
                    self.emit(Finished(self._result))
        if self._hook_stop is not None and not isinstance(self.state, Done):
            # a hook said {"continue": false}: stop after this step, so the history it left stays valid
            self.state = Done("stopped_by_hook", None, self._hook_stop)
        if self.state is not before:
            self.path.append(type(self.state).__name__)
        return self._events

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
        if not isinstance(self.state, AwaitApproval):
            raise RuntimeError(f"nothing to resume: the run is in {type(self.state).__name__}")
        missing = [c.id for c in self.state.pending if c.id not in decisions or isinstance(decisions[c.id], Defer)]
        if missing:
            raise ValueError(f"no decision for pending call(s) {', '.join(missing)}")
        self.state = RunTools(self.state.calls, {**self.state.verdicts, **decisions})
        self.path.append("RunTools")

    def snapshot(self) -> dict:
        """The run as JSON-ready data (history, state, counters); ``Agent.restore`` continues it."""
        from drivetrain.checkpoint import snapshot
        return snapshot(self)

    def emit(self, event: Event) -> None:
        self._events.append(event)
        for observe in self.agent.observers:
            observe(event)

    @property
    def done(self) -> bool:
        return self._result is not None

    @property
    def paused(self) -> bool:
        return isinstance(self.state, AwaitApproval)

    @property
    def pending(self) -> list[PendingCall]:
        if not isinstance(self.state, AwaitApproval):
            return []
        return [PendingCall(c.id, c.name, c.input) for c in self.state.pending]

    @property
    def result(self) -> RunResult:
        if self.paused:
            return self._finish(Done("awaiting_approval", "tool_use"))
        if self._result is None:
            raise RuntimeError("the run has not finished")
        return self._result

    # -- states

    async def _submit_prompt(self, s: SubmitPrompt) -> CallModel | Done:
        blocks: list = [TextBlock(s.prompt)]
        if self.agent.hooks:
            out = await self.agent.hooks.run("UserPromptSubmit", self.hook_payload("UserPromptSubmit", prompt=s.prompt))
            self.report_hooks("UserPromptSubmit", out)
            if out.block:
                return Done("prompt_blocked", None, f"A UserPromptSubmit hook blocked the prompt: {out.reason}")
            blocks += [TextBlock(c) for c in out.additional_context if c]
        self.history.append(Message("user", tuple(blocks)))
        return CallModel()

    async def _call_model(self, s: CallModel) -> RunTools | Recover | CallModel | Done:
        a, p = self.agent, self.agent.profile
        if a.max_turns is not None and self.num_turns >= a.max_turns:
            return Done("error_max_turns", self.trajectory[-1] if self.trajectory else None,
                        note=f"Stopped after reaching the turn limit ({a.max_turns}).")
        if p.final and not s.final and a.max_turns is not None and self.num_turns == a.max_turns - 1 > 0:
            s = CallModel(s.max_tokens, final="turn_limit")
        if s.final:
            self._ask(FINAL_ASK[s.final])
        self.history = ensure_valid(self.history, strict=a.strict, start=self._unchanged_prefix())
        self._sent = list(self.history)
        max_tokens = s.max_tokens or a.max_tokens
        choice = "none" if s.final else s.tool_choice or ("any" if p.act and self.num_turns == 0 else None)
        request = ModelRequest(model_view(self.history, collapse=p.collapse, shorten=p.context), a.system,
                               [tool_spec(t) for t in a.tools], max_tokens, tool_choice=choice,
                               forbidden_calls=calls.forbidden(self) if p.exclude else ())
        try:
            response = await a.model.respond(request)
        except HarnessError as e:
            return Done("error_during_execution", None, str(e))
        self.num_turns += 1
        self.usage = self.usage + response.usage
        self.trajectory.append(response.stop_reason)
        self.emit(ModelResponded(self.num_turns, response))
        if s.final:
            return self._final(s.final, response)
        next_state = self._after_response(response, max_tokens)
        if isinstance(next_state, Done) and next_state.subtype == "success" and a.hooks:
            return await self._stop_hooks(next_state)
        return next_state

    def _after_response(self, response: ModelResponse, max_tokens: int) -> RunTools | Recover | CallModel | Done:
        reason = response.stop_reason
        if reason == "max_tokens" and response.content and isinstance(response.content[-1], ToolUseBlock):
            return Recover(response, max_tokens)
        self.history.append(response.message)
        if reason == "pause_turn":
            if self.continuations >= self.agent.max_continuations:
                return Done("error_max_continuations", reason, response.message.text,
                            note=f"The server paused {self.continuations + 1} times in a row; gave up.")
            self.continuations += 1
            return CallModel()  # resend as is: the paused content is the last message, no new user text
        self.continuations = 0
        if reason == "tool_use" and response.message.tool_uses:
            for call in response.message.tool_uses:
                self.emit(ToolCalled(call))
            return RunTools(tuple(response.message.tool_uses))
        note = f"The answer was cut off at max_tokens ({max_tokens})." if reason == "max_tokens" else ""
        text = response.message.text
        if self.agent.profile.act and self.nudges < MAX_NUDGES and narrates_calls(text):
            self.nudges += 1
            self._ask(NUDGE)
            return CallModel(tool_choice="any")
        if self.agent.profile.final and not text.strip() and reason == "end_turn":
            self.history.pop()  # it says nothing, and an empty text block is not valid history
            return CallModel(final="empty")
        return Done("success", reason, text, note)

    def _final(self, why: str, response: ModelResponse) -> Done:
        """The answer to the last request, made without tools: the run ends with it either way."""
        kept = tuple(b for b in response.content if not isinstance(b, ToolUseBlock)
                     and not (isinstance(b, TextBlock) and not b.text.strip()))
        self.history.append(Message("assistant", kept or (TextBlock("(no answer)"),)))
        text = response.message.text
        if why == "turn_limit":
            return Done("error_max_turns", response.stop_reason, text,
                        note=f"Reached the turn limit ({self.agent.max_turns}); the last turn asked for the answer.")
        return Done("success", response.stop_reason, text)

    def _ask(self, text: str) -> None:
        """Tell the model something: added to the last user message (after its results), or as a new one."""
        last = self.history[-1] if self.history else None
        if last is not None and last.role == "user":
            self.history[-1] = Message("user", (*last.content, TextBlock(text)))
        else:
            self.history.append(Message.user(text))

    async def _stop_hooks(self, done: Done) -> CallModel | Done:
        out = await self.agent.hooks.run("Stop", self.hook_payload("Stop", stop_hook_active=self.stop_refusals > 0,
                                                                   last_assistant_message=done.result))
        self.report_hooks("Stop", out)
        if not out.block or self.stop_refusals >= self.agent.max_stop_refusals:
            return done
        self.stop_refusals += 1
        self.history.append(Message.user(f"A Stop hook refused to let you stop: {out.reason or 'keep working'}"))
        return CallModel()

    async def _run_tools(self, s: RunTools) -> AwaitApproval | CallModel | Done:
        stuck_before = self.stuck_turns
        verdicts = await calls.decide_all(self, s.calls, s.verdicts)
        if any(isinstance(v, Defer) for v in verdicts.values()):
            decided = {k: v for k, v in verdicts.items() if not isinstance(v, Defer)}
            return AwaitApproval(s.calls, decided)
        try:
            outcomes = await asyncio.gather(*(calls.execute(self, c, verdicts[c.id]) for c in s.calls),
                                            return_exceptions=True)
        except asyncio.CancelledError:  # interrupted (Ctrl-C): answer every call so the history stays valid
            text = "Interrupted by the user before this call finished."
            self.history.append(Message("user", tuple(ToolResultBlock(c.id, text, True) for c in s.calls)))
            self.state = CallModel()
            raise
        failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
        results = []
        for call, outcome in zip(s.calls, outcomes):
            if isinstance(outcome, BaseException):
                outcome = (ToolResultBlock(call.id, f"Not run: the harness failed ({outcome}).", True), 0.0, None)
            block, ms, meta = outcome
            results.append(block)
            self.emit(ToolFinished(call, block, ms, meta))
        if self.stuck_turns == stuck_before:
            self.stuck_turns = 0  # no call of this turn was a refused repeat
        message = Message("user", tuple(results))
        self.history.append(message)  # always answered, even on failure: the history stays valid
        self.emit(ResultsSent(message))
        if failure is not None:
            if not isinstance(failure, Exception):
                raise failure  # cancellation, KeyboardInterrupt: after the history is made valid
            return Done("error_during_execution", None, str(failure))
        if self.agent.profile.final and self.stuck_turns >= STUCK_LIMIT:
            return CallModel(final="stuck")
        return CallModel()

    def _recover(self, s: Recover) -> CallModel:
        larger = min(s.max_tokens * 2, self.agent.max_tokens_ceiling)
        if larger > s.max_tokens:
            return CallModel(max_tokens=larger)  # drop the cut-off response and ask again with more room
        self.history.append(s.response.message)
        text = (f"This tool call was cut off at max_tokens ({s.max_tokens}) before its input was complete, "
                "so it was not run. Make the call again with a smaller input (for example, write a long "
                "file in several parts).")
        message = Message("user", tuple(ToolResultBlock(c.id, text, True) for c in s.response.message.tool_uses))
        self.history.append(message)
        self.emit(ResultsSent(message))
        return CallModel()

    # -- helpers

    def tool_context(self) -> ToolContext:
        roots = getattr(self.agent.policy, "roots", None)  # a policy that confines files names the workspace
        hide = getattr(self.agent.policy, "search_filter", None)  # and the files a search must skip
        return ToolContext(cwd=self.agent.cwd, roots=roots(self.agent.cwd) if roots else [],
                           read_filter=hide(self.agent.cwd) if hide else None)

    def hook_payload(self, event: str, **fields: Any) -> dict:
        return {"session_id": self.session_id, "cwd": str(self.agent.cwd), "hook_event_name": event, **fields}

    def report_hooks(self, event: str, outcome: Any) -> None:
        if outcome.stop:
            self._hook_stop = f"A {event} hook stopped the run: {outcome.stop_reason or 'no reason given'}"
        if outcome.errors:
            self.emit(HookReported(event, tuple(outcome.errors)))

    def _unchanged_prefix(self) -> int:
        """How many messages were linted before and are still the very same objects.

        The last of them is linted again: its successor (which answers its tool_uses) may be new.
        """
        n = 0
        for old, new in zip(self._sent, self.history):
            if old is not new:
                break
            n += 1
        return max(n - 1, 0)

    def _finish(self, s: Done) -> RunResult:
        return RunResult(
            subtype=s.subtype, stop_reason=s.stop_reason, result=s.result, num_turns=self.num_turns,
            session_id=self.session_id, duration_ms=int((time.monotonic() - self._started) * 1000),
            usage=self.usage, total_cost_usd=cost_usd(self.agent.model.name, self.usage),
            history=self.history, trajectory=self.trajectory, note=s.note, pending=self.pending,
        )

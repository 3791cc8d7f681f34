"""The agent loop: a closed set of states, one handler per state, and the run that walks them.

Each handler does its state's work and returns the next state; its return
annotation *is* the graph's edges (``graph.mermaid()`` draws them from here).
A ``Run`` can be iterated event by event (the manual loop) or driven to the end
(``Agent.run``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Union

from drivetrain.errors import HarnessError
from drivetrain.messages import Message, ToolResultBlock, ToolUseBlock, Usage, ensure_valid
from drivetrain.models.base import Model, ModelRequest, ModelResponse
from drivetrain.pricing import cost_usd
from drivetrain.tools.base import Tool, ToolContext, ToolError, ToolResult, tool_spec

# ---------------------------------------------------------------- states


@dataclass(frozen=True)
class CallModel:
    max_tokens: int | None = None  # raised above the default while recovering from a cut-off tool call


@dataclass(frozen=True)
class RunTools:
    response: ModelResponse


@dataclass(frozen=True)
class Recover:
    response: ModelResponse  # cut off at max_tokens inside a tool_use: never executed
    max_tokens: int


@dataclass(frozen=True)
class Done:
    subtype: str  # success | error_max_turns | error_max_continuations | error_during_execution
    stop_reason: str | None = None
    result: str = ""
    note: str = ""


State = Union[CallModel, RunTools, Recover, Done]

# ---------------------------------------------------------------- events


@dataclass(frozen=True)
class ModelResponded:
    turn: int
    response: ModelResponse


@dataclass(frozen=True)
class ToolCalled:
    call: ToolUseBlock


@dataclass(frozen=True)
class ToolFinished:
    call: ToolUseBlock
    result: ToolResultBlock
    duration_ms: float


@dataclass(frozen=True)
class ResultsSent:
    message: Message  # the user message carrying every tool_result of a turn


@dataclass(frozen=True)
class Finished:
    result: RunResult


Event = Union[ModelResponded, ToolCalled, ToolFinished, ResultsSent, Finished]

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

    @property
    def is_error(self) -> bool:
        return self.subtype != "success"

    def to_json(self) -> dict:
        return {
            "type": "result", "subtype": self.subtype, "is_error": self.is_error, "result": self.result,
            "stop_reason": self.stop_reason, "num_turns": self.num_turns, "session_id": self.session_id,
            "duration_ms": self.duration_ms, "usage": self.usage.to_wire(), "total_cost_usd": self.total_cost_usd,
            **({"note": self.note} if self.note else {}),
        }


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
    cwd: Path = field(default_factory=Path.cwd)
    strict: bool = False  # raise on a history the linter rejects (tests) instead of repairing it

    def start(self, prompt: str | None = None, history: list[Message] | None = None) -> Run:
        messages = list(history or [])
        if prompt is not None:
            messages.append(Message.user(prompt))
        return Run(self, messages)

    async def run(self, prompt: str | None = None, history: list[Message] | None = None) -> RunResult:
        run = self.start(prompt, history)
        async for _ in run:
            pass
        return run.result

    def run_sync(self, prompt: str | None = None, history: list[Message] | None = None) -> RunResult:
        return asyncio.run(self.run(prompt, history))


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
        self.tools = {t.name: t for t in agent.tools}
        self._started = time.monotonic()
        self._result: RunResult | None = None
        self._sent: list[Message] = []  # the history as last sent (and linted)

    # -- driving

    async def step(self) -> list[Event]:
        """Do the current state's work and move to the next state. Returns what happened."""
        events: list[Event] = []
        match self.state:
            case CallModel() as s:
                self.state = await self._call_model(s, events)
            case RunTools() as s:
                self.state = await self._run_tools(s, events)
            case Recover() as s:
                self.state = self._recover(s, events)
            case Done() as s:
                if self._result is None:
                    self._result = self._finish(s)
                    events.append(Finished(self._result))
        return events

    async def __aiter__(self) -> AsyncIterator[Event]:
        while self._result is None:
            for event in await self.step():
                yield event

    @property
    def done(self) -> bool:
        return self._result is not None

    @property
    def result(self) -> RunResult:
        if self._result is None:
            raise RuntimeError("the run has not finished")
        return self._result

    # -- states

    async def _call_model(self, s: CallModel, events: list[Event]) -> RunTools | Recover | CallModel | Done:
        a = self.agent
        if a.max_turns is not None and self.num_turns >= a.max_turns:
            return Done("error_max_turns", self.trajectory[-1] if self.trajectory else None,
                        note=f"Stopped after reaching the turn limit ({a.max_turns}).")
        self.history = ensure_valid(self.history, strict=a.strict, start=self._unchanged_prefix())
        self._sent = list(self.history)
        max_tokens = s.max_tokens or a.max_tokens
        request = ModelRequest(self.history, a.system, [tool_spec(t) for t in a.tools], max_tokens)
        try:
            response = await a.model.respond(request)
        except HarnessError as e:
            return Done("error_during_execution", None, str(e))
        self.num_turns += 1
        self.usage = self.usage + response.usage
        self.trajectory.append(response.stop_reason)
        events.append(ModelResponded(self.num_turns, response))
        return self._after_response(response, max_tokens)

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
            return RunTools(response)
        note = f"The answer was cut off at max_tokens ({max_tokens})." if reason == "max_tokens" else ""
        return Done("success", reason, response.message.text, note)

    async def _run_tools(self, s: RunTools, events: list[Event]) -> CallModel | Done:
        calls = s.response.message.tool_uses
        events.extend(ToolCalled(c) for c in calls)
        outcomes = await asyncio.gather(*(self._execute(c) for c in calls), return_exceptions=True)
        failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
        results = []
        for call, outcome in zip(calls, outcomes):
            if isinstance(outcome, BaseException):
                outcome = (ToolResultBlock(call.id, f"Not run: the harness failed ({outcome}).", True), 0.0)
            block, ms = outcome
            results.append(block)
            events.append(ToolFinished(call, block, ms))
        message = Message("user", tuple(results))
        self.history.append(message)  # always answered, even on failure: the history stays valid
        events.append(ResultsSent(message))
        if failure is not None:
            if not isinstance(failure, Exception):
                raise failure  # cancellation, KeyboardInterrupt: after the history is made valid
            return Done("error_during_execution", None, str(failure))
        return CallModel()

    def _recover(self, s: Recover, events: list[Event]) -> CallModel:
        larger = min(s.max_tokens * 2, self.agent.max_tokens_ceiling)
        if larger > s.max_tokens:
            return CallModel(max_tokens=larger)  # drop the cut-off response and ask again with more room
        self.history.append(s.response.message)
        text = (f"This tool call was cut off at max_tokens ({s.max_tokens}) before its input was complete, "
                "so it was not run. Make the call again with a smaller input (for example, write a long "
                "file in several parts).")
        message = Message("user", tuple(ToolResultBlock(c.id, text, True) for c in s.response.message.tool_uses))
        self.history.append(message)
        events.append(ResultsSent(message))
        return CallModel()

    # -- helpers

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

    async def _execute(self, call: ToolUseBlock) -> tuple[ToolResultBlock, float]:
        started = time.monotonic()
        result = await self._call_tool(call)
        content = result.content if result.content not in ("", []) else "(no output)"
        block = ToolResultBlock(call.id, content, result.is_error)
        return block, (time.monotonic() - started) * 1000

    async def _call_tool(self, call: ToolUseBlock) -> ToolResult:
        tool = self.tools.get(call.name)
        if tool is None:
            return ToolResult(f"No tool named {call.name!r}. Available tools: {', '.join(self.tools)}.", True)
        try:
            return await tool.call(call.input, ToolContext(cwd=self.agent.cwd))
        except HarnessError:
            raise
        except Exception as e:  # tool failures are data: the model sees the real error
            text = str(e) or type(e).__name__
            return ToolResult(text if isinstance(e, ToolError) else f"{type(e).__name__}: {text}", True)

    def _finish(self, s: Done) -> RunResult:
        return RunResult(
            subtype=s.subtype, stop_reason=s.stop_reason, result=s.result, num_turns=self.num_turns,
            session_id=self.session_id, duration_ms=int((time.monotonic() - self._started) * 1000),
            usage=self.usage, total_cost_usd=cost_usd(self.agent.model.name, self.usage),
            history=self.history, trajectory=self.trajectory, note=s.note,
        )

"""``Agent`` (what runs work with: model, tools, control, limits, store, nodes) and ``Run``, the handle around a
run's value: step it, iterate its events, pause and resume it, continue it with another prompt.

Saving is one line in ``Run.step``: each step's new value goes to the session log (``sessions/log.py``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from drivetrain.control.approval import Approver, PendingCall, PermissionDecider, Verdict
from drivetrain.control.gate import Gate
from drivetrain.control.hooks import HookRunner
from drivetrain.errors import HarnessError
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.budget import Budget
from drivetrain.loop.context import ContextSettings
from drivetrain.loop.draft import Deps
from drivetrain.loop.events import Event, Finished
from drivetrain.loop.nodes import Node
from drivetrain.loop.profile import FULL, Profile
from drivetrain.loop.result import RunResult
from drivetrain.loop.state import AwaitApproval, CallModel, Compact, Done, RunState, State, SubmitPrompt
from drivetrain.loop.step import resume_approval, step, with_prompt
from drivetrain.messages import Message, StopReason, Usage
from drivetrain.models.base import Model
from drivetrain.pricing import cost_usd
from drivetrain.sessions.log import Loaded, SessionLog, load
from drivetrain.sessions.rewind import Checkpoints
from drivetrain.sessions.store import SessionStore
from drivetrain.telemetry.run import RunTelemetry, Telemetry
from drivetrain.tools.base import Tool

# ---------------------------------------------------------------- agent


@dataclass
class Agent:
    """What runs work with: a model, tools, a system prompt, control (policy, approver, hooks), limits, a session
    store and nodes added to the loop. One agent serves any number of runs, one after another.

    ``run``/``run_sync`` drive a prompt to the end and return a ``RunResult``; ``start`` returns a ``Run`` to step
    or iterate; ``resume`` continues a saved session; ``restore`` continues a snapshot. ``profile`` says how much
    the loop helps the model (``FULL``: not at all; ``drivetrain.small.profile.SMALL`` for small local models).
    """

    model: Model
    tools: list[Tool] = field(default_factory=list)
    system: str = ""  # "": the profile's own (the plain loop: none)
    max_turns: int | None = None
    max_tokens: int = 8192
    max_tokens_ceiling: int = 32768  # how far a cut-off tool call may raise max_tokens on retry
    max_continuations: int = 10  # consecutive pause_turn resends
    max_stop_refusals: int = 10  # consecutive Stop-hook refusals
    cwd: Path = field(default_factory=Path.cwd)
    policy: PermissionDecider | None = None  # None: every call is allowed
    approver: Approver | None = None  # None: what would ask is denied (non-interactive)
    hooks: HookRunner | None = None  # drivetrain.control.hooks.Hooks, or anything with its run()
    observers: list[Callable[[Event], None]] = field(default_factory=list)  # see each event as it happens
    strict: bool = False  # raise on a history the linter rejects (tests) instead of repairing it
    profile: Profile = FULL  # the aids the loop gives the model (loop/profile.py; small.profile.SMALL)
    budget: Budget = field(default_factory=Budget)  # limits besides max_turns: cost, tokens, wall time, calls
    context_window: int | None = None  # tokens; None: the model's own (local: its n_ctx; context.window_of)
    compact_at: float = 0.8  # compact the history when it reaches this fraction of the context window
    repeat_limit: int = 3  # the same call with the same result this many times: the next one is not run
    repeat_exempt: tuple[str, ...] = ()  # tools that may repeat (polling), never refused as loops
    store: SessionStore | None = None  # where each run is saved after every step (None: not saved)
    checkpoints: Checkpoints | None = None  # the workspace snapshotted before each prompt, for rewind
    nodes: list[Node] = field(default_factory=list)  # added to the loop at their points (nodes.py): Verify, Plan …
    context_settings: ContextSettings = field(
        default_factory=ContextSettings
    )  # output caps and clearing old results (context.py)
    # spans, metrics and events (telemetry/run.py); None: the global OpenTelemetry providers, if any are set
    telemetry: Telemetry | None = None

    def start(
        self, prompt: str | None = None, history: list[Message] | None = None, session_id: str | None = None
    ) -> Run:
        state: State = SubmitPrompt(prompt) if prompt is not None else CallModel()
        value = RunState(session_id or str(uuid.uuid4()), tuple(history or ()), state)
        run = Run(self, value, self._log(value.session_id))
        if run.log is not None:
            run.log.begin(cwd=str(self.cwd), model=self.model.name)
            run.log.save(RunState(value.session_id), value)
        if run.telemetry is not None:
            run.telemetry.session_started()
        return run

    def resume(
        self, session_id: str, prompt: str | None = None, *, fork: bool = False, fork_id: str | None = None
    ) -> Run:
        """A saved session, repaired if it was cut short, continued (``fork``: as a new session, ``fork_id`` or a
        new id, the old one untouched). With ``prompt``, it is the next user turn; without, an interrupted run
        goes on where it stopped (a model call that never answered is made again)."""
        loaded = self._load(session_id, save_repair=not fork)
        value = loaded.value
        if prompt is not None:
            value = with_prompt(value, prompt)
        elif isinstance(value.state, Done):
            raise ValueError(f"session {session_id} has finished ({value.state.subtype}): give a prompt to continue it")
        elif isinstance(value.state, CallModel) and not value.history:
            # only its first record was saved (cut short before its prompt): there is nothing to ask the model
            raise ValueError(f"session {session_id} was cut short before its prompt was saved: give a prompt")
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
        assert run.log is not None  # a saved session has a store
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

    def restore(self, snapshot: JsonObject | RunState) -> Run:
        """A run saved with ``Run.snapshot()`` (or its value), possibly by another process, continued by this agent."""
        return Run(self, snapshot if isinstance(snapshot, RunState) else RunState.from_json(snapshot))

    @property
    def gate(self) -> Gate:
        return Gate(self.hooks, self.policy, self.approver)


# ---------------------------------------------------------------- the handle


class Run:
    """The friendly handle around a run's value: step it, iterate its events, pause and resume it."""

    def __init__(self, agent: Agent, value: RunState, log: SessionLog | None = None):
        self.agent = agent
        self.value = value
        self.log = log  # the session log each step is saved to
        self.deps = Deps.of(agent, value.session_id)
        self.telemetry = RunTelemetry.of(agent.telemetry, value.session_id, agent.model.name)
        if self.telemetry is not None:
            self.telemetry.equip(self.deps)  # each request and call a span of its own
        self.deps.begin_invocation(value)  # the limits count from here: a resumed session gets them whole
        self.cancelled_by = "cancel"  # what a cancellation is recorded as (the CLI says which signal)
        self._started = time.monotonic()
        self._result: RunResult | None = self._finish(value.state) if isinstance(value.state, Done) else None

    # -- driving

    async def step(self) -> list[Event]:
        """Do the current state's work and move to the next state. Returns what happened."""
        state, t = self.value.state, self.telemetry
        if isinstance(state, Done):
            if self._result is not None:
                return []
            self._result = self._finish(state)
            self._record(self._result)
            event = Finished(self._result)
            self._observe(event)
            if t is not None:
                t.end("finished", self._result)
            return [event]
        if t is None or isinstance(state, AwaitApproval):  # a pause is announced outside any invocation's span
            return await self._step()
        with t.step(state):
            events = await self._step()
        if self.paused:
            t.end("paused")
        return events

    async def _step(self) -> list[Event]:
        before = self.value
        extra: list[JsonObject] = []
        if isinstance(before.state, SubmitPrompt) and (checkpoints := self.agent.checkpoints) is not None:
            extra.append(await self._checkpoint(before, checkpoints))
        answered: list[RunState] = []  # the value with every open call answered as interrupted, if tools ran
        try:
            self.value, events = await step(before, self.deps, self._observe, answered.append)
        except asyncio.CancelledError:
            self.value = answered[-1] if answered else before
            if self.log is not None:
                self.log.save(
                    before,
                    self.value,
                    extra=[{"kind": "interrupted", "signal": self.cancelled_by, "during": type(before.state).__name__}],
                )
            raise
        if self.log is not None:
            self.log.save(before, self.value, events, extra=extra)
        return events

    async def checkpoint(self) -> JsonObject | None:
        """Snapshot the workspace for the prompt about to run, as a step of ``SubmitPrompt`` does, for a caller that
        does the prompt's work itself (several attempts of it): the record is written to the session log."""
        if not isinstance(self.value.state, SubmitPrompt) or (cp := self.agent.checkpoints) is None:
            return None
        record = await self._checkpoint(self.value, cp)
        if self.log is not None:
            self.log.write("checkpoint", **{k: v for k, v in record.items() if k != "kind"})
        return record

    async def _checkpoint(self, value: RunState, cp: Checkpoints) -> JsonObject:
        """The workspace as it is before this prompt, with every file Write/Edit touched so far (``rewind.py``)."""
        touched = {
            path
            for m in value.history
            for c in m.tool_uses
            if c.name in ("Write", "Edit") and isinstance(path := c.input.get("file_path"), str)
        }
        prompt = value.prompts + 1
        try:
            commit = await asyncio.to_thread(
                cp.snapshot, value.session_id, prompt, [self.agent.cwd / t for t in sorted(touched)]
            )
        except HarnessError as e:  # no git, say: the run goes on without a checkpoint, and the log says why
            return {"kind": "checkpoint", "prompt": prompt, "ref": None, "error": str(e)}
        return {"kind": "checkpoint", "prompt": prompt, "ref": cp.ref(value.session_id, prompt), "commit": commit}

    def _observe(self, event: Event) -> None:
        if self.telemetry is not None:
            self.telemetry.observe(event)
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
        self.deps.begin_invocation(self.value)
        self.value = with_prompt(self.value, prompt)
        self._result = None
        self._started = time.monotonic()

    async def compact(self, focus: str = "") -> list[Event]:
        """Compact the history now (``/compact [focus]``): the summary replaces it; a finished run stays finished."""
        s = self.value.state
        if not isinstance(s, (Done, CallModel)):
            raise RuntimeError(f"cannot compact in the middle of a step (the run is in {type(s).__name__})")
        self.value = self.value.evolve(
            state=Compact("manual", s if isinstance(s, Done) else None, focus), path=self.value.path + ("Compact",)
        )
        self._result = None
        events = await self.step()
        if isinstance(self.value.state, Done):
            self._result = self._finish(self.value.state)
            if self.telemetry is not None:
                self.telemetry.end("finished", self._result)
        return events

    def snapshot(self) -> JsonObject:
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
    def trajectory(self) -> list[StopReason]:
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

    def left(self, why: str) -> RunResult:
        """The run as it stands, as a result, when its driver leaves it before it ends (an attempt abandoned for a
        fresh one): ``error_during_execution``, its note ``why``, and so recorded in its session log (which ends
        there, not "running"). Its state is not changed."""
        result = self._finish(Done("error_during_execution", note=why))
        self._record(result)
        return result

    def _record(self, result: RunResult) -> None:
        if self.log is not None:
            self.log.write("result", **{k: v for k, v in result.to_json().items() if k != "type"})

    def _finish(self, s: Done) -> RunResult:
        v = self.value
        return RunResult(
            subtype=s.subtype,
            stop_reason=s.stop_reason,
            result=s.result,
            num_turns=v.num_turns,
            session_id=v.session_id,
            duration_ms=int((time.monotonic() - self._started) * 1000),
            usage=v.usage,
            total_cost_usd=cost_usd(self.agent.model.name, v.usage),
            history=list(v.history),
            trajectory=list(v.trajectory),
            note=s.note,
            pending=self.pending,
        )

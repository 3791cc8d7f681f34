"""Applying a ``Plan``: every ready step as its own agent loop, independent steps at once, state saved after each node.

``apply_plan(plan, make_agent, state_path=…)`` starts each step whose dependencies are done (at most
``concurrency`` at a time) with ``make_agent(step)`` — an Agent with that step's tools and budget
(``plan.step_agent`` narrows one) — and a first user message holding the task, the step's goal
verbatim and the final answers of the steps it depends on. After the model ends its turn the step's
``check`` runs in the workspace; a step that fails (its check, or its run) escalates in a fixed order:

1. **retry**: the same history goes on, with the failure (the command and its output) as the next
   user message;
2. **replan**: the model is asked, without tools, for a replacement of the step and its dependants;
3. **ask**: ``ask(step, failure)`` — the person — may give guidance for one more try; without an
   ``ask`` (``-p``), or when it gives none, the step fails, its dependants are skipped, the plan fails.

The state (the plan as it now stands, each node's status, answer, timings, attempts and escalations)
is written after every change as JSON, atomically (temp file, fsync, rename). ``resume=True``
continues from it: done nodes are not run again; every other node starts over.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Literal

from opentelemetry import trace

from drivetrain.agent import Agent
from drivetrain.host.procs import run_command
from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.loop.events import Event
from drivetrain.loop.result import RunResult
from drivetrain.messages import Usage
from drivetrain.plans.plan import Plan, PlanError, Step, StepStatus, replan
from drivetrain.pricing import cost_usd

STATE_VERSION = 1
CHECK_TIMEOUT_S = 300.0
OUTPUT_CHARS = 4000  # of a failed check's output, sent back to the model (the tail: where errors are)

Ask = Callable[[Step, str], "Awaitable[str | None] | str | None"]
Escalation = Literal["retry", "replan", "ask"]  # what a failing step tries next, in this order
NodeOutcome = Literal["done", "failed", "replanned"]  # how one step's run ended
PlanRunStatus = Literal["running", "interrupted", "success", "failed"]  # the state file's "status"
PlanEventKind = Literal[
    "node_started", "node_finished", "session", "check", "escalation", "replanned", "plan_finished", "agent"
]


@dataclass
class Node:
    """One step's state in a plan run."""

    status: StepStatus = "pending"
    result: str = ""  # the step's final answer
    error: str = ""  # why it failed (or was skipped)
    attempts: int = 0  # agent runs made for it
    escalations: list[Escalation] = field(default_factory=list)  # in the order taken
    started_at: float | None = None  # wall clock, seconds
    finished_at: float | None = None
    num_turns: int = 0
    usage: dict[str, int] = field(default_factory=dict)  # summed over its runs, wire form
    cost_usd: float | None = None
    session_ids: list[str] = field(default_factory=list)
    check: dict[str, str | int] | None = None  # the last check: command, exit_code, output (tail)
    replanned: bool = False  # made by a re-plan: it is not re-planned again

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.finished_at or time.time()) - self.started_at

    def to_json(self) -> JsonObject:
        return {**asdict(self), "duration_s": self.duration_s}

    @classmethod
    def from_json(cls, data: JsonObject) -> Node:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class PlanEvent:
    """What the scheduler reports: ``node_started``, ``node_finished``, ``session``, ``check``, ``escalation``,
    ``replanned``, ``plan_finished``; ``agent``: an event of a step's loop (``event``)."""

    kind: PlanEventKind
    step_id: str | None = None
    data: JsonObject = field(default_factory=dict)  # written out as is (stream-json)
    event: Event | None = None


@dataclass
class PlanResult:
    plan: Plan  # as it ran (re-planned parts included)
    nodes: dict[str, Node]
    run_id: str
    state_path: Path
    duration_ms: int

    @property
    def subtype(self) -> Literal["success", "error_plan_failed"]:
        return "success" if all(n.status == "done" for n in self.nodes.values()) else "error_plan_failed"

    @property
    def is_error(self) -> bool:
        return self.subtype != "success"

    @property
    def result(self) -> str:
        """The final answers of the steps nothing depends on; or what failed."""
        if self.is_error:
            bad = [
                f"step {i} {n.status}: {n.error}" for i, n in self.nodes.items() if n.status in ("failed", "pending")
            ]
            skipped = [i for i, n in self.nodes.items() if n.status == "skipped"]
            return "\n".join(bad + ([f"skipped (after a failed step): {', '.join(skipped)}"] if skipped else []))
        needed = {d for s in self.plan.steps for d in s.depends_on}
        sinks = [s.id for s in self.plan.steps if s.id not in needed]
        if len(sinks) == 1:
            return self.nodes[sinks[0]].result
        return "\n\n".join(f"## {i}\n{self.nodes[i].result}" for i in sinks)

    def statuses(self) -> dict[str, StepStatus]:
        return {i: n.status for i, n in self.nodes.items()}

    def timings(self) -> dict[str, float | None]:
        return {i: n.duration_s for i, n in self.nodes.items()}

    def mermaid(self) -> str:
        return self.plan.mermaid(self.statuses(), self.timings())

    @property
    def usage(self) -> Usage:
        total = Usage()
        for n in self.nodes.values():
            total = total + Usage(**n.usage)
        return total

    def to_json(self) -> JsonObject:
        costs = [n.cost_usd for n in self.nodes.values() if n.cost_usd is not None]
        return {
            "type": "result",
            "subtype": self.subtype,
            "is_error": self.is_error,
            "result": self.result,
            "num_turns": sum(n.num_turns for n in self.nodes.values()),
            "duration_ms": self.duration_ms,
            "usage": self.usage.to_wire(),
            "total_cost_usd": round(sum(costs), 6) if costs else None,
            "run_id": self.run_id,
            "state_path": str(self.state_path),
            "nodes": {i: n.to_json() for i, n in self.nodes.items()},
            "mermaid": self.mermaid(),
        }


async def apply_plan(
    plan: Plan,
    make_agent: Callable[[Step], Agent],
    *,
    state_path: str | Path,
    concurrency: int = 2,
    on_event: Callable[[PlanEvent], None] | None = None,
    resume: bool = False,
    ask: Ask | None = None,
    replan_failed: bool = True,
    check_timeout: float = CHECK_TIMEOUT_S,
    tracer_provider: trace.TracerProvider | None = None,
) -> PlanResult:
    """Run ``plan`` to the end (see the module's notes); cancelling it saves the state for ``resume``.
    Traced (``tracer_provider``, else OpenTelemetry's global one): a ``plan`` span, a ``plan_step`` span per step
    under it, and each step's runs under that."""
    if problems := plan.validate():
        raise PlanError("the plan is not valid:\n" + "\n".join(f"  - {p}" for p in problems))
    scheduler = Scheduler(
        plan, make_agent, Path(state_path), max(1, concurrency), on_event, ask, replan_failed, check_timeout
    )
    scheduler.tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("drivetrain")
    if resume:
        scheduler.load()
    return await scheduler.run()


class Scheduler:
    def __init__(
        self,
        plan: Plan,
        make_agent: Callable[[Step], Agent],
        state_path: Path,
        concurrency: int,
        on_event: Callable[[PlanEvent], None] | None,
        ask: Ask | None,
        replan_failed: bool,
        check_timeout: float,
    ):
        self.source, self.plan = plan, plan
        self.make_agent, self.state_path, self.concurrency = make_agent, state_path, concurrency
        self.on_event, self.ask, self.replan_failed, self.check_timeout = on_event, ask, replan_failed, check_timeout
        self.nodes = {s.id: Node() for s in plan.steps}
        self.run_id = str(uuid.uuid4())
        self.started_at = time.time()
        self.tracer = trace.get_tracer("drivetrain")

    # -- the state file

    def load(self) -> None:
        """Continue the run saved at ``state_path``: its plan (with any re-planned parts) and its done nodes."""
        if not self.state_path.exists():
            raise PlanError(f"nothing to resume: no saved plan run at {self.state_path}")
        data = json.loads(self.state_path.read_text())
        if data.get("version") != STATE_VERSION:
            raise PlanError(f"{self.state_path}: plan state version {data.get('version')!r} is not supported")
        if Plan.from_json(data["source"]).to_json() != self.source.to_json():
            raise PlanError(
                f"the plan has changed since the run saved at {self.state_path} started; "
                "run it afresh instead of resuming"
            )
        self.plan = Plan.from_json(data["plan"])
        self.run_id, self.started_at = data["run_id"], data["started_at"]
        saved = {i: Node.from_json(n) for i, n in data["nodes"].items()}
        # done stays done; a node that was running (the process died), failed or skipped starts over
        self.nodes = {
            s.id: saved[s.id]
            if s.id in saved and saved[s.id].status == "done"
            else Node(replanned=saved[s.id].replanned if s.id in saved else False)
            for s in self.plan.steps
        }

    def save(self, status: PlanRunStatus = "running") -> None:
        data = {
            "version": STATE_VERSION,
            "kind": "drivetrain.plan_run",
            "run_id": self.run_id,
            "status": status,
            "started_at": self.started_at,
            "updated_at": time.time(),
            "source": self.source.to_json(),
            "plan": self.plan.to_json(),
            "nodes": {i: n.to_json() for i, n in self.nodes.items()},
        }
        write_atomic(self.state_path, json.dumps(data, indent=1))

    # -- driving

    def emit(
        self, kind: PlanEventKind, step_id: str | None = None, event: Event | None = None, **data: JsonValue
    ) -> None:
        if self.on_event is not None:
            self.on_event(PlanEvent(kind, step_id, data, event))

    async def run(self) -> PlanResult:
        attrs: dict[str, str | int] = {
            "drivetrain.plan.run_id": self.run_id,
            "drivetrain.plan.steps": len(self.plan.steps),
        }
        with self.tracer.start_as_current_span("plan", attributes=attrs) as span:  # the steps' tasks inherit it
            result = await self._run()
            span.set_attribute("drivetrain.plan.subtype", result.subtype)
            if result.is_error:
                span.set_status(trace.Status(trace.StatusCode.ERROR, result.subtype))
            return result

    async def _run(self) -> PlanResult:
        self.save()
        tasks: dict[asyncio.Task[NodeOutcome], str] = {}
        try:
            while True:
                self._skip_after_failures()
                running = set(tasks.values())
                done = {i for i, n in self.nodes.items() if n.status == "done"}
                for step in self.plan.ready(done):
                    if len(tasks) >= self.concurrency:
                        break
                    if step.id in running or self.nodes[step.id].status != "pending":
                        continue
                    node = self.nodes[step.id]
                    node.status, node.started_at, node.finished_at = "running", time.time(), None
                    self.save()
                    self.emit("node_started", step.id, goal=step.goal)
                    tasks[asyncio.create_task(self._node(step), name=f"plan step {step.id}")] = step.id
                if not tasks:
                    break
                finished, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    self._settle(tasks.pop(task), task)
                self.save()
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for step_id in tasks.values():  # interrupted: they start over on resume
                self.nodes[step_id] = replace(Node(), replanned=self.nodes[step_id].replanned)
            self.save("interrupted")
            raise
        result = PlanResult(
            self.plan, self.nodes, self.run_id, self.state_path, int((time.time() - self.started_at) * 1000)
        )
        self.save("success" if not result.is_error else "failed")
        self.emit("plan_finished", None, subtype=result.subtype, mermaid=result.mermaid())
        return result

    def _settle(self, step_id: str, task: asyncio.Task[NodeOutcome]) -> None:
        if (error := task.exception()) is None and task.result() == "replanned":
            return  # its replacement steps are pending now
        node = self.nodes[step_id]
        if error is not None:  # a harness failure: the step fails, the rest of the plan goes on
            node.status, node.error = "failed", f"{type(error).__name__}: {error}"
        node.finished_at = node.finished_at or time.time()
        self.emit(
            "node_finished",
            step_id,
            status=node.status,
            result=node.result,
            error=node.error,
            duration_s=node.duration_s,
            attempts=node.attempts,
        )

    def _skip_after_failures(self) -> None:
        for _ in self.plan.steps:  # plan order is not dependency order: once per step covers the longest chain
            for step in self.plan.steps:
                node = self.nodes[step.id]
                bad = [d for d in step.depends_on if self.nodes[d].status in ("failed", "skipped")]
                if node.status == "pending" and bad:
                    node.status, node.error = "skipped", f"depends on {', '.join(bad)}, which did not finish"

    # -- one node

    def _agent(self, step: Step) -> Agent:
        agent = self.make_agent(step)
        observers = list(agent.observers)
        if self.on_event is not None:
            step_id = step.id

            def observe(e: Event) -> None:
                self.emit("agent", step_id, event=e)

            observers.append(observe)
        return replace(agent, observers=observers)  # a copy of its own

    def seed(self, step: Step) -> str:
        """The step's first user message: its goal verbatim, then the final answers of what it depends on."""
        parts = [step.goal]
        if self.plan.task:
            parts.append(f"(This is step {step.id} of a plan for the task: {self.plan.task})")
        for d in step.depends_on:
            parts.append(f"Result of step {d} ({self.plan.step(d).goal}):\n{self.nodes[d].result}")
        if step.check:
            parts.append(f"When you end your turn, this check is run in the workspace and must exit 0: {step.check}")
        return "\n\n".join(parts)

    async def _node(self, step: Step) -> NodeOutcome:
        """One step, in a span of its own that its runs nest under."""
        attrs = {"drivetrain.plan.step.id": step.id, "drivetrain.plan.step.depends_on": list(step.depends_on)}
        with self.tracer.start_as_current_span(f"plan_step {step.id}", attributes=attrs) as span:
            outcome = await self._step(step)
            span.set_attribute("drivetrain.plan.step.outcome", outcome)
            node = self.nodes.get(step.id)  # a replanned step is gone from the plan now
            if node is not None:
                span.set_attributes(
                    {
                        "drivetrain.plan.step.attempts": node.attempts,
                        "drivetrain.plan.step.escalations": list(node.escalations),
                        "session.id": node.session_ids[-1] if node.session_ids else "",
                    }
                )
            if outcome == "failed" and node is not None:
                span.set_status(trace.Status(trace.StatusCode.ERROR, node.error[:500]))
            return outcome

    async def _step(self, step: Step) -> NodeOutcome:
        """Run one step as one session: a retry or the person's guidance goes on in the same history."""
        node, agent = self.nodes[step.id], self._agent(step)
        replans = self.replan_failed and not node.replanned
        levels: list[Escalation] = ["retry", "replan", "ask"] if replans else ["retry", "ask"]
        run = agent.start(self.seed(step))
        node.session_ids.append(run.session_id)
        self.emit("session", step.id, session_id=run.session_id)
        while True:
            node.attempts += 1
            result = await run.finish()
            self._account(node, agent, result)
            failure = await self._failure(step, agent, result)
            if failure is None:
                node.status, node.result, node.error = "done", result.result, ""
                return "done"
            while True:  # the next escalation that applies
                if not levels:
                    node.status, node.error, node.result = "failed", failure, result.result
                    return "failed"
                level = levels.pop(0)
                node.escalations.append(level)
                self.emit("escalation", step.id, level=level, failure=failure)
                self.save()
                if level == "replan":
                    if await self._replan(step, agent, failure):
                        return "replanned"
                    continue
                guidance: str | None = ""
                if level == "ask":
                    guidance = await self._ask(step, failure)
                    if guidance is None:
                        node.status, node.error, node.result = "failed", failure, result.result
                        return "failed"
                break
            # each try gets the step's own budget again: the limits count from the prompt (loop/budget.py)
            run.submit(
                f"The step is not done yet. {failure}\n\nFix this, then end your turn."
                + (f"\n\nGuidance from the person: {guidance}" if guidance else "")
            )

    def _account(self, node: Node, agent: Agent, result: RunResult) -> None:
        node.num_turns, node.usage = result.num_turns, result.usage.to_wire()  # the session's totals so far
        node.cost_usd = cost_usd(agent.model.name, result.usage)

    async def _failure(self, step: Step, agent: Agent, result: RunResult) -> str | None:
        """Why the step is not done (its run did not succeed, or its check failed); None: it is done."""
        if result.subtype != "success":
            why = result.note or result.result or "no answer"
            return f"The step's run ended with {result.subtype}: {why}"
        if step.check is None:
            return None
        code, output = await run_check(step.check, agent.cwd, self.check_timeout)
        tail = output[-OUTPUT_CHARS:]
        self.nodes[step.id].check = {"command": step.check, "exit_code": code, "output": tail}
        self.emit("check", step.id, command=step.check, exit_code=code, output=tail)
        if code == 0:
            return None
        return f"The check `{step.check}` exited with {code}. Its output:\n```\n{tail.rstrip()}\n```"

    async def _replan(self, step: Step, agent: Agent, failure: str) -> bool:
        known = sorted({t for s in self.plan.steps for t in s.tools} | {t.name for t in agent.tools})
        new = await replan(agent, self.plan, step.id, failure, known_tools=known)
        if new is None:
            return False
        # the failed step and its dependants go: they were pending (waiting on it), so no work is lost
        old, gone = set(self.plan.ids), {step.id, *self.plan.dependants(step.id)}
        self.plan = new
        self.nodes = {
            s.id: self.nodes[s.id] if s.id not in gone and s.id in self.nodes else Node(replanned=True)
            for s in new.steps
        }
        fresh = [s.to_json() for s in new.steps if s.id in gone or s.id not in old]
        self.emit("replanned", step.id, replaced=sorted(gone), steps=fresh)
        self.save()
        return True

    async def _ask(self, step: Step, failure: str) -> str | None:
        if self.ask is None:
            return None
        answer = self.ask(step, failure)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer or None


async def run_check(command: str, cwd: Path, timeout: float = CHECK_TIMEOUT_S) -> tuple[int, str]:
    """Run a step's check with bash in ``cwd``, without the harness's secrets; (exit code, stdout+stderr)."""
    return await run_command(command, cwd, timeout)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so a crash leaves the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a power cut
    finally:
        os.close(fd)


def __getattr__(name: str) -> object:
    if name == "run_plan":  # the old name, for one release
        import warnings

        warnings.warn("run_plan is now apply_plan", DeprecationWarning, stacklevel=2)
        return apply_plan
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Node", "PlanEvent", "PlanResult", "Scheduler", "apply_plan", "run_check", "write_atomic"]

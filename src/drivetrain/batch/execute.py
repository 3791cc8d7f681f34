"""One task, start to end: a fresh workspace, its setup, the run as an ordinary session, its check."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from drivetrain.agent import Agent
from drivetrain.batch.results import ERROR_SUBTYPES, TaskResult, TaskStatus
from drivetrain.batch.tasks import Task
from drivetrain.batch.workspace import OUTPUT_TAIL, WorkspaceError, prepare, remove, run_shell
from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.loop.events import Event
from drivetrain.loop.result import RunResult
from drivetrain.sessions.store import (
    VERSION,
    Record,
    SessionInfo,
    SessionRecords,
    SessionStore,
    check_session_id,
    fields_of,
    now_ts,
)


class AgentFactory(Protocol):
    """The agent a task runs with (the sweep's flags, the task's overrides), working in ``cwd``. Picklable, so
    that a Ray worker can make the same agent."""

    def __call__(self, task: Task, cwd: Path, session_id: str) -> Agent: ...


class Held:
    """A task's session store: its records held in memory, each stamped with the time it was made, and appended
    to ``store`` when the task ends (``flush``), one append per session. Without ``--resumable`` (which writes
    each record as it comes instead) a sweep never resumes a task's session (an interrupted task runs again from a
    fresh workspace), so a kill loses nothing it needs, and a finished task's log reaches the store whole, before
    its result line; meanwhile no record costs a file opened and locked, nor an index update. Anything else asked
    of the store (a read) writes what is held first.

    Records are held as given: the loop's writers make each one afresh and never change it after."""

    def __init__(self, store: SessionStore):
        self.store = store
        self._held: dict[str, list[JsonObject]] = {}
        self._seq: dict[str, int] = {}  # records per session so far: its sessions are new

    def append(
        self, session_id: str, records: Sequence[Mapping[str, JsonValue]], *, sync: bool = False
    ) -> list[Record]:
        held = self._held.setdefault(check_session_id(session_id), [])
        written: list[Record] = []
        for given in records:
            kind, fields = fields_of(session_id, given)
            ts = fields.pop("ts", None) or now_ts()
            held.append({"kind": kind, "ts": ts, **fields})
            self._seq[session_id] = seq = self._seq.get(session_id, 0) + 1
            written.append({"ts": ts, "session_id": session_id, "seq": seq, "kind": kind, "v": VERSION, **fields})
        return written

    def flush(self) -> None:
        """Append what is held, one append per session, and hold nothing more."""
        held, self._held = self._held, {}
        for session_id, records in held.items():
            if records:
                self.store.append(session_id, records)

    # the rest of the store's methods: what is held is written first
    def read(self, session_id: str) -> SessionRecords:
        self.flush()
        return self.store.read(session_id)

    def info(self, session_id: str) -> SessionInfo | None:
        self.flush()
        return self.store.info(session_id)

    def list(self, *, cwd: str | None = None, query: str | None = None, limit: int | None = None) -> list[SessionInfo]:
        self.flush()
        return self.store.list(cwd=cwd, query=query, limit=limit)

    def latest(self, cwd: str) -> SessionInfo | None:
        self.flush()
        return self.store.latest(cwd)

    def delete(self, session_id: str) -> None:
        self.flush()
        self.store.delete(session_id)

    def reindex(self) -> None:
        self.flush()
        self.store.reindex()


class Written(Held):
    """A resumable sweep's task store: each record appended as it comes (a task a kill cuts short has its session
    up to the last step, to resume), without ``fsync`` (a kill loses nothing the operating system has; like
    ``results.jsonl``, a lost machine may)."""

    def append(
        self, session_id: str, records: Sequence[Mapping[str, JsonValue]], *, sync: bool = False
    ) -> list[Record]:
        return self.store.append(session_id, records)


@dataclass(frozen=True)
class Scratch:
    root: Path  # each task's workspace is root/<id>
    keep: bool = False  # --keep-workspaces: left in place, and named in the result line
    # --resumable: a task's workspace stays until its result line is written (a kill before leaves it to resume in)
    resumable: bool = False


Watch = Callable[[Agent, str], Callable[[Event], None]]  # given a task's agent and session, an observer for its run


async def execute_task(
    task: Task, agents: AgentFactory, scratch: Scratch, watch: Watch | None = None, resume: str | None = None
) -> TaskResult:
    """Never raises but for cancellation: whatever goes wrong is the task's ``error`` line, and the sweep goes on.
    ``resume``: the session of a run an earlier sweep cut short, continued in its workspace."""
    started = time.monotonic()
    where = scratch.root / task.id
    try:
        if resume is not None:
            result = await _resumed(task, agents, where, watch, resume)
        else:
            result = await _run_once(task, agents, where, watch)
    except asyncio.CancelledError:
        if not (scratch.keep or scratch.resumable):
            remove(where)
        raise
    except WorkspaceError as e:
        result = TaskResult(task.id, "error", e.subtype, detail=str(e))
    except Exception as e:
        result = TaskResult(task.id, "error", "harness_error", detail=f"{type(e).__name__}: {e}")
    result.wall_s = round(time.monotonic() - started, 3)
    if scratch.keep:
        result.workspace = str(where)
    elif not scratch.resumable:  # resumable: removed once the result line is written (Sweep.cleanup)
        await asyncio.to_thread(remove, where)
    return result


async def _run_once(task: Task, agents: AgentFactory, where: Path, watch: Watch | None) -> TaskResult:
    await prepare(task.workspace, where, task.env)
    if task.setup:
        code, out = await run_shell(task.setup, where, task.env)
        if code != 0:
            raise WorkspaceError(f"setup exited {code}: {out[-OUTPUT_TAIL:]}", "setup_failed")
    session_id = str(uuid.uuid4())
    agent = agents(task, where, session_id)
    if watch is not None:
        agent.observers.append(watch(agent, session_id))
    try:
        run = await agent.start(task.prompt, session_id=session_id).finish()
    finally:  # interrupted too: the run's last record says so
        if isinstance(agent.store, Held):
            agent.store.flush()
    return await _checked(task, where, _from_run(task.id, run))


async def _resumed(task: Task, agents: AgentFactory, where: Path, watch: Watch | None, session_id: str) -> TaskResult:
    """The session an earlier sweep cut short, continued in its workspace: the load answers each call that was
    running as interrupted ("may have had side effects"), and the model, told so, decides what to do."""
    if not where.is_dir():
        raise WorkspaceError(f"cannot resume session {session_id}: its workspace {where} is gone")
    agent = agents(task, where, session_id)
    if watch is not None:
        agent.observers.append(watch(agent, session_id))
    try:
        try:
            resumed = agent.resume(session_id)
        except ValueError:  # it had finished (its end saved, its result line not yet written)
            run = agent.load(session_id).result
        else:
            run = await resumed.finish()
    finally:
        if isinstance(agent.store, Held):
            agent.store.flush()
    return await _checked(task, where, _from_run(task.id, run))


async def _checked(task: Task, where: Path, result: TaskResult) -> TaskResult:
    if task.check and result.status != "error":
        code, out = await run_shell(task.check, where, task.env)
        result.check_exit = code
        result.status = "pass" if code == 0 else "fail"
        if code != 0:
            result.detail = out[-OUTPUT_TAIL:]
    return result


def _from_run(task_id: str, run: RunResult) -> TaskResult:
    u = run.usage
    status: TaskStatus = "error" if run.subtype in ERROR_SUBTYPES else "pass" if run.subtype == "success" else "fail"
    return TaskResult(
        task_id,
        status,
        run.subtype,
        turns=run.num_turns,
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        cache_creation_input_tokens=u.cache_creation_input_tokens,
        cache_read_input_tokens=u.cache_read_input_tokens,
        cost_usd=run.total_cost_usd,
        session_id=run.session_id,
        detail=run.result[-OUTPUT_TAIL:] if status == "error" else "",
    )

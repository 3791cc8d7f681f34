"""Tasks as Ray tasks: on the cluster at an address, or on a local Ray instance. The worker runs the same
``execute_task`` as a local sweep, in an event loop of its own; the driver keeps the schedule, the budget and the
results file. A task whose worker dies is retried once by Ray, then recorded as ``error`` (``worker_died``)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import ModuleType
from typing import Protocol, runtime_checkable

from drivetrain.batch.execute import AgentFactory, Scratch, Watch, execute_task
from drivetrain.batch.results import LinesFile, TaskResult
from drivetrain.batch.sweep import Executor, Tally, usage_line
from drivetrain.batch.tasks import Task
from drivetrain.batch.workspace import scratch_root
from drivetrain.errors import ConfigError, HarnessError

# what a worker needs from the driver's environment: the model endpoint and key, the session store, its home
FORWARDED = ("ANTHROPIC_", "OPENAI_", "DRIVETRAIN_")


class ClusterError(HarnessError):
    """Ray itself failed (not a task): the sweep stops and can be run again."""


@runtime_checkable
class Closing(Protocol):
    """An agent factory holding model clients (the CLI's): closed when its task ends."""

    async def aclose(self) -> None: ...


def _ray() -> ModuleType:
    try:
        import ray
    except ImportError as e:
        raise ConfigError(f"--ray needs Ray: pip install 'drivetrain[ray]' ({e})") from None
    return ray


def ray_executor(address: str | None, agents: AgentFactory, scratch: Scratch, runs: Path | None = None) -> Executor:
    """Connects to Ray (``address``, or a new local instance) and returns an executor running each task there.
    ``runs``: the sweep's ``runs.jsonl``, where a worker that can write it (this machine, a shared disk) journals its
    task's session, tool calls and billed usage as a local sweep does."""
    ray = _ray()
    if not ray.is_initialized():
        env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED)}
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ConfigError(f"cannot reach the Ray cluster at {address or 'a new local instance'}: {e}") from None
    remote = ray.remote(max_retries=1)(_in_worker)  # a dead worker's task is run once more, then fails

    async def execute(task: Task, tally: Tally) -> TaskResult:
        ref = remote.remote(task, agents, scratch, runs)
        try:
            result: TaskResult = await ref
            return result
        except asyncio.CancelledError:
            ray.cancel(ref, force=True)
            raise
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError) as e:  # after Ray's one retry
            return TaskResult(task.id, "error", "worker_died", detail=f"{type(e).__name__}: {str(e)[-500:]}")
        except ray.exceptions.RayError as e:
            # not this task's doing (the cluster is gone, a worker cannot load drivetrain …): stop the sweep, and
            # leave the task without a result line, so that the same command runs it again
            raise ClusterError(f"Ray failed on task {task.id} ({type(e).__name__}): {str(e)[-1000:]}") from None

    return execute


_worker_loop: asyncio.AbstractEventLoop | None = None


def _in_worker(task: Task, agents: AgentFactory, scratch: Scratch, runs: Path | None = None) -> TaskResult:
    """One event loop for all the tasks of a worker process: an SDK client left by an earlier task is then
    closed in the loop it was opened in."""
    global _worker_loop
    if _worker_loop is None:
        _worker_loop = asyncio.new_event_loop()
    here = Scratch(scratch_root(scratch.root), scratch.keep)
    journal = _journal(runs)
    try:
        return _worker_loop.run_until_complete(_run_closing(task, agents, here, _watch(task, journal)))
    finally:
        if journal is not None:
            journal.close()


def _journal(runs: Path | None) -> LinesFile | None:
    """The sweep's runs.jsonl, appended to by whole lines, if this worker can write it."""
    if runs is None:
        return None
    try:
        return LinesFile(runs, repair=False)
    except OSError:
        return None


def _watch(task: Task, journal: LinesFile | None) -> Watch | None:
    """Journals the task's session (marked as journaled: its calls are written down), each tool call before it
    runs and each model response's billed usage, as a local sweep does."""
    if journal is None:
        return None
    tally = Tally(total=1)
    tally.on_session = lambda task_id, session: journal.write({"id": task_id, "session": session, "journaled": True})
    tally.on_call = lambda task_id, call: journal.write({"id": task_id, "call": call.name, "call_id": call.id})
    tally.on_usage = lambda task_id, u, cost: journal.write({"id": task_id, "usage": usage_line(u), "cost": cost})
    return tally.watch(task.id)


async def _run_closing(task: Task, agents: AgentFactory, scratch: Scratch, watch: Watch | None) -> TaskResult:
    """The task, then the model clients its agents opened (each task brings agents of its own, unpickled)."""
    try:
        return await execute_task(task, agents, scratch, watch)
    finally:
        if isinstance(agents, Closing):
            await agents.aclose()


def shutdown() -> None:
    """Disconnect (and stop a local instance this process started)."""
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()

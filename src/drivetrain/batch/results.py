"""``DIR/results.jsonl``: one line per finished task, appended as it finishes; what a resumed sweep skips.
``DIR/runs.jsonl``: each task's runs as they go: a line when it starts (before anything runs), one per
tool call it starts (before the call runs; local sweeps), one when its result line is written. A run that
started and never ended was cut short by a kill (or Ctrl-C); the calls it started say what it may have done."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from drivetrain.jsontypes import JsonObject
from drivetrain.loop.state import Subtype

TaskStatus = Literal["pass", "fail", "error"]
# how a task ended that errored outside its run (else its subtype is the run's)
TaskSubtype = Literal["workspace_failed", "setup_failed", "worker_died", "harness_error"]
RESULTS = "results.jsonl"
RUNS = "runs.jsonl"
# a run that ended so is an ``error``: nothing could be judged (the harness or the upstream failed)
ERROR_SUBTYPES: frozenset[str] = frozenset({"error_during_execution", "error_upstream"})


@dataclass
class TaskResult:
    id: str
    status: TaskStatus
    subtype: Subtype | TaskSubtype  # the run's (success, error_max_turns …), or the task's own
    check_exit: int | None = None  # None: no check, or none was run
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cost_usd: float | None = None  # None: no price known for the model
    wall_s: float = 0.0
    session_id: str | None = None
    workspace: str | None = None  # kept (--keep-workspaces) only
    detail: str = ""  # why it errored, or the tail of a failed check's output
    interrupted: int = 0  # earlier runs of this task that a kill or Ctrl-C ended before they had a result

    def to_json(self) -> JsonObject:
        out = asdict(self)
        for optional in ("workspace", "detail", "interrupted"):
            if not out[optional]:
                del out[optional]
        return out

    @classmethod
    def from_json(cls, data: JsonObject) -> TaskResult:
        known = _FIELDS if cls is TaskResult else {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


# found once: ``fields`` walks the class at each call (a third of the CPU of the process following a sweep's
# results, in a profile of ``bench_batch.py --workers 2``)
_FIELDS = frozenset(f.name for f in fields(TaskResult))


def read_results(out: Path) -> list[TaskResult]:
    """The result lines of ``out`` (a sweep's folder); the last one per task id wins (a rerun's)."""
    latest: dict[str, TaskResult] = {}
    for r in _result_lines(out):
        latest.pop(r.id, None)
        latest[r.id] = r
    return list(latest.values())


def _result_lines(out: Path) -> list[TaskResult]:
    lines = []
    for data in _json_lines(out / RESULTS):
        try:
            lines.append(TaskResult.from_json(data))
        except TypeError:
            continue
    return lines


def _json_lines(path: Path) -> list[JsonObject]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill: that task had not finished
        if isinstance(data, dict):
            out.append(data)
    return out


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class TaskRun:
    """One run of a task, as ``DIR/runs.jsonl`` tells it."""

    id: str
    start: str
    journaled: bool  # its tool calls were written down as they started (a local sweep's; a Ray worker's that could)
    calls: list[str] = field(default_factory=list)  # the tools it started, in order
    ended: bool = False
    session: str | None = None  # its run's session (a local sweep's)
    # what the upstream billed it, summed over its model responses as they came: input, output, cache write, read
    usage: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    cost_usd: float = 0.0

    @property
    def acted(self) -> bool:
        """It may have done something outside its workspace: it started a tool, or nobody wrote its calls down."""
        return bool(self.calls) or not self.journaled


def task_runs(out: Path) -> list[TaskRun]:
    """Every run of ``out``'s tasks, in the order they started."""
    running: dict[str, TaskRun] = {}
    every: list[TaskRun] = []
    for line in _json_lines(out / RUNS):
        task_id = str(line.get("id"))
        if "start" in line:
            running[task_id] = TaskRun(task_id, str(line["start"]), bool(line.get("calls")))
            every.append(running[task_id])
        elif "call" in line and task_id in running:
            running[task_id].calls.append(str(line["call"]))
        elif "session" in line and task_id in running:
            running[task_id].session = str(line["session"])
            running[task_id].journaled |= line.get("journaled") is True  # a Ray worker that wrote its calls down
        elif "usage" in line and task_id in running and isinstance(billed := line["usage"], list):
            run = running[task_id]
            for k, n in enumerate(billed[:4]):
                run.usage[k] += int(n) if isinstance(n, int | float) else 0
            cost = line.get("cost")
            run.cost_usd += float(cost) if isinstance(cost, int | float) else 0.0
        elif "end" in line and task_id in running:
            running.pop(task_id).ended = True
    return every


def interrupted(out: Path) -> dict[str, list[TaskRun]]:
    """The tasks with runs that started and never ended (the sweep was killed or stopped while they ran)."""
    cut_short: dict[str, list[TaskRun]] = {}
    for a in task_runs(out):
        if not a.ended:
            cut_short.setdefault(a.id, []).append(a)
    return cut_short


class LinesFile:
    """Appends JSON lines, each in one write: a kill leaves whole lines, and at most one cut short at the end
    (cut off when the file is opened again, so that the next line starts on a line of its own)."""

    def __init__(self, path: Path, repair: bool = True):
        """``repair``: cut off a line a kill left unfinished (the sweep's own opening; a Ray worker appending to
        the file of a running sweep does not)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        data = self.path.read_bytes() if repair else b""
        if data and not data.endswith(b"\n"):
            os.ftruncate(self._fd, data.rfind(b"\n") + 1)

    def write(self, line: JsonObject) -> None:
        os.write(self._fd, (json.dumps(line, ensure_ascii=False) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


class ResultsFile(LinesFile):
    """``DIR/results.jsonl``."""

    def __init__(self, out: Path, repair: bool = True):
        super().__init__(out / RESULTS, repair)

    def append(self, r: TaskResult) -> None:
        self.write(r.to_json())

"""A sweep's tasks: one JSON object a line, validated all at once so that a bad line is reported (with its
number) before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from drivetrain.errors import ConfigError
from drivetrain.models.resolve import PROVIDERS

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"  # it names the task's scratch folder


class Task(BaseModel):
    """One line of TASKS.jsonl. Unset fields take the sweep's flags (``--model``, ``--max-turns`` …)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=ID_PATTERN)
    prompt: str = Field(min_length=1)
    setup: str | None = None  # a shell command run in the fresh workspace before the run
    workspace: str | None = None  # a folder (relative to the tasks file) or a git URL@rev, copied fresh
    check: str | None = None  # a shell command run in the workspace after the run: exit 0 is a pass
    max_turns: int | None = Field(default=None, gt=0)
    model: str | None = None
    provider: str | None = Field(default=None, pattern="^(" + "|".join(PROVIDERS) + ")$")
    max_budget_usd: float | None = Field(default=None, gt=0)
    env: dict[str, str] = Field(default_factory=dict)  # for setup, check and the run's Bash commands


class TaskFileError(ConfigError):
    """The tasks file cannot be used; the message lists every bad line."""


def load_tasks(path: Path) -> list[Task]:
    """Every task of ``path``, workspaces made absolute; raises TaskFileError naming each bad line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise TaskFileError(f"cannot read the tasks file {path}: {e.strerror or e}") from None
    tasks: list[Task] = []
    problems: list[str] = []
    first_line: dict[str, int] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            task = Task.model_validate(json.loads(line))
        except json.JSONDecodeError as e:
            problems.append(f"line {n}: not JSON ({e.msg} at column {e.colno})")
            continue
        except ValidationError as e:
            problems += [f"line {n}: {_where(err)}{err['msg']}" for err in e.errors()]
            continue
        if task.id in first_line:
            problems.append(f"line {n}: id {task.id!r} is already used on line {first_line[task.id]}")
            continue
        first_line[task.id] = n
        task = _resolved(task, path.parent)
        if task.workspace is not None and not is_git_source(task.workspace) and not Path(task.workspace).is_dir():
            problems.append(f"line {n}: workspace: no such folder {task.workspace}")
        tasks.append(task)
    if problems:
        raise TaskFileError(f"{path}: {len(problems)} problem(s), nothing was run:\n  " + "\n  ".join(problems))
    if not tasks:
        raise TaskFileError(
            f"{path} has no tasks: write one JSON object a line, e.g. "
            '{"id": "t1", "prompt": "…", "check": "pytest -q"}'
        )
    return tasks


def _where(err: ErrorDetails) -> str:
    loc = ".".join(str(p) for p in err.get("loc", ()))
    return f"{loc}: " if loc else ""


def is_git_source(source: str) -> bool:
    return "://" in source or source.startswith("git@") or source.split("@")[0].endswith(".git")


def _resolved(task: Task, base: Path) -> Task:
    """A folder workspace as an absolute path (so that a Ray worker finds it where the driver did)."""
    if task.workspace is None or is_git_source(task.workspace):
        return task
    folder = (base / task.workspace).resolve()
    return task.model_copy(update={"workspace": str(folder)})

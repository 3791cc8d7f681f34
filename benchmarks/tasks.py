"""The benchmark's task list, and the self-test that keeps the checkers honest.

``selftest`` generates every task's workspace for several seeds and demands, for each: the expectations
survive a JSON round trip (results and ``--save`` keep them), the same seed makes the same workspace,
the checker FAILS on the untouched workspace with an empty answer, the reference solution makes it
PASS, and for tasks whose answer must report something, the solved workspace with an empty answer
fails again. Different seeds must give different workspaces.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from taskkit import Task
from tasks_code import TASKS as _CODE
from tasks_files import TASKS as _FILES

_ORDER = ["linecount", "linecount-nowc", "todos", "fix-test", "rename", "off-by-one", "create-json",
          "create-function", "locate", "csv-sum", "config-edit", "find-files", "syntax-fix", "log-count",
          "unique-lines"]
TASKS: dict[str, Task] = {t.name: t for t in sorted(_FILES + _CODE, key=lambda t: _ORDER.index(t.name))}
# the answer itself must carry the result (a number, a path, a citation), not only a file
REPORTS = {"linecount", "linecount-nowc", "csv-sum", "find-files", "log-count", "locate"}


def snapshot(ws: Path) -> dict[str, bytes]:
    return {p.relative_to(ws).as_posix(): p.read_bytes() for p in sorted(ws.rglob("*")) if p.is_file()}


def check_one(task: Task, seed: int, base: Path) -> list[str]:
    """Problems found with one task at one seed (empty: all good)."""
    problems = []
    ws = base / f"{task.name}-{seed}" / "ws"
    inst = task.make(seed, ws)
    again = task.make(seed, base / f"{task.name}-{seed}" / "again")
    if again.prompt != inst.prompt or snapshot(ws) != snapshot(base / f"{task.name}-{seed}" / "again"):
        problems.append("the same seed made a different workspace")
    expect = json.loads(json.dumps(inst.expect))
    if "out" in expect and expect["out"] not in inst.prompt:
        problems.append(f"the prompt does not name the output file {expect['out']}")
    ok, reason = task.check(ws, "", expect)
    if ok:
        problems.append(f"passes on the untouched workspace: {reason}")
    answer = task.solve(ws, expect)
    ok, reason = task.check(ws, answer, expect)
    if not ok:
        problems.append(f"fails after the reference solution: {reason}")
    if task.name in REPORTS:
        ok, reason = task.check(ws, "", expect)
        if ok:
            problems.append(f"passes with an empty answer although the answer must report the result: {reason}")
    return problems


def selftest(names: list[str] | None = None, seeds: range = range(1, 7),
             base: Path | None = None) -> dict[str, list[str]]:
    """{task name: problems} for every task (or ``names``) over ``seeds``; prints nothing."""
    out: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-selftest-") as tmp:
        root = base or Path(tmp)
        for name in names or list(TASKS):
            task = TASKS[name]
            out[name] = [f"seed {s}: {p}" for s in seeds for p in check_one(task, s, root)]
            prompts = {task.make(s, root / f"{name}-variety-{s}").prompt for s in seeds}
            trees = {tuple(sorted(snapshot(root / f"{name}-variety-{s}").items())) for s in seeds}
            if len(seeds) > 1 and len(trees) < 2 and len(prompts) < 2:
                out[name].append("every seed made the same workspace")
    return out

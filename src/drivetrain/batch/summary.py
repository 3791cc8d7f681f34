"""What a sweep gave, from its result lines: pass rate, cost and turns of passes vs failures, the slowest and
most expensive runs, failures by subtype. Pure functions, for ``drivetrain batch report``."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TypedDict

from drivetrain.batch.results import TaskResult, TaskRun, TaskStatus

TOP = 5  # slowest and most expensive runs listed


class Side(TypedDict):
    """The passes, or the failures: how many, what they cost, how many turns they took."""

    count: int
    cost_usd: float
    cost_unknown: int
    turns: int
    mean_turns: float | None
    mean_cost_usd: float | None


class RunRow(TypedDict):
    id: str
    status: TaskStatus
    wall_s: float
    cost_usd: float | None
    turns: int


class Interrupted(TypedDict):
    """A task's runs that a kill or Ctrl-C ended, and the tools they had started (None: not written down)."""

    runs: int
    tools: list[str] | None


class Summary(TypedDict):
    total: int
    passed: int
    failed: int
    errors: int
    pass_rate: float | None
    cost_usd: float
    tokens: int
    wall_s: float
    passes: Side
    failures: Side
    slowest: list[RunRow]
    most_expensive: list[RunRow]
    failures_by_subtype: dict[str, list[str]]
    interrupted: dict[str, Interrupted]  # tasks with runs a kill or Ctrl-C ended before a result


def usd(x: float | None) -> str:
    return "–" if x is None else f"${x:.4f}"


def _side(rs: list[TaskResult]) -> Side:
    known = [r.cost_usd for r in rs if r.cost_usd is not None]
    turns = sum(r.turns for r in rs)
    return {
        "count": len(rs),
        "cost_usd": round(sum(known), 6),
        "cost_unknown": len(rs) - len(known),
        "turns": turns,
        "mean_turns": round(turns / len(rs), 2) if rs else None,
        "mean_cost_usd": round(sum(known) / len(known), 6) if known else None,
    }


def failure_kind(r: TaskResult) -> str:
    """The run's subtype, or ``check_failed`` for a run that ended well and whose check did not pass."""
    return "check_failed" if r.status == "fail" and r.subtype == "success" else r.subtype


def counts(results: list[TaskResult]) -> str:
    """``300 tasks: 288 pass · 6 fail (check_failed 6) · 6 error (error_upstream 4, setup_failed 2)``."""
    parts = []
    for status in ("pass", "fail", "error"):
        mine = [r for r in results if r.status == status]
        if not mine and status != "pass":
            continue
        kinds = Counter(failure_kind(r) for r in mine)
        detail = ", ".join(f"{k} {n}" for k, n in kinds.most_common()) if status != "pass" else ""
        parts.append(f"{len(mine)} {status}" + (f" ({detail})" if detail else ""))
    return f"{len(results)} tasks: " + " · ".join(parts)


def _row(r: TaskResult) -> RunRow:
    return {"id": r.id, "status": r.status, "wall_s": r.wall_s, "cost_usd": r.cost_usd, "turns": r.turns}


def summarize(results: list[TaskResult], interrupted: dict[str, list[TaskRun]] | None = None) -> Summary:
    """The report as JSON-ready data (``--json``); ``interrupted``: ``results.interrupted(DIR)``."""
    passes = [r for r in results if r.status == "pass"]
    others = [r for r in results if r.status != "pass"]
    by_subtype: dict[str, list[str]] = defaultdict(list)
    for r in others:
        by_subtype[failure_kind(r)].append(r.id)
    return {
        "total": len(results),
        "passed": len(passes),
        "failed": sum(r.status == "fail" for r in results),
        "errors": sum(r.status == "error" for r in results),
        "pass_rate": round(len(passes) / len(results), 4) if results else None,
        "cost_usd": round(sum(r.cost_usd or 0.0 for r in results), 6),
        "tokens": sum(r.tokens for r in results),
        "wall_s": round(sum(r.wall_s for r in results), 3),
        "passes": _side(passes),
        "failures": _side(others),
        "slowest": [_row(r) for r in sorted(results, key=lambda r: -r.wall_s)[:TOP]],
        "most_expensive": [_row(r) for r in sorted(results, key=lambda r: -(r.cost_usd or 0.0))[:TOP] if r.cost_usd],
        "failures_by_subtype": dict(sorted(by_subtype.items(), key=lambda kv: -len(kv[1]))),
        "interrupted": {
            task_id: {
                "runs": len(cut),
                "tools": [c for a in cut for c in a.calls] if all(a.journaled for a in cut) else None,
            }
            for task_id, cut in sorted((interrupted or {}).items())
        },
    }


def text(s: Summary) -> str:
    """The report for a terminal."""
    if not s["total"]:
        return "no results yet"
    lines = [
        f"{s['passed']}/{s['total']} passed ({s['pass_rate']:.1%}), {s['failed']} failed, {s['errors']} "
        f"errors · {s['tokens']:,} tokens · {usd(s['cost_usd'])} · {s['wall_s']:.1f} s of runs"
    ]
    for name, side in (("passes", s["passes"]), ("failures", s["failures"])):
        lines.append(
            f"{name:>9}: {side['count']} runs, {usd(side['cost_usd'])} (mean {usd(side['mean_cost_usd'])}), "
            f"{side['turns']} turns (mean {side['mean_turns'] if side['count'] else '–'})"
        )
    lines.append("slowest: " + ", ".join(f"{r['id']} {r['wall_s']:.1f} s" for r in s["slowest"]))
    if s["most_expensive"]:
        lines.append("most expensive: " + ", ".join(f"{r['id']} {usd(r['cost_usd'])}" for r in s["most_expensive"]))
    for kind, ids in s["failures_by_subtype"].items():
        lines.append(f"{kind}: {len(ids)} — {', '.join(ids[:10])}{' …' if len(ids) > 10 else ''}")
    if s["interrupted"]:
        cut = [
            f"{i} ({'tools unknown' if x['tools'] is None else ', '.join(x['tools']) or 'no tool'})"
            for i, x in s["interrupted"].items()
        ]
        lines.append(
            f"interrupted (a kill or Ctrl-C ended a run after it started these tools; a rerun ran them "
            f"again): {len(cut)} — " + ", ".join(cut)
        )
    return "\n".join(lines)

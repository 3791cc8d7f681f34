"""The task benchmark's output: a line per finished run, and the tables (text and README markdown) from result rows."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from tasks import TASKS


def print_line(row: dict) -> None:
    turns = "-" if row.get("turns") is None else str(row["turns"])
    print(f"{row['task']:<16} {row['config']:<14} {'yes' if row['solved'] else 'NO':<4} {turns:>3} "
          f"{row['wall_s']:7.1f}s  {row['reason']}", flush=True)
    if row.get("trajectory"):
        print(f"{'':<16} {'':<14}      {row['trajectory'][:150]}", flush=True)


def _column(row: dict, several_models: bool) -> str:
    return f"{row['config']} [{row.get('model')}]" if several_models else row["config"]


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _fmt(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.1f}{unit}" if unit else f"{value:g}"


def tables(rows: list[dict]) -> tuple[str, str, str]:
    """(summary per config, solved per task and config, README markdown) for result rows."""
    several = len({r.get("model") for r in rows}) > 1
    columns: list[str] = []
    for r in rows:
        if _column(r, several) not in columns:
            columns.append(_column(r, several))
    tasks = [t for t in TASKS if any(r["task"] == t for r in rows)]
    tasks += sorted({r["task"] for r in rows} - set(tasks))
    by: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by.setdefault((r["task"], _column(r, several)), []).append(r)
    per_col = {c: [r for r in rows if _column(r, several) == c] for c in columns}

    width = max(len(c) for c in columns + ["config"])
    summary = [f"{'config':<{width}}  {'solved':>9}  {'%':>4}  {'median wall':>11}  {'median turns':>12}"]
    for c in columns:
        rs = per_col[c]
        n = sum(r["solved"] for r in rs)
        summary.append(f"{c:<{width}}  {f'{n}/{len(rs)}':>9}  {100 * n / len(rs):>3.0f}%  "
                       f"{_fmt(_median(r['wall_s'] for r in rs), ' s'):>11}  "
                       f"{_fmt(_median(r.get('turns') for r in rs)):>12}")

    tw = max(len(t) for t in tasks + ["task"])
    cw = [max(len(c), 5) for c in columns]
    per_task = ["  ".join([f"{'task':<{tw}}"] + [f"{c:>{w}}" for c, w in zip(columns, cw)])]
    for t in tasks:
        cells = []
        for c, w in zip(columns, cw):
            rs = by.get((t, c), [])
            cell = f"{sum(r['solved'] for r in rs)}/{len(rs)}" if rs else "-"
            cells.append(f"{cell:>{w}}")
        per_task.append("  ".join([f"{t:<{tw}}"] + cells))

    md = ["| task | " + " | ".join(columns) + " |", "| --- |" + " --- |" * len(columns)]
    for t in tasks:
        cells = []
        for c in columns:
            rs = by.get((t, c), [])
            cells.append(f"{sum(r['solved'] for r in rs)}/{len(rs)}" if rs else "–")
        md.append(f"| {t} | " + " | ".join(cells) + " |")
    totals = []
    for c in columns:
        n, total = sum(r["solved"] for r in per_col[c]), len(per_col[c])
        totals.append(f"**{n}/{total} ({100 * n / total:.0f}%)**")
    md.append("| **total** | " + " | ".join(totals) + " |")
    md.append("| median wall per run | " + " | ".join(_fmt(_median(r["wall_s"] for r in per_col[c]), " s")
                                                     for c in columns) + " |")
    return "\n".join(summary), "\n".join(per_task), "\n".join(md)


def print_tables(rows: list[dict]) -> None:
    summary, per_task, md = tables(rows)
    print(f"{summary}\n\nsolved / runs, per task:\n{per_task}\n\nfor the README:\n\n{md}", flush=True)

"""The task benchmark's output: a line per finished run, and the tables (text and README markdown) from result rows.

The tables put the configs side by side, each cell ``solved/runs  %  median wall``, broken down by split
(tune, heldout), by language, by both, and by task kind. A row's split is the one the wording has now
(``tasks.split_of``), not the one recorded when it ran: a wording moved to tune stops counting as held out
for every result, old ones included.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable

from tasks import TASKS, split_of


def row_wording(row: dict) -> tuple[str, str, str]:
    """(wording, language, split) of a result row; rows from before wordings existed used en-1."""
    wording = row.get("wording") or "en-1"
    return wording, row.get("lang") or wording.split("-")[0], split_of(row["task"], wording)


def print_line(row: dict) -> None:
    turns = "-" if row.get("turns") is None else str(row["turns"])
    wording = row.get("wording") or "en-1"
    print(
        f"{row['task']:<17} {wording:<5} {row['config']:<14} {'yes' if row['solved'] else 'NO':<4} {turns:>3} "
        f"{row['wall_s']:7.1f}s  {row['reason']}",
        flush=True,
    )
    if row.get("trajectory"):
        print(f"{'':<17} {'':<5} {'':<14}      {row['trajectory'][:150]}", flush=True)


def _column(row: dict, several_models: bool) -> str:
    return f"{row['config']} [{row.get('model')}]" if several_models else row["config"]


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _fmt(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.1f}{unit}" if unit else f"{value:g}"


def _columns(rows: list[dict]) -> tuple[list[str], Callable[[dict], str]]:
    several = len({r.get("model") for r in rows}) > 1
    columns: list[str] = []
    for r in rows:
        if _column(r, several) not in columns:
            columns.append(_column(r, several))
    return columns, lambda r: _column(r, several)


def _cell(rs: list[dict]) -> str:
    if not rs:
        return "-"
    n = sum(r["solved"] for r in rs)
    return f"{n}/{len(rs)} {100 * n / len(rs):3.0f}% {_fmt(_median(r['wall_s'] for r in rs), 's'):>6}"


def side_by_side(rows: list[dict], title: str, key: Callable[[dict], str], order: list[str]) -> str:
    """One line per value of ``key`` (in ``order``, then any others), one cell per config."""
    columns, column_of = _columns(rows)
    groups = [g for g in order if any(key(r) == g for r in rows)]
    groups += sorted({key(r) for r in rows} - set(groups))
    cells = {(g, c): _cell([r for r in rows if key(r) == g and column_of(r) == c]) for g in groups for c in columns}
    kw = max(len(g) for g in groups + [title])
    cw = [max([len(c)] + [len(cells[g, c]) for g in groups]) for c in columns]
    lines = ["  ".join([f"{title:<{kw}}"] + [f"{c:>{w}}" for c, w in zip(columns, cw)])]
    lines += ["  ".join([f"{g:<{kw}}"] + [f"{cells[g, c]:>{w}}" for c, w in zip(columns, cw)]) for g in groups]
    return "\n".join(lines)


def breakdowns(rows: list[dict]) -> str:
    """Solved/runs, % and median wall per split, per language, per both, and per task kind, configs side by side."""
    split = lambda r: row_wording(r)[2]
    lang = lambda r: row_wording(r)[1]
    parts = [
        side_by_side(rows, "split", split, ["heldout", "tune"]),
        side_by_side(rows, "language", lang, ["en", "zh"]),
        side_by_side(
            rows,
            "split/language",
            lambda r: f"{split(r)}/{lang(r)}",
            ["heldout/en", "heldout/zh", "tune/en", "tune/zh"],
        ),
        side_by_side(rows, "task", lambda r: r["task"], list(TASKS)),
    ]
    return "\n\n".join(parts)


def tables(rows: list[dict]) -> tuple[str, str, str]:
    """(summary per config, solved per task and config, README markdown) for result rows."""
    columns, column_of = _columns(rows)
    tasks = [t for t in TASKS if any(r["task"] == t for r in rows)]
    tasks += sorted({r["task"] for r in rows} - set(tasks))
    by: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by.setdefault((r["task"], column_of(r)), []).append(r)
    per_col = {c: [r for r in rows if column_of(r) == c] for c in columns}

    width = max(len(c) for c in columns + ["config"])
    summary = [f"{'config':<{width}}  {'solved':>9}  {'%':>4}  {'median wall':>11}  {'median turns':>12}"]
    for c in columns:
        rs = per_col[c]
        n = sum(r["solved"] for r in rs)
        summary.append(
            f"{c:<{width}}  {f'{n}/{len(rs)}':>9}  {100 * n / len(rs):>3.0f}%  "
            f"{_fmt(_median(r['wall_s'] for r in rs), ' s'):>11}  "
            f"{_fmt(_median(r.get('turns') for r in rs)):>12}"
        )

    per_task = side_by_side(rows, "task", lambda r: r["task"], list(TASKS))

    md = ["| task | " + " | ".join(columns) + " |", "| --- |" + " --- |" * len(columns)]
    for t in tasks:
        cells = []
        for c in columns:
            rs = by.get((t, c), [])
            cells.append(f"{sum(r['solved'] for r in rs)}/{len(rs)}" if rs else "–")
        md.append(f"| {t} | " + " | ".join(cells) + " |")
    for label, key in (("language", lambda r: row_wording(r)[1]), ("split", lambda r: row_wording(r)[2])):
        for g in sorted({key(r) for r in rows}):
            cells = []
            for c in columns:
                rs = [r for r in per_col[c] if key(r) == g]
                cells.append(f"{sum(r['solved'] for r in rs)}/{len(rs)}" if rs else "–")
            md.append(f"| *{label} {g}* | " + " | ".join(cells) + " |")
    totals = []
    for c in columns:
        n, total = sum(r["solved"] for r in per_col[c]), len(per_col[c])
        totals.append(f"**{n}/{total} ({100 * n / total:.0f}%)**")
    md.append("| **total** | " + " | ".join(totals) + " |")
    md.append(
        "| median wall per run | "
        + " | ".join(_fmt(_median(r["wall_s"] for r in per_col[c]), " s") for c in columns)
        + " |"
    )
    return "\n".join(summary), per_task, "\n".join(md)


def print_tables(rows: list[dict]) -> None:
    summary, _, md = tables(rows)
    print(
        f"{summary}\n\nsolved/runs  %  median wall, configs side by side:\n\n{breakdowns(rows)}\n\n"
        f"for the README:\n\n{md}",
        flush=True,
    )

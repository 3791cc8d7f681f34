"""The task benchmark's output: a line per finished run, and the tables (text and README markdown) from result rows.

The tables put the configs side by side, each cell ``solved/runs  %  median wall``, broken down by split
(heldout, fresh, tune), by language, by both, and by task kind. A row's split is the one the wording has now
(``tasks.split_of``), not the one recorded when it ran: a wording moved to tune stops counting as held out
for every result, old ones included.

Every two configs measured on the same (task, seed, wording) are compared run by run with McNemar's exact test:
of the pairs where one side solved and the other did not, ``b`` went to the first config and ``c`` to the second;
under "no difference" each such pair goes either way with probability 1/2, so the two-sided p-value is twice the
binomial tail ``P(X <= min(b, c))``, ``X ~ Binomial(b + c, 1/2)`` (at most 1), summed exactly.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from fractions import Fraction

from tasks import SPLITS, TASKS, split_of

RESULT_PAIRS = 88  # issue #44: no figure is called a result on fewer paired runs a side


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
        side_by_side(rows, "split", split, list(SPLITS)),
        side_by_side(rows, "language", lang, ["en", "zh"]),
        side_by_side(
            rows,
            "split/language",
            lambda r: f"{split(r)}/{lang(r)}",
            [f"{s}/{g}" for s in SPLITS for g in ("en", "zh")],
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
    budgeted = any(r.get("max_wall_s") for r in rows)  # runs since the wall budget: how many overran it
    summary = [
        f"{'config':<{width}}  {'solved':>9}  {'%':>4}  {'median wall':>11}  {'median turns':>12}"
        + ("  over wall budget" if budgeted else "")
    ]
    for c in columns:
        rs = per_col[c]
        n = sum(r["solved"] for r in rs)
        over = sum(bool(r.get("max_wall_s")) and r["wall_s"] > r["max_wall_s"] for r in rs)
        summary.append(
            f"{c:<{width}}  {f'{n}/{len(rs)}':>9}  {100 * n / len(rs):>3.0f}%  "
            f"{_fmt(_median(r['wall_s'] for r in rs), ' s'):>11}  "
            f"{_fmt(_median(r.get('turns') for r in rs)):>12}" + (f"  {over:>17}" if budgeted else "")
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


def mcnemar_p(b: int, c: int) -> float:
    """McNemar's exact two-sided p-value for ``b`` and ``c`` discordant pairs: 2 P(X <= min(b, c)), X ~ B(b+c, 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = Fraction(sum(math.comb(n, i) for i in range(min(b, c) + 1)), 2**n)
    return float(min(Fraction(1), 2 * tail))


def paired(rows: list[dict]) -> dict[tuple[str, int, str], dict[str, dict]]:
    """{(task, seed, wording): {config column: its row}}; a config's first row for a key is the one kept."""
    _, column_of = _columns(rows)
    out: dict[tuple[str, int, str], dict[str, dict]] = {}
    for r in rows:
        out.setdefault((r["task"], r.get("seed"), row_wording(r)[0]), {}).setdefault(column_of(r), r)
    return out


def mcnemar_table(rows: list[dict]) -> str:
    """For every two configs with runs on the same (task, seed, wording): pairs, b, c and the exact p, over all and
    per split, language and both; empty when no two configs share a run."""
    columns, _ = _columns(rows)
    by_key = paired(rows)
    groups: list[tuple[str, Callable[[tuple, dict], bool]]] = [("all", lambda k, r: True)]
    for s in SPLITS:
        groups.append((s, lambda k, r, s=s: row_wording(r)[2] == s))
    for g in ("en", "zh"):
        groups.append((g, lambda k, r, g=g: row_wording(r)[1] == g))
    for s in SPLITS:
        for g in ("en", "zh"):
            groups.append((f"{s}/{g}", lambda k, r, s=s, g=g: row_wording(r)[1:] == (g, s)))
    lines = []
    for i, a in enumerate(columns):
        for b in columns[i + 1 :]:
            both = [(k, v[a], v[b]) for k, v in by_key.items() if a in v and b in v]
            if not both:
                continue
            lines.append(f"{a} vs {b}")
            apart = sum(ra.get("cwd") != rb.get("cwd") for _, ra, rb in both if "cwd" in ra and "cwd" in rb)
            if apart:  # a seeded model sees the path: these pairs differ from the first token, not by the configs
                lines.append(f"  {apart} of {len(both)} pairs ran at different paths: not paired by sampling")
            lines.append(f"  {'':<11} {'pairs':>5}  {a} only (b)  {b} only (c)  p (two-sided)")
            for name, keep in groups:
                sel = [(ra, rb) for k, ra, rb in both if keep(k, ra)]
                if not sel:
                    continue
                only_a = sum(ra["solved"] and not rb["solved"] for ra, rb in sel)
                only_b = sum(rb["solved"] and not ra["solved"] for ra, rb in sel)
                small = "" if len(sel) >= RESULT_PAIRS else f"   (under {RESULT_PAIRS} pairs: not a result)"
                lines.append(
                    f"  {name:<11} {len(sel):>5}  {only_a:>{len(a) + 9}}  {only_b:>{len(b) + 9}}  "
                    f"{mcnemar_p(only_a, only_b):>13.4f}{small}"
                )
    if not lines:
        return ""
    return "McNemar's exact test, configs paired on the same (task, seed, wording):\n\n" + "\n".join(lines)


def print_tables(rows: list[dict]) -> None:
    summary, _, md = tables(rows)
    pairs = mcnemar_table(rows)
    print(
        f"{summary}\n\nsolved/runs  %  median wall, configs side by side:\n\n{breakdowns(rows)}\n\n"
        + (f"{pairs}\n\n" if pairs else "")
        + f"for the README:\n\n{md}",
        flush=True,
    )

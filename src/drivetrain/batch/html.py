"""A sweep's report as one self-contained HTML page: the outcome split, wall time and cost per run (inline SVG),
the failures by subtype and every run. No script, no network, no external file (as ``sessions/html.py``)."""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from drivetrain.batch.results import TaskResult, TaskStatus
from drivetrain.batch.summary import RunRow, Summary, failure_kind, summarize, usd
from drivetrain.sessions.html import PAGE_HEAD

COLOR: dict[TaskStatus, str] = {"pass": "#4caf50", "fail": "#f0ad4e", "error": "#d9534f"}
W, H, LEFT, TOP, BOTTOM = 880, 220, 70, 16, 24  # a per-run chart's size and margins, in px


def render(title: str, results: list[TaskResult]) -> str:
    s = summarize(results)
    rate = "–" if s["pass_rate"] is None else f"{s['pass_rate']:.1%}"
    rows = [
        ("tasks", s["total"]),
        ("passed", f"{s['passed']} ({rate})"),
        ("failed", s["failed"]),
        ("errors", s["errors"]),
        ("tokens", f"{s['tokens']:,}"),
        ("cost", usd(s["cost_usd"])),
        ("wall time of the runs", f"{s['wall_s']:.1f} s"),
    ]
    for side, d in (("passes", s["passes"]), ("failures", s["failures"])):
        rows.append(
            (
                side,
                f"{d['count']} runs · {usd(d['cost_usd'])} (mean {usd(d['mean_cost_usd'])}) · "
                f"{d['turns']} turns (mean {d['mean_turns'] if d['count'] else '–'})",
            )
        )
    summary = "".join(f"<tr><th>{escape(str(k))}</th><td>{escape(str(v))}</td></tr>" for k, v in rows)
    kinds = (
        "".join(
            f"<tr><td>{escape(k)}</td><td>{len(ids)}</td><td>{escape(', '.join(ids))}</td></tr>"
            for k, ids in s["failures_by_subtype"].items()
        )
        or "<tr><td colspan=3>none</td></tr>"
    )
    return _PAGE.format(
        title=escape(title),
        summary=summary,
        outcomes=outcomes_svg(s),
        kinds=kinds,
        wall=bars_svg("wall", [(r, r.wall_s) for r in results], lambda v: f"{v:.1f} s"),
        cost=bars_svg("cost", [(r, r.cost_usd or 0.0) for r in results], lambda v: f"${v:.4f}"),
        slowest=_rows(s["slowest"]),
        expensive=_rows(s["most_expensive"]),
        runs=_runs(results),
    )


def outcomes_svg(s: Summary) -> str:
    """One bar split by outcome, each part as wide as its share of the runs."""
    width, x, parts = W - 2 * LEFT, float(LEFT), []
    counts: dict[TaskStatus, int] = {"pass": s["passed"], "fail": s["failed"], "error": s["errors"]}
    for status, n in counts.items():
        w = width * n / s["total"] if s["total"] else 0.0
        parts.append(
            f"<rect class='outcome' data-status='{status}' x='{x:.2f}' y='8' width='{w:.2f}' height='28' "
            f"fill='{COLOR[status]}'><title>{status}: {n}</title></rect>"
        )
        if n:
            parts.append(f"<text x='{x + 4:.2f}' y='58' class='axis'>{status} {n}</text>")
        x += w
    return (
        f"<svg id='outcomes' xmlns='http://www.w3.org/2000/svg' width='{W}' height='66' viewBox='0 0 {W} 66' "
        f"role='img' aria-label='runs by outcome'>{''.join(parts)}</svg>"
    )


def bars_svg(name: str, values: list[tuple[TaskResult, float]], fmt: Callable[[float], str]) -> str:
    """One bar per run, as tall as its value, coloured by its outcome."""
    if not values:
        return "<p>No runs.</p>"
    pw, ph = W - LEFT - 10, H - TOP - BOTTOM
    top = max(v for _, v in values) or 1.0
    slot = pw / len(values)
    bar = max(1.0, slot * 0.75)
    parts = [
        f"<svg id='{name}' xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H}' viewBox='0 0 {W} {H}' "
        f"role='img' aria-label='{name} per run'>",
        f"<rect x='{LEFT}' y='{TOP}' width='{pw}' height='{ph}' fill='#fafafa' stroke='#ccc'/>",
    ]
    for i in range(3):
        y = TOP + ph - ph * i / 2
        parts.append(f"<text x='{LEFT - 6}' y='{y + 4:.1f}' text-anchor='end' class='axis'>{fmt(top * i / 2)}</text>")
    for i, (r, v) in enumerate(values):
        h = ph * v / top
        parts.append(
            f"<rect class='run-bar' data-id='{escape(r.id)}' x='{LEFT + slot * i + (slot - bar) / 2:.2f}' "
            f"y='{TOP + ph - h:.2f}' width='{bar:.2f}' height='{h:.2f}' fill='{COLOR[r.status]}'>"
            f"<title>{escape(r.id)}: {r.status}, {fmt(v)}</title></rect>"
        )
    parts.append(f"<text x='{LEFT}' y='{H - 6}' class='axis'>runs, in the order they finished</text></svg>")
    return "".join(parts)


def _rows(rows: list[RunRow]) -> str:
    return "".join(
        f"<tr><td>{escape(r['id'])}</td><td>{r['status']}</td><td>{r['wall_s']:.1f} s</td>"
        f"<td>{usd(r['cost_usd'])}</td><td>{r['turns']}</td></tr>"
        for r in rows
    )


def _runs(results: list[TaskResult]) -> str:
    return "".join(
        f"<tr class='{r.status}'><td>{escape(r.id)}</td><td>{r.status}</td><td>{escape(failure_kind(r))}</td>"
        f"<td>{'' if r.check_exit is None else r.check_exit}</td><td>{r.turns}</td><td>{r.tokens:,}</td>"
        f"<td>{usd(r.cost_usd)}</td><td>{r.wall_s:.1f} s</td><td>{escape(r.session_id or '')}</td></tr>"
        for r in results
    )


_PAGE = (
    PAGE_HEAD
    + """tr.fail td:nth-child(2) {{ color: #b35900; }} tr.error td:nth-child(2) {{ color: #c9302c; }}
svg .axis {{ font-size: 11px; fill: #555; }}
</style></head>
<body>
<h1>{title}</h1>
<table class="summary">{summary}</table>
<h2>Outcomes</h2>
{outcomes}
<h2>Wall time per run</h2>
{wall}
<h2>Cost per run</h2>
{cost}
<h2>Failures by subtype</h2>
<table><thead><tr><th>subtype</th><th>runs</th><th>tasks</th></tr></thead><tbody>{kinds}</tbody></table>
<h2>Slowest runs</h2>
<table><thead><tr><th>task</th><th>status</th><th>wall</th><th>cost</th><th>turns</th></tr></thead>
<tbody>{slowest}</tbody></table>
<h2>Most expensive runs</h2>
<table><thead><tr><th>task</th><th>status</th><th>wall</th><th>cost</th><th>turns</th></tr></thead>
<tbody>{expensive}</tbody></table>
<h2>Every run</h2>
<table><thead><tr><th>task</th><th>status</th><th>subtype</th><th>check exit</th><th>turns</th><th>tokens</th>
<th>cost</th><th>wall</th><th>session</th></tr></thead><tbody>{runs}</tbody></table>
</body></html>
"""
)

"""A session's per-run report as one self-contained HTML page: a summary, a chart of context size and cumulative
cost per turn (inline SVG), and the turn table. Built only from the session's records (docs/sessions.md): the
``turn`` records give tokens and cost, the replayed ``history`` the calls each turn made, the audit records
which calls were refused. No script, no network, no external file."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

from drivetrain.jsontypes import JsonObject
from drivetrain.pricing import context_window, format_usd
from drivetrain.sessions.report import turn_log
from drivetrain.sessions.store import Record


@dataclass
class Call:
    id: str
    name: str
    input: JsonObject
    repeated: bool = False  # the same tool with the same input was called before in this session
    refused: str = ""  # denied / not_run / deferred, from the audit records


@dataclass
class Turn:
    turn: int
    stop_reason: str
    model: str
    usage: JsonObject
    cost_usd: float | None
    cumulative_cost_usd: float | None  # the sum of the known costs so far; None while none was known
    calls: list[Call] = field(default_factory=list)

    @property
    def context_tokens(self) -> int:
        u = self.usage
        tokens: int = (
            u.get("input_tokens", 0) + u.get("cache_creation_input_tokens", 0) + u.get("cache_read_input_tokens", 0)
        )
        return tokens


_REFUSED = {"deny": "denied", "defer": "deferred", "not_run": "not_run"}  # the audit record's kind, as shown


def turns_from_records(records: Sequence[Record]) -> list[Turn]:
    """One ``Turn`` per ``turn`` record, in order (``report.turn_log`` pairs each with its calls), with the
    running cost and the calls that repeat an earlier one."""
    turns: list[Turn] = []
    seen: set[str] = set()
    total: float | None = None
    for e in turn_log(records):
        total = total if e.cost_usd is None else (total or 0.0) + e.cost_usd
        t = Turn(e.turn, e.stop_reason or "", e.model or "", dict(e.usage), e.cost_usd, total)
        for c in e.calls:
            key = json.dumps([c.tool, c.input], sort_keys=True)
            t.calls.append(
                Call(c.id, c.tool, c.input, repeated=key in seen, refused=_REFUSED.get(c.decision or "", ""))
            )
            seen.add(key)
        turns.append(t)
    return turns


def render(session_id: str, records: Sequence[Record]) -> str:
    turns = turns_from_records(records)

    def first(kind: str) -> Record:
        return next((r for r in records if r.get("kind") == kind), {})

    session = first("session")
    result: Record = next((r for r in reversed(records) if r.get("kind") == "result"), {})
    model = session.get("model") or (turns[-1].model if turns else "")
    window = context_window(model) if model else None
    totals = {
        k: sum(t.usage.get(k, 0) for t in turns)
        for k in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    }
    cost = turns[-1].cumulative_cost_usd if turns else None
    summary = [
        ("session", session_id),
        ("model", model),
        ("cwd", session.get("cwd", "")),
        ("task", (first("prompt").get("text") or "")[:300]),
        ("result", result.get("subtype", "running or cut short")),
        ("turns", str(len(turns))),
        (
            "tokens",
            f"in {totals['input_tokens']:,} · cache write {totals['cache_creation_input_tokens']:,} · "
            f"cache read {totals['cache_read_input_tokens']:,} · out {totals['output_tokens']:,}",
        ),
        (
            "cost",
            format_usd(cost)
            + (
                ""
                if all(t.cost_usd is not None for t in turns)
                else " (some turns' cost unknown: no price for the model)"
            ),
        ),
        ("stop reasons", " → ".join(t.stop_reason for t in turns)),
    ]
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in summary)
    return _PAGE.format(
        title=escape(f"drivetrain · session {session_id}"),
        summary=rows,
        chart=chart_svg(turns),
        table=_table(turns, window),
    )


def _table(turns: list[Turn], window: int | None) -> str:
    head = (
        "turn",
        "stop_reason",
        "tools called",
        "input",
        "cache write",
        "cache read",
        "output",
        "context",
        "cost",
        "cumulative",
    )
    out = ["<table class='turns'><thead><tr>", *(f"<th>{h}</th>" for h in head), "</tr></thead><tbody>"]
    for t in turns:
        u = t.usage
        ctx = f"{t.context_tokens:,}" + (f" ({t.context_tokens / window:.0%})" if window else "")
        tools = ", ".join(_call_html(c) for c in t.calls) or "—"
        cells = (
            str(t.turn),
            escape(t.stop_reason),
            tools,
            f"{u.get('input_tokens', 0):,}",
            f"{u.get('cache_creation_input_tokens', 0):,}",
            f"{u.get('cache_read_input_tokens', 0):,}",
            f"{u.get('output_tokens', 0):,}",
            ctx,
            format_usd(t.cost_usd),
            format_usd(t.cumulative_cost_usd),
        )
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _call_html(c: Call) -> str:
    out = f"<span title='{escape(json.dumps(c.input, ensure_ascii=False)[:300])}'>{escape(c.name)}</span>"
    if c.repeated:
        out += " <span class='flag' title='the same call with the same input as before'>↻ repeated</span>"
    if c.refused:
        out += f" <span class='flag'>✗ {c.refused}</span>"
    return out


W, H, LEFT, RIGHT, TOP, BOTTOM = 880, 340, 70, 80, 34, 40  # the chart's size and margins, in px


def chart_svg(turns: list[Turn]) -> str:
    """Bars: the context each request sent (left axis, tokens). Line: the cumulative cost (right axis, USD)."""
    if not turns:
        return "<p>No model turns were recorded.</p>"
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    max_ctx = max(t.context_tokens for t in turns) or 1
    costs = [t.cumulative_cost_usd for t in turns]
    max_cost = max((c for c in costs if c is not None), default=None) or None
    slot = pw / len(turns)
    bar = max(1.0, slot * 0.7)
    parts = [
        f"<svg id='chart' xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H}' "
        f"viewBox='0 0 {W} {H}' role='img' aria-label='context size and cumulative cost per turn'>",
        f"<rect x='{LEFT}' y='{TOP}' width='{pw}' height='{ph}' fill='#fafafa' stroke='#ccc'/>",
    ]
    for i in range(5):  # gridlines and the two axes' labels
        y = TOP + ph - ph * i / 4
        parts.append(
            f"<line x1='{LEFT}' x2='{LEFT + pw}' y1='{y:.1f}' y2='{y:.1f}' stroke='#e4e4e4'/>"
            f"<text x='{LEFT - 6}' y='{y + 4:.1f}' text-anchor='end' class='axis'>"
            f"{_short(max_ctx * i / 4)}</text>"
        )
        if max_cost:
            parts.append(f"<text x='{LEFT + pw + 6}' y='{y + 4:.1f}' class='axis'>${max_cost * i / 4:.4f}</text>")
    for i, t in enumerate(turns):
        h = ph * t.context_tokens / max_ctx
        x = LEFT + slot * i + (slot - bar) / 2
        parts.append(
            f"<rect class='ctx-bar' data-turn='{t.turn}' x='{x:.2f}' y='{TOP + ph - h:.2f}' width='{bar:.2f}' "
            f"height='{h:.2f}' fill='#7aa6d6'><title>turn {t.turn}: context {t.context_tokens:,} tokens"
            f"</title></rect>"
        )
    step = max(1, len(turns) // 20)
    for i in range(0, len(turns), step):  # turn numbers under the bars, at most about 20
        parts.append(
            f"<text x='{LEFT + slot * (i + 0.5):.1f}' y='{TOP + ph + 16}' text-anchor='middle' "
            f"class='axis'>{turns[i].turn}</text>"
        )
    if max_cost:
        points = [(LEFT + slot * (i + 0.5), TOP + ph - ph * c / max_cost) for i, c in enumerate(costs) if c is not None]
        parts.append(
            "<polyline id='cost-line' fill='none' stroke='#d9534f' stroke-width='2' points='"
            + " ".join(f"{x:.2f},{y:.2f}" for x, y in points)
            + "'/>"
        )
        parts += [f"<circle class='cost-point' cx='{x:.2f}' cy='{y:.2f}' r='3' fill='#d9534f'/>" for x, y in points]
    parts.append(
        f"<text x='{LEFT}' y='{H - 6}' class='axis'>turn</text>"
        f"<text x='{LEFT}' y='{TOP - 12}' class='legend' fill='#3d6fa6'>■ context sent (tokens)</text>"
    )
    parts.append(
        f"<text x='{LEFT + pw}' y='{TOP - 12}' text-anchor='end' class='legend' fill='#d9534f'>"
        + ("— cumulative cost (USD)" if max_cost else "cost unknown: no price for the model")
        + "</text>"
    )
    parts.append("</svg>")
    return "".join(parts)


def _short(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e3:.0f}k" if n >= 1e4 else f"{n / 1e3:.1f}k" if n >= 1e3 else f"{n:.0f}"


# The start of a self-contained page and its common style (a format string: {title}), shared with the sweep report
PAGE_HEAD = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; margin: 12px 0; }}
th, td {{ border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }}
"""

_PAGE = (
    PAGE_HEAD
    + """table.turns td {{ text-align: right; font-variant-numeric: tabular-nums; }}
table.turns td:nth-child(2), table.turns td:nth-child(3) {{ text-align: left; }}
.flag {{ color: #b35900; font-size: 12px; }}
svg .axis {{ font-size: 11px; fill: #555; }}
svg .legend {{ font-size: 12px; }}
</style></head>
<body>
<h1>{title}</h1>
<table class="summary">{summary}</table>
<h2>Context size and cumulative cost per turn</h2>
{chart}
<h2>Turns</h2>
{table}
</body></html>
"""
)

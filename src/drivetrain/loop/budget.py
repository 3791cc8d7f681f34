"""Hard limits on a run, checked before every request, and the soft thresholds that warn ahead of them.

Each limit that is reached ends the run with its own subtype and the whole (valid) history; with
``wrap_up`` the run first makes one request without tools, asking for a summary of what was done and
what is left. At ``soft`` (a fraction) of a limit a ``LimitApproaching`` event goes to the observers,
once per limit; an observer may raise the limit then (``agent.budget`` is read at every check).

Tokens count everything the model read or wrote: input, output, cache writes and cache reads.

Every limit counts from the prompt that starts the invocation (``Spent`` marks what the session had used
then), as Claude Code's ``--max-turns`` does: a resumed session gets its turns again, not what is left of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from drivetrain.messages import Usage
from drivetrain.pricing import cost_usd

Limit = Literal["turns", "usd", "tokens", "wall_time_s", "tool_calls"]
# How a run that reached a limit ended (a part of the result's ``loop.state.Subtype``)
LimitSubtype = Literal[
    "error_max_turns", "error_max_budget_usd", "error_max_tokens_total", "error_max_wall_time", "error_max_tool_calls"
]
Measure = tuple[Limit, float, float]  # (limit, used, maximum)


@dataclass
class Budget:
    usd: float | None = None  # total cost (needs a known price for the model: else it cannot be enforced)
    tokens: int | None = None  # input + output + cache tokens, summed over the run's requests
    wall_time_s: float | None = None  # since the invocation (this process's part of it) started
    tool_calls: int | None = None  # calls the model asked for, run or not
    soft: float = 0.8  # warn at this fraction of each limit
    wrap_up: bool = False  # on reaching a limit: one last request without tools for a summary


@dataclass(frozen=True)
class Spent:
    """What a session had used when the current invocation began; the limits count what was used since."""

    turns: int = 0
    usage: Usage = field(default_factory=Usage)
    tool_calls: int = 0


SUBTYPES: dict[Limit, LimitSubtype] = {
    "turns": "error_max_turns",
    "usd": "error_max_budget_usd",
    "tokens": "error_max_tokens_total",
    "wall_time_s": "error_max_wall_time",
    "tool_calls": "error_max_tool_calls",
}
NAMES: dict[Limit, str] = {
    "turns": "turns",
    "usd": "cost (USD)",
    "tokens": "tokens",
    "wall_time_s": "wall time (s)",
    "tool_calls": "tool calls",
}


def total_tokens(u: Usage) -> int:
    return u.input_tokens + u.output_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens


def measures(
    budget: Budget, max_turns: int | None, *, turns: int, usage: Usage, model: str, elapsed_s: float, tool_calls: int
) -> list[Measure]:
    """(limit, used, maximum) for every limit that is set."""
    out: list[Measure] = []
    if max_turns is not None:
        out.append(("turns", turns, max_turns))
    if budget.usd is not None:
        cost = cost_usd(model, usage)
        if cost is not None:
            out.append(("usd", cost, budget.usd))
    if budget.tokens is not None:
        out.append(("tokens", total_tokens(usage), budget.tokens))
    if budget.wall_time_s is not None:
        out.append(("wall_time_s", elapsed_s, budget.wall_time_s))
    if budget.tool_calls is not None:
        out.append(("tool_calls", tool_calls, budget.tool_calls))
    return out


def reached(ms: list[Measure]) -> Measure | None:
    return next((m for m in ms if m[1] >= m[2]), None)


def approaching(ms: list[Measure], soft: float, warned: tuple[Limit, ...]) -> list[Measure]:
    return [m for m in ms if m[0] not in warned and soft * m[2] <= m[1] < m[2]]


def describe(limit: Limit, used: float, maximum: float) -> str:
    fmt: Callable[[float], str] = (
        (lambda x: f"{x:.4f}")
        if limit == "usd"
        else (lambda x: f"{x:.1f}")
        if limit == "wall_time_s"
        else (lambda x: f"{int(x):,}")
    )
    return f"Stopped: the {NAMES[limit]} limit ({fmt(maximum)}) was reached ({fmt(used)} used)."

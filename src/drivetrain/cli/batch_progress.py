"""A sweep's live progress: on a terminal one status line redrawn by rich (done, running, failed, tokens, cost,
runs per minute, ETA) with each failure printed above it; elsewhere one plain line per finished task."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from drivetrain.batch.results import TaskResult
from drivetrain.batch.sweep import Tally

STYLE = {"pass": "green", "fail": "yellow", "error": "red"}


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def status_line(t: Tally) -> str:
    return (
        f"done {t.done}/{t.total} · running {len(t.running)} · failed {t.failed} · {t.tokens:,} tokens · "
        f"${t.cost_usd:.4f} · {t.runs_per_minute:.1f} runs/min · ETA {_clock(t.eta_s)}"
    )


def result_line(r: TaskResult, t: Tally) -> str:
    cost = "–" if r.cost_usd is None else f"${r.cost_usd:.4f}"
    check = "" if r.check_exit is None else f" check {r.check_exit}"
    return f"[{t.done}/{t.total}] {r.id} {r.status} ({r.subtype}{check}) {r.turns} turns {cost} {r.wall_s:.1f} s"


class Progress:
    def __init__(self, stream: IO[str]):
        self.console = Console(file=stream, highlight=False)
        self.live: Live | None = None
        self.tally: Tally | None = None

    @contextlib.contextmanager
    def showing(self, tally: Tally, todo: int) -> Iterator[None]:
        self.tally = tally
        tally.started = time.monotonic()
        earlier = f" ({tally.done} done earlier)" if tally.done else ""
        self.console.print(f"drivetrain batch: {todo} tasks to run{earlier}", markup=False)
        if not self.console.is_terminal:
            yield
            return
        with Live(self, console=self.console, refresh_per_second=4, transient=False) as self.live:
            yield
        self.live = None

    def __rich__(self) -> Text:  # what Live redraws, so the rate and ETA move between events too
        return Text(status_line(self.tally)) if self.tally is not None else Text("")

    def finished(self, r: TaskResult, tally: Tally) -> None:
        if self.live is None:
            self.console.print(f"{result_line(r, tally)} · {status_line(tally)}", markup=False, soft_wrap=True)
        elif r.status != "pass":
            self.console.print(Text(result_line(r, tally), style=STYLE[r.status]))

    def summary(self, tally: Tally, out: Path) -> None:
        self.console.print(
            f"drivetrain batch: {tally.done} of {tally.total} tasks have a result, {tally.failed} "
            f"failed, ${tally.cost_usd:.4f}; see {out / 'results.jsonl'} and "
            f"`drivetrain batch report {out}`",
            markup=False,
            soft_wrap=True,
        )

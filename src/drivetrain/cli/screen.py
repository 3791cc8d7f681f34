"""What the interactive session shows, with rich: the model's text (streamed, then Markdown), one live line per
running call collapsed to a summary when it ends, Write/Edit as coloured diffs, errors in red.

Not a terminal (stdout piped): plain lines, no colour and no live display, as the plain mode always printed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rich.console import Console, Group
from rich.live import Live
from rich.markdown import Markdown
from rich.spinner import Spinner
from rich.text import Text

from drivetrain.cli.describe import describe
from drivetrain.control.approval import PendingCall
from drivetrain.loop.events import (
    ApprovalRequired,
    Compacted,
    Event,
    Finished,
    LimitApproaching,
    LimitReached,
    LoopDetected,
    ModelResponded,
    PermissionDecided,
    ToolCalled,
    ToolFinished,
)
from drivetrain.messages import ToolResultBlock, ToolUseBlock

RESULT_LINES = 6  # of an error result, shown in red under its call


@dataclass(frozen=True)
class Glyphs:
    call: str
    result: str
    error: str
    sep: str
    spinner: str
    pointer: str


UNICODE = Glyphs("●", "⎿", "✗", "·", "dots", "❯")
ASCII = Glyphs("*", "|", "x", "|", "line", ">")


def unicode_terminal(env: Mapping[str, str] = os.environ) -> bool:
    """Does the terminal's locale speak UTF-8? Python coerces a C locale to C.UTF-8 (PEP 538) for itself, so
    LC_CTYPE=C.UTF-8 beside a LANG of C or POSIX (or none) says the terminal itself is plain ASCII."""
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = env.get(name, "")
        if not value:
            continue
        utf8 = "UTF-8" in value.upper().replace("UTF8", "UTF-8")
        if name == "LC_CTYPE" and value == "C.UTF-8" and env.get("LANG", "C") in ("C", "POSIX"):
            return False
        return utf8
    return False


def make_console() -> Console:
    """stdout as rich sees it; on an ASCII terminal through an encoder that replaces what it cannot show."""
    if not sys.stdout.isatty():
        return Console(highlight=False, soft_wrap=True)  # a file or a pipe: a line is a line, however long
    if unicode_terminal():
        return Console(highlight=False)
    # the console keeps the stream for the process; closefd=False leaves stdout itself open
    stream = open(sys.stdout.fileno(), "w", encoding="ascii", errors="replace", closefd=False, buffering=1)  # noqa: SIM115
    return Console(file=stream, highlight=False, force_terminal=True)


def call_title(call: ToolUseBlock, width: int = 60) -> str:
    """``Bash(ls -la)``, ``Edit(src/app.py)``: the tool and its main argument, on one line."""
    inp = call.input
    main = next(
        (inp[k] for k in ("command", "file_path", "pattern", "path", "url") if isinstance(inp.get(k), str)), None
    )
    arg = main if main is not None else json.dumps(inp, ensure_ascii=False)
    arg = " ".join(arg.split())
    return f"{call.name}({arg[: width - 3] + '...' if len(arg) > width else arg})"


class Screen:
    """Everything the session prints goes through here; the live region shows what is running now."""

    def __init__(self, console: Console, diff_of: Callable[[ToolUseBlock], str] | None = None):
        self.console = console
        self.fancy = console.is_terminal
        self.glyphs = UNICODE if console.encoding.lower().startswith("utf") else ASCII
        self.diff_of = diff_of  # call -> unified diff text of a Write/Edit, made before it runs
        self.status: Callable[[], str] = lambda: ""  # the status line, shown under the live region
        self._live: Live | None = None
        self._model_since: float | None = None
        self._streamed = ""
        self._running: dict[str, tuple[ToolUseBlock, float]] = {}
        self._spinners: dict[str, Spinner] = {}  # one per line, so each turns from its own start
        self._pieces = 0  # streamed pieces of the reply: a local model streams one a token
        self._rate: Callable[[], float | None] = lambda: None  # the running generation's tokens/s, if measured
        self._diffs: dict[str, str] = {}  # call id -> its diff, until shown
        self.last_rate: float | None = None  # tokens/s of the last reply

    # -- plain output

    def say(self, text: str, style: str = "") -> None:
        self.console.print(Text(text, style=style if self.fancy else ""))

    def error(self, text: str) -> None:
        self.say(text, "red")

    def note(self, text: str) -> None:
        self.say(text, "dim")

    def diff(self, text: str) -> None:
        if not self.fancy:
            self.console.print(Text(text))
            return
        out = Text()
        for line in text.splitlines():
            style = (
                "bold"
                if line.startswith(("+++", "---"))
                else "green"
                if line.startswith("+")
                else "red"
                if line.startswith("-")
                else "cyan"
                if line.startswith("@@")
                else ""
            )
            out.append(line + "\n", style=style)
        self.console.print(out, end="")

    def show_call(self, call: PendingCall, text: str) -> None:
        """A call waiting for approval: its diff in colour (Write/Edit), else the description as it is."""
        self._diffs.pop(call.id, None)  # shown now: not again when it finishes
        head, _, body = text.partition("\n")
        self.say(head, "bold")
        (self.diff if call.name in ("Write", "Edit") and body.startswith("---") else self.say)(body)

    # -- the model's reply, as it comes

    def model_started(self, rate: Callable[[], float | None] = lambda: None) -> None:
        """A request is out: ``rate`` gives the generation's tokens/s so far when the model measures it."""
        self._model_since, self._streamed, self._pieces, self._rate = time.monotonic(), "", 0, rate
        self._refresh()

    def model_text(self, piece: str) -> None:
        self._streamed += piece
        self._pieces += 1
        self._refresh()

    def model_stopped(self, output_tokens: int = 0, rate: float | None = None) -> None:
        """The reply is in: ``rate`` is the generation's tokens/s if the model measured it, else it is the
        reply's tokens over its whole time (the prompt's evaluation included)."""
        if self._model_since is not None and output_tokens:
            took = time.monotonic() - self._model_since
            self.last_rate = rate or (output_tokens / took if took > 0 else None)
        self._model_since, self._streamed = None, ""
        self._spinners.pop("model", None)
        self._refresh()

    # -- events

    def event(self, event: Event) -> None:
        match event:
            case ModelResponded(response=r):
                if r.message.text.strip():
                    self._print_markdown(r.message.text.strip())
            case ToolCalled(call=c):
                if c.name in ("Write", "Edit") and self.diff_of is not None:
                    self._diffs[c.id] = self.diff_of(c)  # the file as it is before the call runs
                self._running[c.id] = (c, time.monotonic())
                if not self.fancy:
                    self.say(f"→ {c.name} {json.dumps(c.input, ensure_ascii=False)[:200]}")
                self._refresh()
            case PermissionDecided(behavior="deny", reason=reason) if not self.fancy:
                self.say(f"✗ denied: {reason[:200]}")  # the live screen shows it once, as the call's red result
            case ToolFinished(call=c, result=res, duration_ms=ms):
                self._finished(c, res, ms)
            case ApprovalRequired(pending=p):
                self.note(f"(paused: {len(p)} call(s) waiting for approval)")
            case LoopDetected() | LimitApproaching() | LimitReached() | Compacted():
                self.say(f"! {describe(event)}", "yellow")
            case Finished(result=res) if res.is_error:
                self.error(f"[{res.subtype}] {res.note or res.result}")

    def _finished(self, call: ToolUseBlock, res: ToolResultBlock, ms: float) -> None:
        g = self.glyphs
        started = self._running.pop(call.id, None)
        self._spinners.pop(call.id, None)
        text = res.text.strip()
        lines = text.splitlines()
        head = lines[0][:120] if lines else "(no output)"
        more = f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
        if not self.fancy:
            self.say(f"{'✗' if res.is_error else '←'} {head}")
        elif res.is_error:
            self.say(f"{g.call} {call_title(call)}", "red")
            self.error(
                "\n".join(
                    f"  {g.result} {line}" if i == 0 else f"    {line}"
                    for i, line in enumerate(lines[:RESULT_LINES] or ["(no output)"])
                )
            )
        else:
            took = f" {g.sep} {ms / 1000:.1f}s" if started else ""
            self.console.print(Text.assemble((f"{g.call} ", "green"), (call_title(call), "bold"), (took, "dim")))
            self.say(f"  {g.result} {head}{more}", "dim")
        shown = self._diffs.pop(call.id, None)
        if shown and not res.is_error:
            self.diff(shown)
        self._refresh()

    def _print_markdown(self, text: str) -> None:
        if self.fancy and self.glyphs is UNICODE:  # rich's Markdown draws bullets and rules in Unicode
            self.console.print(Markdown(text))
        else:
            self.console.print(text, markup=False, highlight=False)

    # -- the live region

    def pause(self) -> None:
        """Stop drawing the live region (a question is about to be asked in the terminal)."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def end(self, interrupted: bool = False) -> None:
        """The turn is over: nothing is running any more (``interrupted``: say so of each call that was)."""
        self.pause()
        for call, _ in self._running.values() if interrupted else ():
            self.error(f"{self.glyphs.call} {call_title(call)}\n  {self.glyphs.result} Interrupted by the user")
        self._running.clear()
        self._model_since = None

    def _refresh(self) -> None:
        if not self.fancy:
            return
        busy = self._model_since is not None or self._running
        if busy and self._live is None:
            self._live = Live(
                console=self.console,
                get_renderable=self._activity,
                transient=True,
                refresh_per_second=8,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        elif not busy:
            self.pause()

    def _activity(self) -> Group:
        g, now = self.glyphs, time.monotonic()
        rows: list[Spinner | Text] = []
        if self._model_since is not None:
            took = now - self._model_since
            label = f"thinking {g.sep} {took:.0f}s"
            rate = self._rate() or (self._pieces / took if self._pieces > 4 and took > 0 else None)
            if rate:
                label += f" {g.sep} {rate:.1f} tok/s"
            tail = " ".join(self._streamed.split())[-max(self.console.width - len(label) - 8, 0) :]
            rows.append(self._spinner("model", Text(label + (f" {g.sep} {tail}" if tail else ""), style="dim")))
        for call, since in self._running.values():
            rows.append(
                self._spinner(
                    call.id, Text.assemble((call_title(call), "bold"), (f" {g.sep} {now - since:.0f}s", "dim"))
                )
            )
        status = self.status()
        if status:
            rows.append(Text(status, style="dim", overflow="ellipsis", no_wrap=True))
        return Group(*rows)

    def _spinner(self, key: str, text: Text) -> Spinner:
        spinner = self._spinners.get(key)
        if spinner is None:
            spinner = self._spinners[key] = Spinner(self.glyphs.spinner, text)
        spinner.update(text=text)
        return spinner

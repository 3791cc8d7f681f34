"""The interactive session's keyboard, with prompt_toolkit: the prompt (history, multi-line, completion, the
status line, Shift-Tab), numbered choices, the keys that stop a running turn, and a terminal always put back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import termios
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

from prompt_toolkit import PromptSession
from prompt_toolkit.application import Application
from prompt_toolkit.completion import CompleteEvent, Completer, Completion, PathCompleter
from prompt_toolkit.document import Document
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input import create_input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys
from prompt_toolkit.layout import Layout, Window
from prompt_toolkit.layout.controls import FormattedTextControl
from prompt_toolkit.output import Output, create_output

from drivetrain.home import drivetrain_home


class Mentions(Completer):
    """Tab completes a slash command at the start of the line, and a file path after ``@``."""

    def __init__(self, cwd: Path, commands: dict[str, str]):
        self.commands = commands
        self.paths = PathCompleter(get_paths=lambda: [str(cwd)], expanduser=True)

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterator[Completion]:
        text = document.text_before_cursor
        if text.startswith("/") and " " not in text:
            for name, about in self.commands.items():
                if name.startswith(text):
                    yield Completion(name, -len(text), display_meta=about)
            return
        word = document.get_word_before_cursor(WORD=True)
        if word.startswith("@"):
            yield from self.paths.get_completions(Document(word[1:]), complete_event)


def prompt_session(
    cwd: Path, commands: dict[str, str], status: Callable[[], str], cycle_mode: Callable[[], None]
) -> PromptSession[str]:
    """The ``>`` prompt: Enter sends, Esc-Enter or a trailing backslash starts a new line, Tab completes,
    Shift-Tab cycles the permission mode, Ctrl-C clears the line (on an empty line it is the caller's)."""
    keys = KeyBindings()

    @keys.add("escape", "enter")
    def _(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @keys.add("enter")
    def _(event: KeyPressEvent) -> None:
        buf = event.current_buffer
        if buf.document.text_before_cursor.endswith("\\") and buf.document.is_cursor_at_the_end:
            buf.delete_before_cursor(1)
            buf.insert_text("\n")
        else:
            buf.validate_and_handle()

    @keys.add("s-tab")
    def _(event: KeyPressEvent) -> None:
        cycle_mode()
        event.app.invalidate()

    @keys.add("c-c")
    def _(event: KeyPressEvent) -> None:
        if event.current_buffer.text:
            event.current_buffer.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt)

    try:
        home = drivetrain_home()
        home.mkdir(parents=True, exist_ok=True)
        history: History = FileHistory(str(home / "prompt_history"))
    except OSError:  # a read-only home: the history lasts as long as the session
        history = InMemoryHistory()
    return PromptSession(
        history=history,
        completer=Mentions(cwd, commands),
        key_bindings=keys,
        bottom_toolbar=lambda: " " + status(),
        complete_while_typing=False,
        output=terminal_output(),
    )


def terminal_output() -> Output:
    """Where prompts are drawn: the terminal, even when stdout is piped (it then gets the plain lines only)."""
    return create_output(always_prefer_tty=True)


async def choose(options: list[str], pointer: str = "❯") -> int | None:
    """Numbered options: arrows move, Enter picks, a digit picks at once, Esc gives None. Ctrl-C raises
    KeyboardInterrupt. The list stays on the screen with the pick marked."""
    picked = [0]
    keys = KeyBindings()

    @keys.add("up")
    def _(event: KeyPressEvent) -> None:
        picked[0] = (picked[0] - 1) % len(options)

    @keys.add("down")
    def _(event: KeyPressEvent) -> None:
        picked[0] = (picked[0] + 1) % len(options)

    @keys.add("enter")
    def _(event: KeyPressEvent) -> None:
        event.app.exit(result=picked[0])

    for i in range(len(options)):

        @keys.add(str(i + 1))
        def _(event: KeyPressEvent, i: int = i) -> None:
            picked[0] = i
            event.app.exit(result=i)

    @keys.add("escape", eager=True)
    def _(event: KeyPressEvent) -> None:
        event.app.exit(result=None)

    @keys.add("c-c")
    def _(event: KeyPressEvent) -> None:
        event.app.exit(exception=KeyboardInterrupt)

    def lines() -> FormattedText:
        return FormattedText(
            [
                ("bold" if i == picked[0] else "", f"{pointer if i == picked[0] else ' '} {i + 1}. {text}\n")
                for i, text in enumerate(options)
            ]
        )

    app: Application[int | None] = Application(
        layout=Layout(Window(FormattedTextControl(lines), dont_extend_height=True, wrap_lines=True)),
        key_bindings=keys,
        full_screen=False,
        output=terminal_output(),
    )
    return await app.run_async()


class RunKeys:
    """While a turn runs, Esc or Ctrl-C stop it: the terminal is in raw mode, so Ctrl-C arrives as a key, and
    a question asked meanwhile (an approval) takes the keys over and gives them back."""

    def __init__(self) -> None:
        self.input = create_input(sys.stdin)

    @contextlib.contextmanager
    def watch(self, stop: Callable[[str], None]) -> Iterator[None]:
        def ready() -> None:
            for key in self.input.read_keys() + self.input.flush_keys():
                if key.key == Keys.Escape:
                    stop("Esc")
                elif key.key == Keys.ControlC:
                    stop("SIGINT")

        with self.input.raw_mode(), self.input.attach(ready):
            yield


@contextlib.contextmanager
def kept_terminal() -> Iterator[None]:
    """The terminal as it was (cooked mode, echo, a visible cursor) on any way out: a return, a crash, or a
    SIGHUP/SIGTERM/SIGQUIT that would otherwise end the process with the terminal still in raw mode."""
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)

    def restore() -> None:
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        with contextlib.suppress(OSError, ValueError):
            if sys.stdout.isatty():
                sys.stdout.write("\x1b[?25h")  # the cursor, which a live display hides
                sys.stdout.flush()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        restore()
        os._exit(128 + signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGHUP, signal.SIGQUIT)}
    try:
        yield
    finally:
        restore()
        for sig, handler in previous.items():
            signal.signal(sig, handler)

"""The interactive screen's live model line: the rate of a local generation while it runs (no terminal needed)."""

import io
import time

from rich.console import Console

from drivetrain.cli.interactive import Streamed
from drivetrain.cli.screen import Screen
from drivetrain.models.local import GenerationProgress


def rendered(screen: Screen) -> str:
    out = Console(file=io.StringIO(), width=80, color_system=None)
    out.print(screen._activity())
    return out.file.getvalue()


def test_the_model_line_shows_the_generations_rate_while_a_tool_call_streams_no_text():
    class Local:  # what the line reads of the local model: its running generation, under any wrappers
        name, last_stats, live = "local/x", None, None

    class Wrapper:
        def __init__(self, inner):
            self.inner, self.name = inner, inner.name

    local = Local()
    screen = Screen(Console(file=io.StringIO(), width=80))
    streamed = Streamed(Wrapper(local), screen)
    screen.model_started(streamed.live_rate)
    assert "tok/s" not in rendered(screen)  # the prompt is being read: no token yet
    local.live = GenerationProgress()
    local.live.first_token_at, local.live.tokens = time.perf_counter() - 2.0, 21
    line = rendered(screen)
    assert "thinking" in line and " tok/s" in line
    rate = float(line.split(" tok/s")[0].split()[-1])
    assert 0 < rate <= 10.0  # 20 tokens after the first, in at least 2 s
    local.live = None
    assert "tok/s" not in rendered(screen)  # between requests

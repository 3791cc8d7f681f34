"""Compaction: when the history nears the model's context window, replace it with a summary.

The summary is asked for in one request **without tools**, itself bounded: the conversation goes
as one transcript (so no tool blocks, which the API accepts only with tools defined), tool outputs
cut to a short head, and the oldest middle dropped if that is still too much, so the request fits
even when the history does not. The new history is one user message — the
user's original task, verbatim, then the summary — followed by the most recent rounds, cut only
where a round begins (an assistant message), so every tool_use keeps its result.
"""

from __future__ import annotations

import json

from drivetrain.loop.context import history_tokens
from drivetrain.messages import CHARS_PER_TOKEN, Message, TextBlock, ToolResultBlock, ToolUseBlock
from drivetrain.models.base import ModelRequest

SUMMARY_ASK = (
    "Stop here and write a summary of this conversation for your own later use; it will replace the "
    "conversation, so keep everything you need to go on: the task, what has been done (files changed, "
    "commands run, their results), what was found (names, values, errors, line numbers), and what is "
    "left to do. Do not call tools."
)
SUMMARY_HEAD = "[Summary of the work so far; the conversation before it was compacted to save context:]"
KEEP_ROUNDS = 2  # the most recent rounds kept as they are
RESULT_HEAD = 300  # characters of each tool result kept in the summary request
SUMMARY_TOKENS = 2048


def estimate_tokens(messages: list[Message], system: str = "") -> int:
    """About 4 bytes a token (``context.history_tokens``): enough to decide when to compact."""
    return history_tokens(messages) + len(system) // CHARS_PER_TOKEN


def original_task(history: list[Message]) -> str:
    first = next((m for m in history if m.role == "user"), None)
    return "\n".join(b.text for b in first.content if isinstance(b, TextBlock)) if first else ""


def summary_request(history: list[Message], system: str, window: int, focus: str = "") -> ModelRequest:
    """The request for the summary: the conversation as one transcript (no tool blocks, so no tools are needed),
    tool outputs cut short, and the oldest middle dropped until it fits. ``focus``: what the person wants the
    summary to keep above all (``/compact FOCUS``)."""
    parts = [_render(m) for m in history]
    budget = (int(window * 0.75) - SUMMARY_TOKENS) * CHARS_PER_TOKEN  # in characters
    dropped = 0
    while sum(len(p) for p in parts) + len(system) > budget and len(parts) > 2:
        parts.pop(1)  # the oldest after the task
        dropped += 1
    if dropped:
        parts.insert(1, f"[… {dropped} older message(s) left out …]")
    transcript = "\n\n".join(parts)
    if len(transcript) + len(system) > budget:  # one message alone is too big: keep its head and tail
        half = max(budget - len(system), 2000) // 2
        transcript = transcript[:half] + "\n[… cut …]\n" + transcript[-half:]
    ask = SUMMARY_ASK + (f" Above all, keep what concerns: {focus}" if focus else "")
    text = f"<conversation>\n{transcript}\n</conversation>\n\n{ask}"
    return ModelRequest([Message.user(text)], system, [], SUMMARY_TOKENS, tool_choice=None)


def _render(m: Message) -> str:
    out = []
    for b in m.content:
        if isinstance(b, TextBlock):
            out.append(f"[{m.role}] {b.text}")
        elif isinstance(b, ToolUseBlock):
            out.append(f"[{m.role} called {b.name}] {json.dumps(b.input, ensure_ascii=False)}")
        elif isinstance(b, ToolResultBlock):
            text = b.text
            if len(text) > RESULT_HEAD:
                text = text[:RESULT_HEAD] + f" […{len(text) - RESULT_HEAD} more characters]"
            out.append(f"[{'error' if b.is_error else 'result'}] {text}")
    return "\n".join(out)


def compacted(
    history: list[Message], summary: str, window: int | None = None, keep_rounds: int = KEEP_ROUNDS
) -> list[Message]:
    """The original task and the summary, then up to ``keep_rounds`` of the latest rounds as they were — as many
    as fit in half the window (at least the last one, whose long outputs are cut if it alone is too big)."""
    starts = [i for i, m in enumerate(history) if m.role == "assistant" and i > 0]
    cut = len(history)
    for start in reversed(starts[-keep_rounds:]):
        if cut < len(history) and window and estimate_tokens(history[start:]) > window // 2:
            break
        cut = start
    kept = history[cut:]
    if window and estimate_tokens(kept) > window // 2:
        kept = [_cut_long(m, window * 2 // max(len(kept), 1)) for m in kept]
    head = Message(
        "user", (TextBlock(original_task(history) or "(no task text)"), TextBlock(f"{SUMMARY_HEAD}\n{summary}"))
    )
    return [head, *kept]


def _cut_long(m: Message, limit: int) -> Message:
    """Tool results over ``limit`` characters kept as head and tail."""
    blocks = []
    for b in m.content:
        if isinstance(b, ToolResultBlock) and len(b.text) > limit:
            text = b.text
            b = ToolResultBlock(
                b.tool_use_id,
                f"{text[: limit // 2]}\n[… {len(text) - limit} characters cut to fit "
                f"the context …]\n{text[-limit // 2 :]}",
                b.is_error,
            )
        blocks.append(b)
    return Message(m.role, tuple(blocks))

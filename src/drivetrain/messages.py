"""Content blocks in the Anthropic Messages wire format, and the history linter.

The Anthropic shape is drivetrain's canonical in-memory format. Blocks the
harness does not interpret (server tool use and its results, images, documents,
anything new) are kept as ``RawBlock`` and sent back byte-for-byte as received.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from drivetrain.jsontypes import JsonObject

log = logging.getLogger("drivetrain.messages")

Role = Literal["user", "assistant"]
BlockType = Literal["text", "tool_use", "tool_result", "thinking", "redacted_thinking"]  # the blocks read here
# Why a response ended (the Anthropic API's stop_reason; the other providers' endings are mapped onto these).
StopReason = Literal[
    "end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal", "model_context_window_exceeded"
]
ToolResultContent = str | list[JsonObject]  # a tool result's text, or its content blocks as the wire has them


@dataclass(frozen=True)
class TextBlock:
    text: str
    citations: list[JsonObject] | None = None
    type: Literal["text"] = "text"

    def to_wire(self) -> JsonObject:
        out: JsonObject = {"type": "text", "text": self.text}
        if self.citations:
            out["citations"] = self.citations
        return out


@dataclass(frozen=True)
class ToolUseBlock:
    id: str
    name: str
    input: JsonObject
    type: Literal["tool_use"] = "tool_use"

    def to_wire(self) -> JsonObject:
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": self.input}


@dataclass(frozen=True)
class InvalidToolUseBlock(ToolUseBlock):
    """A tool call whose arguments could not be decoded into a JSON object. It is never run.

    It stays a ``ToolUseBlock`` (with ``input={}``) so the history keeps its shape, and the call is
    answered, like any other, by exactly one tool_result: the harness (``drivetrain.loop.calls``) sees
    ``input_error`` and denies the call with it plus the tool's schema, as an ``is_error`` result,
    before any hook, permission or tool sees the call. The raw arguments are quoted in
    ``input_error``, so the model sees what it wrote; ``input`` goes back to the server as ``{}``,
    since some servers refuse a history whose arguments are not JSON.
    """

    input_error: str = ""


@dataclass(frozen=True)
class ToolResultBlock:
    tool_use_id: str
    content: ToolResultContent
    is_error: bool = False
    type: Literal["tool_result"] = "tool_result"

    def to_wire(self) -> JsonObject:
        out: JsonObject = {"type": "tool_result", "tool_use_id": self.tool_use_id, "content": self.content}
        if self.is_error:
            out["is_error"] = True
        return out

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(b.get("text", "") for b in self.content if b.get("type") == "text")


@dataclass(frozen=True)
class ThinkingBlock:
    thinking: str
    signature: str
    type: Literal["thinking"] = "thinking"

    def to_wire(self) -> JsonObject:
        return {"type": "thinking", "thinking": self.thinking, "signature": self.signature}


@dataclass(frozen=True)
class RedactedThinkingBlock:
    data: str
    type: Literal["redacted_thinking"] = "redacted_thinking"

    def to_wire(self) -> JsonObject:
        return {"type": "redacted_thinking", "data": self.data}


@dataclass(frozen=True)
class RawBlock:
    """Any block drivetrain does not interpret (server_tool_use, *_tool_result, image, …), kept verbatim."""

    data: JsonObject

    @property
    def type(self) -> str:
        kind: str = self.data.get("type", "")
        return kind

    def to_wire(self) -> JsonObject:
        return self.data


Block = TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock | RawBlock

_PARSERS: dict[BlockType, Callable[[JsonObject], Block]] = {
    "text": lambda d: TextBlock(text=d["text"], citations=d.get("citations") or None),
    "tool_use": lambda d: ToolUseBlock(id=d["id"], name=d["name"], input=dict(d.get("input") or {})),
    "tool_result": lambda d: ToolResultBlock(
        tool_use_id=d["tool_use_id"], content=d.get("content", ""), is_error=bool(d.get("is_error", False))
    ),
    "thinking": lambda d: ThinkingBlock(thinking=d["thinking"], signature=d.get("signature", "")),
    "redacted_thinking": lambda d: RedactedThinkingBlock(data=d["data"]),
}


def block_from_wire(data: JsonObject) -> Block:
    parse = _PARSERS.get(data.get("type", ""))
    return parse(data) if parse else RawBlock(dict(data))


@dataclass(frozen=True)
class Message:
    role: Role
    content: tuple[Block, ...]

    @classmethod
    def user(cls, *content: Block | str) -> Message:
        return cls("user", tuple(TextBlock(c) if isinstance(c, str) else c for c in content))

    @classmethod
    def assistant(cls, *content: Block | str) -> Message:
        return cls("assistant", tuple(TextBlock(c) if isinstance(c, str) else c for c in content))

    @classmethod
    def from_wire(cls, data: JsonObject) -> Message:
        content = data["content"]
        if isinstance(content, str):
            return cls(data["role"], (TextBlock(content),))
        return cls(data["role"], tuple(block_from_wire(b) for b in content))

    def to_wire(self) -> JsonObject:
        return self._wire

    @cached_property  # immutable, and sent again with every later request of the run: convert once
    def _wire(self) -> JsonObject:
        return {"role": self.role, "content": [b.to_wire() for b in self.content]}

    # Asked of the history's messages before each request (placing prompt-cache breakpoints): found once each.
    @cached_property
    def cache_marked(self) -> bool:
        """Does a block of it carry a ``cache_control`` breakpoint (placed by whoever made the message)?"""
        return any(isinstance(b, dict) and "cache_control" in b for b in self._wire["content"])

    @cached_property
    def wire_chars(self) -> int:
        """The length of its wire form as JSON."""
        return len(json.dumps(self._wire))

    @cached_property  # summed over the whole history before every request: measured once per message
    def tokens(self) -> int:
        """Its estimated tokens (``CHARS_PER_TOKEN``), for deciding what fits the context window."""
        return (sum(_block_chars(b) for b in self.content) + 20) // CHARS_PER_TOKEN

    @cached_property  # messages are immutable and the loop asks this of every message each turn
    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


CHARS_PER_TOKEN = 4  # the estimate used throughout: a token is four bytes of the request


def _block_chars(b: Block) -> int:
    if isinstance(b, TextBlock):
        return len(b.text) + 20
    if isinstance(b, ToolResultBlock):
        return (len(b.content) if isinstance(b.content, str) else len(json.dumps(b.content))) + 60
    if isinstance(b, ToolUseBlock):
        return len(json.dumps(b.input)) + len(b.name) + 60
    return len(json.dumps(b.to_wire()))


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
        )

    def __sub__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens - other.input_tokens,
            self.output_tokens - other.output_tokens,
            self.cache_creation_input_tokens - other.cache_creation_input_tokens,
            self.cache_read_input_tokens - other.cache_read_input_tokens,
        )

    def to_wire(self) -> dict[str, int]:
        return dict(self.__dict__)


# --------------------------------------------------------------------- linter


class HistoryError(Exception):
    """The history breaks the tool_use / tool_result rules. Always a harness bug."""


@dataclass
class LintReport:
    problems: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.problems)


def lint(history: list[Message], start: int = 0, seen: Collection[str] | None = None) -> LintReport:
    """Every rule the Messages API enforces on tool use, checked before a request is sent.

    Messages before ``start`` are known good: only their tool_use ids count, ``seen`` when the caller
    carries them (a run does, so a long history is not walked again for each request), else collected.
    """
    report = LintReport()
    seen_ids = set(tool_use_ids(history[:start]) if seen is None else seen)
    for i, msg in enumerate(history[start:], start):
        for b in msg.content:
            if isinstance(b, TextBlock) and not b.text:
                report.problems.append(f"message {i}: empty text block")
        if msg.role == "assistant":
            for use in msg.tool_uses:
                if use.id in seen_ids:
                    report.problems.append(f"message {i}: duplicate tool_use id {use.id}")
                seen_ids.add(use.id)
            _check_answers(history, i, report)
        else:
            _check_results(history, i, report)
    return report


def tool_use_ids(messages: Iterable[Message]) -> frozenset[str]:
    return frozenset(u.id for m in messages for u in m.tool_uses)


def _check_answers(history: list[Message], i: int, report: LintReport) -> None:
    uses = history[i].tool_uses
    if not uses:
        return
    nxt = history[i + 1] if i + 1 < len(history) else None
    if nxt is None:
        report.problems.append(f"message {i}: tool_use ids {[u.id for u in uses]} have no tool_result message")
        return
    answered = [b.tool_use_id for b in nxt.content if isinstance(b, ToolResultBlock)]
    for use in uses:
        n = answered.count(use.id)
        if n != 1:
            report.problems.append(f"message {i}: tool_use {use.id} answered {n} times in message {i + 1}")


def _check_results(history: list[Message], i: int, report: LintReport) -> None:
    msg = history[i]
    prev = history[i - 1] if i > 0 else None
    offered = {u.id for u in prev.tool_uses} if prev is not None and prev.role == "assistant" else set()
    results_done = False
    for b in msg.content:
        if isinstance(b, ToolResultBlock):
            if results_done:
                report.problems.append(f"message {i}: tool_result {b.tool_use_id} after other content")
            if b.tool_use_id not in offered:
                report.problems.append(f"message {i}: stray tool_result {b.tool_use_id}")
        else:
            results_done = True


TRUNCATED_PLACEHOLDER = "This tool call was never run: the harness lost its result."


def repair(history: list[Message]) -> list[Message]:
    """Return a history the API will accept: strays dropped, missing results filled with is_error."""
    out: list[Message] = []
    seen_ids: set[str] = set()
    for i, msg in enumerate(history):
        blocks = [b for b in msg.content if not (isinstance(b, TextBlock) and not b.text)]
        if msg.role == "assistant":
            blocks = [b for b in blocks if not (isinstance(b, ToolUseBlock) and b.id in seen_ids)]
            seen_ids.update(b.id for b in blocks if isinstance(b, ToolUseBlock))
        else:
            prev = out[-1] if out and out[-1].role == "assistant" else None
            offered = [u.id for u in prev.tool_uses] if prev else []
            results: dict[str, ToolResultBlock] = {}
            for b in blocks:
                if isinstance(b, ToolResultBlock) and b.tool_use_id in offered and b.tool_use_id not in results:
                    results[b.tool_use_id] = b
            others = [b for b in blocks if not isinstance(b, ToolResultBlock)]
            filled = [results.get(uid) or ToolResultBlock(uid, TRUNCATED_PLACEHOLDER, is_error=True) for uid in offered]
            blocks = filled + others
        if not blocks:
            blocks = [TextBlock("(empty)")]
        out.append(Message(msg.role, tuple(blocks)))
        # an assistant tool_use with no following user message: answer it
        if msg.role == "assistant" and out[-1].tool_uses and (i + 1 == len(history) or history[i + 1].role != "user"):
            out.append(
                Message("user", tuple(ToolResultBlock(u.id, TRUNCATED_PLACEHOLDER, True) for u in out[-1].tool_uses))
            )
    return out


def ensure_valid(
    history: list[Message], *, strict: bool, start: int = 0, seen: Collection[str] | None = None
) -> list[Message]:
    """Lint before sending (``lint``). Strict (tests): raise. Otherwise repair and log loudly."""
    report = lint(history, start, seen)
    if not report:
        return history
    if strict:
        raise HistoryError("; ".join(report.problems))
    log.error("history repaired before sending (harness bug): %s", "; ".join(report.problems))
    return repair(history)

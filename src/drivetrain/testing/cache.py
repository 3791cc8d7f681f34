"""Token counts and a simulated prompt cache, for the scripted server's ``usage``.

Tokens: a deterministic stand-in for the real tokenizer. A request is the sequence of blocks the cache
sees, in the API's order: each tool definition, each system block, then each message's content blocks.
A block counts ``ceil(len(canonical JSON) / 4)`` tokens, its canonical JSON being the block without its
``cache_control``, keys sorted, compact. So the same block counts the same wherever it is.

Caching, as the Messages API documents it: a block with ``cache_control`` ends a prefix (everything up
to and including it). A prefix already written by an earlier request is *read*
(``cache_read_input_tokens``: the longest such prefix); the part from there up to the last breakpoint is
*written* (``cache_creation_input_tokens``) and every breakpoint's prefix is kept; the rest is plain
``input_tokens``. A prefix shorter than ``min_tokens`` (1024 for Sonnet and Opus) is neither written nor
read. The key of a prefix is its content and the model; ``tool_choice`` and ``thinking`` are part of the
key of the system and message parts, as changing them invalidates those on the real API.

Simplifications, each of which makes caching look no better than it is: a prefix is found only at a
breakpoint of the request (the real API also looks back up to 20 blocks before each breakpoint), and
nothing expires (the real cache lives 5 minutes, refreshed on each read; a scripted run is faster).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass

from drivetrain.jsontypes import JsonObject, JsonValue

MIN_CACHE_TOKENS = 1024


def block_tokens(block: JsonValue) -> int:
    if isinstance(block, dict) and "cache_control" in block:
        block = {k: v for k, v in block.items() if k != "cache_control"}
    return -(-len(canonical(block)) // 4)


def canonical(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def cache_sequence(body: JsonObject) -> list[tuple[JsonValue, bool]]:
    """The request's blocks in the cache's order, each with whether it carries cache_control.

    A ``("section", …)`` marker starts the system part and the messages part: it counts no tokens but is
    part of the key, so a changed tool_choice changes every later prefix."""
    seq: list[tuple[JsonValue, bool]] = [(("model", body.get("model")), False)]
    seq += [(t, isinstance(t, dict) and "cache_control" in t) for t in body.get("tools") or ()]
    seq.append((("section", "system", body.get("tool_choice"), body.get("thinking")), False))
    system = body.get("system")
    if isinstance(system, str) and system:
        seq.append(({"type": "text", "text": system}, False))
    elif isinstance(system, list):
        seq += [(b, isinstance(b, dict) and "cache_control" in b) for b in system]
    seq.append((("section", "messages"), False))
    for m in body.get("messages") or ():
        content = m.get("content") if isinstance(m, dict) else None
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        role = m.get("role") if isinstance(m, dict) else None
        seq.append((("role", role), False))  # a message boundary: the same blocks in other messages differ
        seq += [(b, isinstance(b, dict) and "cache_control" in b) for b in blocks]
    return seq


def count_tokens(body: JsonValue) -> int:
    if not isinstance(body, dict):
        return 1
    return max(1, sum(0 if isinstance(b, tuple) else block_tokens(b) for b, _ in cache_sequence(body)))


@dataclass
class CacheUsage:
    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int

    @property
    def total(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


class PromptCache:
    """The prefixes written so far, and the usage each new request is billed for."""

    def __init__(self, min_tokens: int = MIN_CACHE_TOKENS):
        self.min_tokens = min_tokens
        self._written: dict[str, int] = {}  # prefix key -> its tokens
        self._lock = threading.Lock()

    @property
    def prefixes(self) -> int:
        """How many prefixes have been written."""
        return len(self._written)

    def use(self, body: JsonValue) -> CacheUsage:
        """Bill ``body``: read the longest cached prefix at one of its breakpoints, write the rest up to the last."""
        if not isinstance(body, dict):
            return CacheUsage(1, 0, 0)
        h = hashlib.sha256()
        total = 0
        marks: list[tuple[str, int]] = []  # (prefix key, tokens up to and including the block)
        for block, marked in cache_sequence(body):
            h.update(
                canonical(
                    block
                    if not isinstance(block, dict) or "cache_control" not in block
                    else {k: v for k, v in block.items() if k != "cache_control"}
                ).encode()
            )
            h.update(b"\0")
            total += 0 if isinstance(block, tuple) else block_tokens(block)
            if marked and total >= self.min_tokens:
                marks.append((h.copy().hexdigest(), total))
        with self._lock:
            read = max((n for key, n in marks if key in self._written), default=0)
            end = max((n for _, n in marks), default=0)
            for key, n in marks:
                self._written[key] = n
        return CacheUsage(total - max(read, end), max(end - read, 0), read)

"""Script steps for the scripted server, and the helpers that build them.

A step is one scripted answer to one request. ``respond``/``reply`` answer with a
message (JSON, or SSE events when the request streams); ``http_error`` and
``raw_response`` answer with whatever status and body you give them.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypedDict, Unpack

from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.messages import Block, StopReason
from drivetrain.models.openai_wire import FinishReason

Expect = Callable[[JsonObject], object]
"""Called with the request body; raising (AssertionError, …) or returning False records a violation."""


@dataclass(frozen=True, kw_only=True)
class Step:
    expect: Expect | None = None
    delay: float = 0.0  # seconds to wait before answering
    hold: threading.Event | None = None  # answer only once it is set (the request is recorded at once)


@dataclass(frozen=True, kw_only=True)
class Respond(Step):
    content: list[JsonObject]
    stop_reason: StopReason | FinishReason  # ScriptedOpenAIServer maps a StopReason, sends a FinishReason as is
    stop_sequence: str | None = None
    usage: JsonObject | None = None
    model: str | None = None
    # streaming only: after this many SSE events send nothing for stall_seconds, connection kept
    # open, then send the rest (a client with an idle timeout gives up first)
    stall_after_events: int | None = None
    stall_seconds: float = 30.0
    # streaming only: after this many SSE events send an `error` event of this type and end the stream
    error_after_events: int | None = None
    error_type: str = "overloaded_error"


@dataclass(frozen=True, kw_only=True)
class RawResponse(Step):
    status: int
    body: JsonValue | bytes
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"

    def payload(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


# ----------------------------------------------------------------- block helpers


def text(s: str) -> JsonObject:
    return {"type": "text", "text": s}


def tool_call(name: str, input: JsonObject | str, id: str | None = None) -> JsonObject:
    """A client tool_use block. Without an id the server assigns ``toolu_<n>``.

    A string ``input`` is raw arguments text, sent verbatim by ``ScriptedOpenAIServer`` (for
    malformed-arguments tests)."""
    return {"type": "tool_use", "id": id, "name": name, "input": input if isinstance(input, str) else dict(input)}


def server_tool_use(name: str, input: JsonObject, id: str | None = None) -> JsonObject:
    """A server tool_use block (web_search, code_execution, …). Without an id: ``srvtoolu_<n>``."""
    return {"type": "server_tool_use", "id": id, "name": name, "input": dict(input)}


def thinking(text: str, signature: str = "scripted-signature") -> JsonObject:
    return {"type": "thinking", "thinking": text, "signature": signature}


# ----------------------------------------------------------------- step helpers


class RespondOptions(TypedDict, total=False):
    """``respond``'s keyword settings, which ``reply`` passes on."""

    usage: JsonObject | None
    model: str | None
    stop_sequence: str | None
    expect: Expect | None
    delay: float
    hold: threading.Event | None
    stall_after_events: int | None
    stall_seconds: float
    error_after_events: int | None
    error_type: str


def respond(
    content: Sequence[JsonObject | Block | str] | str,
    stop_reason: StopReason | FinishReason | None = None,
    usage: JsonObject | None = None,
    model: str | None = None,
    *,
    stop_sequence: str | None = None,
    expect: Expect | None = None,
    delay: float = 0.0,
    hold: threading.Event | None = None,
    stall_after_events: int | None = None,
    stall_seconds: float = 30.0,
    error_after_events: int | None = None,
    error_type: str = "overloaded_error",
) -> Respond:
    """Answer with a message. ``content``: wire dicts (raw dicts pass through verbatim),
    drivetrain blocks, or a string. ``stop_reason`` defaults to ``tool_use`` when a
    tool_use block is present, else ``end_turn``. ``usage`` keys override the estimates.
    Streaming only: ``stall_after_events`` goes quiet mid-stream (idle-timeout tests);
    ``error_after_events`` sends an ``error`` event mid-stream, as the real API does when overloaded.
    ``hold``: a ``threading.Event``; the answer waits until it is set (a test decides the moment)."""
    blocks = [text(content)] if isinstance(content, str) else [_wire(b) for b in content]
    if stop_reason is None:
        stop_reason = "tool_use" if any(b.get("type") == "tool_use" for b in blocks) else "end_turn"
    return Respond(
        content=blocks,
        stop_reason=stop_reason,
        stop_sequence=stop_sequence,
        usage=usage,
        model=model,
        expect=expect,
        delay=delay,
        hold=hold,
        stall_after_events=stall_after_events,
        stall_seconds=stall_seconds,
        error_after_events=error_after_events,
        error_type=error_type,
    )


def reply(text: str, stop_reason: StopReason | FinishReason = "end_turn", **kwargs: Unpack[RespondOptions]) -> Respond:
    """Answer with one text block."""
    return respond([{"type": "text", "text": text}], stop_reason, **kwargs)


def http_error(
    status: int,
    error_type: str,
    message: str,
    headers: dict[str, str] | None = None,
    *,
    expect: Expect | None = None,
    delay: float = 0.0,
) -> RawResponse:
    """Answer with an Anthropic-shaped error, e.g. ``http_error(529, "overloaded_error", "busy")``."""
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return RawResponse(status=status, body=body, headers=dict(headers or {}), expect=expect, delay=delay)


def raw_response(
    status: int,
    body: JsonValue | bytes,
    headers: dict[str, str] | None = None,
    content_type: str = "application/json",
    *,
    expect: Expect | None = None,
    delay: float = 0.0,
) -> RawResponse:
    """Answer with exactly this status and body (for wrong-shape answers)."""
    return RawResponse(
        status=status, body=body, headers=dict(headers or {}), content_type=content_type, expect=expect, delay=delay
    )


def _wire(block: JsonObject | Block | str) -> JsonObject:
    if isinstance(block, str):
        return text(block)
    if isinstance(block, dict):
        return dict(block)
    return block.to_wire()


_ID_PREFIX = {"tool_use": "toolu_", "server_tool_use": "srvtoolu_"}


def assign_ids(steps: list[Step]) -> list[Step]:
    """Copy the script, giving id-less tool_use blocks ``toolu_<n>`` ids not used elsewhere in it."""
    taken = {b.get("id") for s in steps if isinstance(s, Respond) for b in s.content}
    counter = 1
    out: list[Step] = []
    for step in steps:
        if isinstance(step, Respond):
            blocks = []
            for b in step.content:
                b = copy.deepcopy(b)
                prefix = _ID_PREFIX.get(b.get("type", ""))
                if prefix and not b.get("id"):
                    while f"{prefix}{counter}" in taken:
                        counter += 1
                    b["id"] = f"{prefix}{counter}"
                    taken.add(b["id"])
                blocks.append(b)
            step = replace(step, content=blocks)
        out.append(step)
    return out

"""``POST /v1/messages``: the Anthropic Messages API in front of the served Model.

Requests are checked with the validator the scripted test server uses too
(``drivetrain.models.anthropic_wire.validate``), so the API's rules live in one place; the SSE
events are built by that module as well. In front of the Anthropic provider, a checked request goes
upstream as it is (``passthrough``); in front of any other, through the Model seam.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING

from starlette.requests import Request

from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.messages import Block, Message, block_from_wire
from drivetrain.models.anthropic_wire import block_events, estimate_tokens, sse_events, validate
from drivetrain.models.base import ModelResponse
from drivetrain.serve.answer import Answer, StreamWriter, forwarded, from_model, json_response, read_json
from drivetrain.serve.calls import RequestFields
from drivetrain.serve.errors import HTTPError

if TYPE_CHECKING:
    from drivetrain.serve.state import ServeState

TOOL_CHOICES = ("auto", "any", "none", "tool")


async def messages(request: Request, state: ServeState) -> Answer:
    body = await read_json(request, state.settings.max_body)
    fields = request_fields(body)
    stream = body.get("stream") is True
    msg_id, model = f"msg_{uuid.uuid4().hex[:24]}", state.model.name
    writer = _Events(msg_id, model)
    upstream = state.upstream
    if upstream is not None and upstream.dialect == "anthropic":
        wire = [m.to_wire() for m in fields["messages"]]  # string contents as blocks, as the provider sends them
        sent = dict(body, model=model, messages=wire)
        return await forwarded(request, state, upstream, sent, writer if stream else None)
    return await from_model(request, state, fields, stream, writer, lambda r: to_message(r, msg_id, model))


async def count_tokens(request: Request, state: ServeState) -> Answer:
    """The provider's count when it is Anthropic; otherwise an estimate (about four characters a token)."""
    body = await read_json(request, state.settings.max_body)
    problems = validate(dict(body, max_tokens=1) if isinstance(body, dict) else body)
    if problems:
        raise HTTPError(400, "; ".join(problems))
    upstream = state.upstream
    if upstream is not None and upstream.dialect == "anthropic":
        return await forwarded(request, state, upstream, dict(body, model=state.model.name), None, "/count_tokens")
    return json_response({"input_tokens": estimate_tokens(body)})


def request_fields(body: JsonValue) -> RequestFields:
    """The ModelRequest fields of a Messages request body; HTTPError 400 naming the field if it is wrong."""
    problems = validate(body)
    if not problems:
        problems = _extra_problems(body)
    if problems:
        raise HTTPError(400, "; ".join(problems))
    history: list[Message] = []
    for i, m in enumerate(body["messages"]):
        content = m["content"]
        if isinstance(content, str):
            history.append(Message.from_wire(m))
            continue
        blocks: list[Block] = []
        for j, b in enumerate(content):
            try:
                blocks.append(block_from_wire(b))
            except KeyError as e:
                raise HTTPError(400, f"messages.{i}.content.{j}.{e.args[0]}: field required") from None
        history.append(Message(m["role"], tuple(blocks)))
    system = body.get("system") or ""
    if isinstance(system, list):
        system = "\n\n".join(b["text"] for b in system)
    fields: RequestFields = {
        "messages": history,
        "system": system,
        "tools": list(body.get("tools") or []),
        "max_tokens": body["max_tokens"],
    }
    if body.get("stop_sequences"):
        fields["stop_sequences"] = list(body["stop_sequences"])
    if body.get("temperature") is not None:
        fields["temperature"] = float(body["temperature"])
    choice = body.get("tool_choice")
    if choice:
        fields["tool_choice"] = "any" if choice["type"] == "tool" else choice["type"]
        if choice["type"] == "tool":  # one named tool: offer only that one, and require a call
            fields["tools"] = [t for t in fields["tools"] if t.get("name") == choice.get("name")]
    return fields


def _extra_problems(body: JsonObject) -> list[str]:
    """What ``validate`` leaves to the real API's schema check, which a server must do itself."""
    problems: list[str] = []
    if "stream" in body and not isinstance(body["stream"], bool):
        problems.append(f"stream: must be a boolean, got {body['stream']!r}")
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        problems.append("system: must be a string or a list of text blocks")
    stops = body.get("stop_sequences")
    if stops is not None and not (isinstance(stops, list) and all(isinstance(s, str) for s in stops)):
        problems.append("stop_sequences: must be a list of strings")
    for j, tool in enumerate(body.get("tools") or []):
        if not isinstance(tool, dict):
            problems.append(f"tools.{j}: must be an object")
    temperature = body.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 1
    ):
        problems.append(f"temperature: must be a number from 0 to 1, got {temperature!r}")
    choice = body.get("tool_choice")
    if choice is not None:
        names = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        if not isinstance(choice, dict) or choice.get("type") not in TOOL_CHOICES:
            problems.append(f"tool_choice.type: must be one of {', '.join(TOOL_CHOICES)}")
        elif choice["type"] == "tool" and choice.get("name") not in names:
            problems.append(f"tool_choice.name: {choice.get('name')!r} is not one of the request's tools")
    return problems


def to_message(response: ModelResponse, msg_id: str, model: str) -> JsonObject:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [b.to_wire() for b in response.content],
        "stop_reason": response.stop_reason,
        "stop_sequence": None,  # the Model seam does not say which one matched
        "usage": response.usage.to_wire(),
    }


class _Events(StreamWriter):
    """The Messages SSE stream. Text goes out as it is generated, as block 0; the other blocks once complete."""

    keepalive_frame = b'event: ping\ndata: {"type": "ping"}\n\n'
    upstream_start = b"event: message_start"

    def __init__(self, msg_id: str, model: str):
        self.msg_id, self.model = msg_id, model
        self.text_open = False

    def open(self) -> bytes:
        usage = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        start: JsonObject = {
            "id": self.msg_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        return _frame("message_start", {"type": "message_start", "message": start}) + self.keepalive_frame

    def text(self, piece: str) -> bytes:
        out = b""
        if not self.text_open:
            out = _frame(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            )
            self.text_open = True
        return out + _frame("content_block_delta", _text_delta(piece))

    def finish(self, response: ModelResponse, streamed: str) -> bytes:
        message = to_message(response, self.msg_id, self.model)
        return b"".join(_frame(event, data) for event, data in tail_events(message, streamed))

    def error(self, e: HTTPError) -> bytes:
        return _frame("error", {"type": "error", "error": {"type": "api_error", "message": e.message}})


def _frame(event: str, data: JsonObject) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def tail_events(message: JsonObject, streamed: str) -> list[tuple[str, JsonObject]]:
    """The events after message_start that make a client's accumulated message equal ``message``,
    given that ``streamed`` text was already sent as text block 0."""
    events = sse_events(message)
    if not streamed:
        return [e for e in events if e[0] not in ("message_start", "ping")]
    blocks = message["content"]
    if blocks and blocks[0].get("type") == "text" and blocks[0]["text"].startswith(streamed):
        rest_text, rest = blocks[0]["text"][len(streamed) :], blocks[1:]
    else:
        # The text was spread over several blocks (or reshaped after streaming): what was sent stands as
        # block 0, the rest of the text joins it, and the other blocks follow in their order.
        all_text = "".join(b["text"] for b in blocks if b.get("type") == "text")
        rest_text = all_text[len(streamed) :] if all_text.startswith(streamed) else ""
        rest = [b for b in blocks if b.get("type") != "text"]
    out: list[tuple[str, JsonObject]] = [("content_block_delta", _text_delta(rest_text))] if rest_text else []
    out.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
    for i, block in enumerate(rest, start=1):
        out += block_events(i, block)
    return out + events[-2:]  # message_delta (stop_reason, final usage) and message_stop


def _text_delta(piece: str, index: int = 0) -> JsonObject:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}

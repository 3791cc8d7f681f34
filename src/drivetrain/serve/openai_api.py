"""``POST /v1/chat/completions``: the OpenAI chat-completions API in front of the served Model.

The translation both ways is ``drivetrain.models.openai_wire``'s; this module checks the
request (the rules the OpenAI API enforces, with its ``messages.[i].field`` names) and
speaks the JSON and ``chat.completion.chunk`` SSE answers.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING

from starlette.requests import Request

from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.models.anthropic_wire import validate
from drivetrain.models.base import ModelResponse, ToolChoice
from drivetrain.models.openai_wire import from_chat_messages, from_chat_tools, to_chat_completion
from drivetrain.serve.answer import Answer, StreamWriter, forwarded, from_model, read_json
from drivetrain.serve.calls import RequestFields
from drivetrain.serve.errors import HTTPError

if TYPE_CHECKING:
    from drivetrain.serve.state import ServeState

ROLES = ("system", "developer", "user", "assistant", "tool")
TOOL_CHOICES: dict[str, ToolChoice] = {"auto": "auto", "none": "none", "required": "any"}


async def chat_completions(request: Request, state: ServeState) -> Answer:
    body = await read_json(request, state.settings.max_body)
    fields = request_fields(body)
    stream = body.get("stream") is True
    completion_id, model = f"chatcmpl-{uuid.uuid4().hex[:24]}", state.model.name
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    writer = _Chunks(completion_id, model, include_usage)
    upstream = state.upstream
    if upstream is not None and upstream.dialect == "openai":
        return await forwarded(request, state, upstream, dict(body, model=model), writer if stream else None)
    return await from_model(
        request, state, fields, stream, writer, lambda r: to_chat_completion(r, model) | {"id": completion_id}
    )


def request_fields(body: JsonValue) -> RequestFields:
    """The ModelRequest fields of a chat request body; HTTPError 400 naming the field if it is wrong."""
    if not isinstance(body, dict):
        raise _bad("request body is not a JSON object", None)
    _check_params(body)
    _check_messages(body.get("messages"))
    tools = body.get("tools") or []
    _check_tools(tools)
    system, history = from_chat_messages(body["messages"])
    fields: RequestFields = {"messages": history, "system": system, "tools": from_chat_tools(tools)}
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    if max_tokens:
        fields["max_tokens"] = max_tokens
    stop = body.get("stop")
    if stop:
        fields["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if body.get("temperature") is not None:
        fields["temperature"] = float(body["temperature"])
    choice = body.get("tool_choice")
    if isinstance(choice, str):
        fields["tool_choice"] = TOOL_CHOICES[choice]
    elif isinstance(choice, dict):  # one named function: offer only that one, and require a call
        fields["tool_choice"] = "any"
        fields["tools"] = [t for t in fields["tools"] if t["name"] == choice["function"]["name"]]
    # What the model will see must also pass the Messages rules (first message from the user, no empty text, …).
    problems = validate(
        {"model": "m", "max_tokens": 1, "tools": fields["tools"], "messages": [m.to_wire() for m in history]}
    )
    if problems:
        raise _bad("messages: after translation to the model's history: " + "; ".join(problems), "messages")
    return fields


def _bad(message: str, param: str | None) -> HTTPError:
    return HTTPError(400, message, param=param)


def _check_params(body: JsonObject) -> None:
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _bad("model: field required (a non-empty string)", "model")
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise _bad(f"{name}: must be an integer >= 1, got {value!r}", name)
    if body.get("n") not in (None, 1):
        raise _bad(f"n: only 1 choice is supported, got {body['n']!r}", "n")
    if "stream" in body and not isinstance(body["stream"], (bool, type(None))):
        raise _bad(f"stream: must be a boolean, got {body['stream']!r}", "stream")
    if body.get("stream_options") is not None and not isinstance(body["stream_options"], dict):
        raise _bad("stream_options: must be an object", "stream_options")
    temperature = body.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2
    ):
        raise _bad(f"temperature: must be a number from 0 to 2, got {temperature!r}", "temperature")
    _check_tool_choice(body.get("tool_choice"), body.get("tools") or [])
    stop = body.get("stop")
    if (
        stop is not None
        and not isinstance(stop, str)
        and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop))
    ):
        raise _bad("stop: must be a string or a list of strings", "stop")


def _check_tool_choice(choice: JsonValue, tools: list[JsonValue]) -> None:
    if choice is None or (isinstance(choice, str) and choice in TOOL_CHOICES):
        return
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    names = {(t.get("function") or {}).get("name") for t in tools if isinstance(t, dict)}
    if not (isinstance(choice, dict) and choice.get("type") == "function" and name in names):
        raise _bad(
            "tool_choice: must be auto, none, required or {type: function, function: {name}} naming one "
            "of the request's tools",
            "tool_choice",
        )


def _check_messages(messages: JsonValue) -> None:
    if not isinstance(messages, list) or not messages:
        raise _bad("messages: field required (a non-empty list)", "messages")
    pending: set[str] = set()  # tool_call ids of the last assistant message not yet answered
    for i, m in enumerate(messages):
        where = f"messages.[{i}]"
        if not isinstance(m, dict):
            raise _bad(f"{where}: must be an object", where)
        role = m.get("role")
        if role not in ROLES:
            raise _bad(f"{where}.role: must be one of {', '.join(ROLES)}, got {role!r}", f"{where}.role")
        if role != "tool" and pending:
            raise _bad(
                f"{where}: the assistant message's tool_calls {sorted(pending)} must each be answered by a "
                "tool message before any other message",
                "messages",
            )
        content = m.get("content")
        if role == "assistant":
            if content is not None and not isinstance(content, (str, list)):
                raise _bad(f"{where}.content: must be a string, a list of parts or null", f"{where}.content")
            pending = _check_tool_calls(m.get("tool_calls"), where)
        elif role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise _bad(f"{where}.tool_call_id: field required", f"{where}.tool_call_id")
            if call_id not in pending:
                raise _bad(
                    f"{where}.tool_call_id: a tool message must answer a tool_call of the preceding "
                    f"assistant message; {call_id!r} is not one (or is answered twice)",
                    f"{where}.tool_call_id",
                )
            pending.discard(call_id)
            _check_content(content, where)
        else:
            _check_content(content, where)
    if pending:
        raise _bad(f"messages: the assistant message's tool_calls {sorted(pending)} have no tool message", "messages")


def _check_content(content: JsonValue, where: str) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _bad(f"{where}.content: field required (a string or a list of parts)", f"{where}.content")
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            continue
        if kind == "image_url" and isinstance(part.get("image_url"), dict) and part["image_url"].get("url"):
            continue
        raise _bad(
            f"{where}.content.[{j}]: a part must be {{type: text, text}} or {{type: image_url, image_url: {{url}}}}",
            f"{where}.content.[{j}]",
        )


def _check_tool_calls(calls: JsonValue, where: str) -> set[str]:
    if calls is None:
        return set()
    if not isinstance(calls, list):
        raise _bad(f"{where}.tool_calls: must be a list", f"{where}.tool_calls")
    ids: set[str] = set()
    for k, call in enumerate(calls):
        at = f"{where}.tool_calls.[{k}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not call["id"]:
            raise _bad(f"{at}.id: field required", f"{at}.id")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise _bad(f"{at}.function.name: field required", f"{at}.function.name")
        if not isinstance(fn.get("arguments", ""), str):
            raise _bad(f"{at}.function.arguments: must be a string of JSON", f"{at}.function.arguments")
        ids.add(call["id"])
    return ids


def _check_tools(tools: JsonValue) -> None:
    if not isinstance(tools, list):
        raise _bad("tools: must be a list", "tools")
    for j, tool in enumerate(tools):
        at = f"tools.[{j}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise _bad(f"{at}: only function tools are supported", at)
        fn = tool.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise _bad(f"{at}.function.name: field required", f"{at}.function.name")
        if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
            raise _bad(f"{at}.function.parameters: must be a JSON Schema object", f"{at}.function.parameters")


class _Chunks(StreamWriter):
    """The ``chat.completion.chunk`` stream: text as it is generated, tool calls once complete, then [DONE]."""

    keepalive_frame = b": keep-alive\n\n"

    def __init__(self, completion_id: str, model: str, include_usage: bool):
        self.id, self.model, self.include_usage = completion_id, model, include_usage
        self.created = int(time.time())

    def open(self) -> bytes:
        return self.chunk({"role": "assistant", "content": ""})

    def text(self, piece: str) -> bytes:
        return self.chunk({"content": piece})

    def finish(self, response: ModelResponse, streamed: str) -> bytes:
        completion = to_chat_completion(response, self.model)
        choice = completion["choices"][0]
        message = choice["message"]
        content = message.get("content") or ""
        out: list[bytes] = []
        if content.startswith(streamed) and content[len(streamed) :]:
            out.append(self.chunk({"content": content[len(streamed) :]}))
        extra = {k: v for k, v in message.items() if k not in ("role", "content", "tool_calls") and v is not None}
        if extra:
            out.append(self.chunk(extra))
        calls = message.get("tool_calls") or []
        if calls:
            out.append(self.chunk({"tool_calls": [dict(call, index=k) for k, call in enumerate(calls)]}))
        out.append(self.chunk({}, finish_reason=choice["finish_reason"]))
        if self.include_usage:
            out.append(
                _data(
                    {
                        "id": self.id,
                        "object": "chat.completion.chunk",
                        "created": self.created,
                        "model": self.model,
                        "choices": [],
                        "usage": completion["usage"],
                    }
                )
            )
        return b"".join(out) + b"data: [DONE]\n\n"

    def error(self, e: HTTPError) -> bytes:
        return _data({"error": {"message": e.message, "type": "server_error", "param": None, "code": None}})

    def chunk(self, delta: JsonObject, finish_reason: str | None = None) -> bytes:
        return _data(
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            }
        )


def _data(data: JsonObject) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()

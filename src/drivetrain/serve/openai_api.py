"""``POST /v1/chat/completions``: the OpenAI chat-completions API in front of the served Model.

The translation both ways is ``drivetrain.models.openai_wire``'s; this module checks the
request (the rules the OpenAI API enforces, with its ``messages.[i].field`` names) and
speaks the JSON and ``chat.completion.chunk`` SSE answers.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from drivetrain.models.anthropic_wire import validate
from drivetrain.models.base import ModelResponse
from drivetrain.models.openai_wire import from_chat_messages, from_chat_tools, to_chat_completion
from drivetrain.serve.exchange import Exchange, HTTPError, StreamWriter, stream_call

ROLES = ("system", "developer", "user", "assistant", "tool")


def chat_completions(ex: Exchange) -> None:
    body = ex.json_body()
    fields = request_fields(body)
    completion_id, model = f"chatcmpl-{uuid.uuid4().hex[:24]}", ex.server.model.name
    if body.get("stream") is True:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        writer = _Chunks(ex, completion_id, model, include_usage)
        stream_call(ex.call(stream=True, **fields), writer, commit_after=ex.server.commit_after,
                    keepalive_every=ex.server.keepalive_every)
    else:
        response = ex.respond(ex.call(**fields))
        ex.send_json(to_chat_completion(response, model) | {"id": completion_id})


def request_fields(body: Any) -> dict:
    """The ModelRequest fields of a chat request body; HTTPError 400 naming the field if it is wrong."""
    if not isinstance(body, dict):
        raise _bad("request body is not a JSON object", None)
    _check_params(body)
    _check_messages(body.get("messages"))
    tools = body.get("tools") or []
    _check_tools(tools)
    system, history = from_chat_messages(body["messages"])
    fields: dict[str, Any] = {"messages": history, "system": system, "tools": from_chat_tools(tools)}
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    if max_tokens:
        fields["max_tokens"] = max_tokens
    stop = body.get("stop")
    if stop:
        fields["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    # What the model will see must also pass the Messages rules (first message from the user, no empty text, …).
    problems = validate({"model": "m", "max_tokens": 1, "tools": fields["tools"],
                         "messages": [m.to_wire() for m in history]})
    if problems:
        raise _bad("messages: after translation to the model's history: " + "; ".join(problems), "messages")
    return fields


def _bad(message: str, param: str | None) -> HTTPError:
    return HTTPError(400, message, param=param)


def _check_params(body: dict) -> None:
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
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str) and not (
            isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise _bad("stop: must be a string or a list of strings", "stop")


def _check_messages(messages: Any) -> None:
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
            raise _bad(f"{where}: the assistant message's tool_calls {sorted(pending)} must each be answered by a "
                       "tool message before any other message", "messages")
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
                raise _bad(f"{where}.tool_call_id: a tool message must answer a tool_call of the preceding "
                           f"assistant message; {call_id!r} is not one (or is answered twice)", f"{where}.tool_call_id")
            pending.discard(call_id)
            _check_content(content, where)
        else:
            _check_content(content, where)
    if pending:
        raise _bad(f"messages: the assistant message's tool_calls {sorted(pending)} have no tool message", "messages")


def _check_content(content: Any, where: str) -> None:
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
        raise _bad(f"{where}.content.[{j}]: a part must be {{type: text, text}} or {{type: image_url, image_url: {{url}}}}",
                   f"{where}.content.[{j}]")


def _check_tool_calls(calls: Any, where: str) -> set[str]:
    if calls is None:
        return set()
    if not isinstance(calls, list):
        raise _bad(f"{where}.tool_calls: must be a list", f"{where}.tool_calls")
    ids = set()
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


def _check_tools(tools: Any) -> None:
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

    def __init__(self, ex: Exchange, completion_id: str, model: str, include_usage: bool):
        super().__init__(ex)
        self.id, self.model, self.include_usage = completion_id, model, include_usage
        self.created = int(time.time())

    def open(self) -> None:
        self.chunk({"role": "assistant", "content": ""})

    def text(self, piece: str) -> None:
        self.chunk({"content": piece})

    def finish(self, response: ModelResponse, streamed: str) -> None:
        completion = to_chat_completion(response, self.model)
        choice = completion["choices"][0]
        message = choice["message"]
        content = message.get("content") or ""
        if content.startswith(streamed) and content[len(streamed):]:
            self.chunk({"content": content[len(streamed):]})
        extra = {k: v for k, v in message.items() if k not in ("role", "content", "tool_calls") and v is not None}
        if extra:
            self.chunk(extra)
        calls = message.get("tool_calls") or []
        if calls:
            self.chunk({"tool_calls": [dict(call, index=k) for k, call in enumerate(calls)]})
        self.chunk({}, finish_reason=choice["finish_reason"])
        if self.include_usage:
            self.send({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                       "choices": [], "usage": completion["usage"]})
        self.exchange.send_frame(b"data: [DONE]\n\n")

    def error(self, e: HTTPError) -> None:
        self.send({"error": {"message": e.message, "type": "server_error", "param": None, "code": None}})

    def chunk(self, delta: dict, finish_reason: str | None = None) -> None:
        self.send({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                   "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]})

    def send(self, data: dict) -> None:
        self.exchange.send_frame(f"data: {json.dumps(data)}\n\n".encode())

"""ScriptedOpenAIServer: the scripted server speaking OpenAI chat completions (``POST /v1/chat/completions``).

The same steps as ``ScriptedServer`` (``respond``, ``reply``, ``http_error``, ``raw_response``),
the same strictness. A ``respond`` step is answered as a ``chat.completion`` (or, when the request
streams, as ``chat.completion.chunk`` events, a usage chunk when ``stream_options.include_usage``
asks for one, and ``data: [DONE]``):

- text blocks become ``content``; tool_use blocks become ``tool_calls`` (a string input is sent
  verbatim as the arguments; streamed arguments arrive split across several chunks); other
  blocks are left out.
- ``stop_reason`` is mapped (end_turn → stop, tool_use → tool_calls, max_tokens → length,
  refusal → content_filter) or may be given as a finish_reason itself (``"stop"``, ``"length"``, …).
- ``usage`` keys are chat ones (``prompt_tokens``, ``completion_tokens``, ``prompt_tokens_details``).

This module is independent of drivetrain's own translation (``drivetrain.models.openai_wire``), so
tests that use it check that translation instead of repeating it.
"""

from __future__ import annotations

import json
import re
import time
from typing import get_args

from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.models.anthropic_wire import estimate_tokens, pieces
from drivetrain.models.openai_wire import FinishReason

from .script import RawResponse, Respond
from .server import Request, ScriptedServer, _Stream

CHAT_PATH = "/v1/chat/completions"
_FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}
_FINISH_REASONS: frozenset[str] = frozenset(get_args(FinishReason))


class ScriptedOpenAIServer(ScriptedServer):
    """Serve ``steps`` as OpenAI chat completions. See the module docstring and ``drivetrain.testing``."""

    endpoint = CHAT_PATH

    def _answer_without_step(self, req: Request) -> RawResponse | None:
        return None

    def _validate(self, body: JsonValue) -> list[str]:
        return validate_chat(body)

    def _reply(self, step: Respond, body: JsonObject, n: int) -> RawResponse | _Stream:
        completion = build_completion(step, body, f"chatcmpl-scripted-{n:04d}")
        if not body.get("stream"):
            return RawResponse(status=200, body=completion, delay=step.delay, hold=step.hold)
        include_usage = (body.get("stream_options") or {}).get("include_usage") is True
        events = [_sse(c) for c in completion_chunks(completion, include_usage)] + [b"data: [DONE]\n\n"]
        return _Stream(events, step, completion["usage"])

    def _fault_chunks(self, body: JsonValue, n: int) -> list[bytes]:
        completion = self._fault_completion(body, n)
        include_usage = isinstance(body, dict) and (body.get("stream_options") or {}).get("include_usage") is True
        return [_sse(c) for c in completion_chunks(completion, include_usage)] + [b"data: [DONE]\n\n"]

    def _fault_whole(self, body: JsonValue, n: int) -> bytes:
        return json.dumps(self._fault_completion(body, n)).encode()

    def _unfinished(self, chunks: list[bytes]) -> list[bytes]:
        """The stream without its finish_reason, usage and ``[DONE]``."""
        return [c for c in chunks if b'"finish_reason": null' in c and b'"choices": []' not in c]

    def _fault_completion(self, body: JsonValue, n: int) -> JsonObject:
        step = Respond(
            content=[{"type": "text", "text": "This answer never arrives whole: a scripted fault."}],
            stop_reason="end_turn",
        )
        return build_completion(step, body, f"chatcmpl-fault-{n:04d}")

    def _error(self, status: int, error_type: str, message: str) -> RawResponse:
        return RawResponse(status=status, body=_error_body(error_type, message))

    def _error_event(self, step: Respond) -> bytes:
        return _sse(_error_body(step.error_type, "scripted mid-stream error"))


def _error_body(error_type: str, message: str) -> JsonObject:
    return {"error": {"message": message, "type": error_type, "param": None, "code": None}}


def _sse(data: JsonObject) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


# ----------------------------------------------------------------- answers


def build_completion(step: Respond, body: JsonValue, completion_id: str) -> JsonObject:
    body = body if isinstance(body, dict) else {}
    text = "".join(b.get("text", "") for b in step.content if b.get("type") == "text")
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {
                "name": b["name"],
                "arguments": b["input"] if isinstance(b["input"], str) else json.dumps(b["input"]),
            },
        }
        for b in step.content
        if b.get("type") == "tool_use"
    ]
    message: JsonObject = {"role": "assistant", "content": text or None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    finish = step.stop_reason if step.stop_reason in _FINISH_REASONS else _FINISH.get(step.stop_reason, "stop")
    usage = {"prompt_tokens": estimate_tokens(body), "completion_tokens": max(1, len(json.dumps(message)) // 4)}
    usage.update(step.usage or {})
    usage.setdefault("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": step.model or body.get("model") or "scripted-model",
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": usage,
    }


def completion_chunks(completion: JsonObject, include_usage: bool) -> list[JsonObject]:
    """The chunks the real API streams for ``completion``: role, content pieces, each tool call
    (its id and name, then its arguments in pieces), the finish_reason, and the usage chunk."""
    base = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: JsonObject, finish: str | None = None) -> JsonObject:
        out = dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])
        return out | {"usage": None} if include_usage else out

    chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
    chunks += [chunk({"content": p}) for p in pieces(message["content"] or "")]
    for i, call in enumerate(message.get("tool_calls") or []):
        head = {
            "index": i,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        chunks.append(chunk({"tool_calls": [head]}))
        chunks += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
            for p in pieces(call["function"]["arguments"])
        ]
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append(dict(base, choices=[], usage=completion["usage"]))
    return chunks


# ----------------------------------------------------------------- validation

_ROLES = ("system", "developer", "user", "assistant", "tool")
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def validate_chat(body: JsonValue) -> list[str]:
    """The problems the real chat-completions API would reject this request body for."""
    if not isinstance(body, dict):
        return ["request body is not a JSON object"]
    problems: list[str] = []
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model: field required (a non-empty string)")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            problems.append(f"{key}: must be an integer >= 1, got {value!r}")
    if body.get("stream_options") is not None and not body.get("stream"):
        problems.append("stream_options: only allowed when stream is true")
    _check_tools(body.get("tools"), problems)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages: field required (a non-empty list)")
        return problems
    _check_messages(messages, problems)
    return problems


def _check_tools(tools: JsonValue, problems: list[str]) -> None:
    if tools is None:
        return
    if not isinstance(tools, list) or not tools:
        problems.append("tools: must be a non-empty list (leave it out when there are none)")
        return
    names: set[str] = set()
    for j, tool in enumerate(tools):
        fn: JsonValue = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            problems.append(f"tools[{j}]: a function tool with a name matching {_TOOL_NAME.pattern} is required")
            continue
        if name in names:
            problems.append(f"tools[{j}]: tool names must be unique ({name!r} repeated)")
        names.add(name)
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            problems.append(f"tools[{j}].function.parameters: must be a JSON schema object")


def _check_messages(messages: list[JsonValue], problems: list[str]) -> None:
    awaiting: list[str] = []  # tool_call ids of the last assistant message not answered yet
    seen_ids: set[str] = set()
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role not in _ROLES:
            problems.append(f"{where}: role must be one of {', '.join(_ROLES)}, got {role!r}")
            continue
        if role == "tool":
            call_id = m.get("tool_call_id")
            if call_id in awaiting:
                awaiting.remove(call_id)
            else:
                problems.append(
                    f"{where}: messages with role 'tool' must be a response to a preceding message "
                    f"with 'tool_calls' ({call_id!r} is not awaiting an answer)"
                )
            _check_content(m.get("content"), where, ("text",), problems)
            continue
        if awaiting:
            problems.append(_unanswered(i, awaiting))
            awaiting = []
        if role == "assistant":
            awaiting = _check_assistant(m, where, seen_ids, problems)
        else:
            kinds = ("text", "image_url", "input_audio", "file") if role == "user" else ("text",)
            _check_content(m.get("content"), where, kinds, problems)
    if awaiting:
        problems.append(_unanswered(len(messages), awaiting))


def _unanswered(i: int, ids: list[str]) -> str:
    return (
        f"messages[{i}]: an assistant message with 'tool_calls' must be followed by tool messages "
        f"responding to each 'tool_call_id'. The following tool_call_ids did not have response "
        f"messages: {', '.join(ids)}"
    )


def _check_assistant(m: JsonObject, where: str, seen_ids: set[str], problems: list[str]) -> list[str]:
    calls = m.get("tool_calls")
    if calls is not None and (not isinstance(calls, list) or not calls):
        problems.append(f"{where}.tool_calls: must be a non-empty list when present")
        calls = []
    if m.get("content") is None and not calls:
        problems.append(f"{where}: content is required unless tool_calls is given")
    elif m.get("content") is not None:
        _check_content(m["content"], where, ("text", "refusal"), problems)
    ids = []
    for j, call in enumerate(calls or []):
        fn = call.get("function") if isinstance(call, dict) else None
        call_id = call.get("id") if isinstance(call, dict) else None
        if not isinstance(call_id, str) or not call_id or call.get("type") != "function" or not isinstance(fn, dict):
            problems.append(f"{where}.tool_calls[{j}]: needs an id, type 'function' and a function")
            continue
        if call_id in seen_ids:
            problems.append(f"{where}.tool_calls[{j}]: duplicate tool_call id {call_id!r}")
        seen_ids.add(call_id)
        if not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
            problems.append(f"{where}.tool_calls[{j}].function: name and arguments must be strings")
        ids.append(call_id)
    return ids


def _check_content(content: JsonValue, where: str, kinds: tuple[str, ...], problems: list[str]) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not content:
        problems.append(f"{where}.content: must be a string or a non-empty list of content parts")
        return
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds:
            problems.append(f"{where}.content[{j}]: part type must be one of {', '.join(kinds)}, got {kind!r}")
        elif kind == "text" and not isinstance(part.get("text"), str):
            problems.append(f"{where}.content[{j}]: a text part needs a text string")
        elif kind == "image_url" and not isinstance((part.get("image_url") or {}).get("url"), str):
            problems.append(f"{where}.content[{j}]: an image_url part needs image_url.url")

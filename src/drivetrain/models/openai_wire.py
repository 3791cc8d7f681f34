"""Translation between drivetrain's canonical (Anthropic-shaped) messages and OpenAI chat completions.

Pure functions, both ways: the OpenAI provider uses ``to_chat_*`` and ``from_chat_completion``;
``drivetrain serve`` uses ``from_chat_*`` and ``to_chat_completion``. What chat cannot express is
mapped as closely as it can be and said so here:

- ``is_error`` tool results: chat has no flag, so the content gets ``ERROR_PREFIX`` ("Error: ");
  reading a tool message back, that prefix sets ``is_error`` again.
- thinking blocks are dropped (chat has no signed reasoning to send back).
- images become ``image_url`` parts (base64 as a data URL); an image inside a tool result moves to
  a user message right after the tool messages (chat tool messages carry text only). Other raw
  blocks (server tools, documents) are dropped with a logged warning.
- arguments that are not a JSON object never become a runnable call: see ``InvalidToolUseBlock``.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import TYPE_CHECKING, Literal, TypeAlias

from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.messages import (
    Block,
    InvalidToolUseBlock,
    Message,
    RawBlock,
    StopReason,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from drivetrain.models.base import ModelResponse

if TYPE_CHECKING:  # the openai SDK's request types, for what the provider hands it
    from openai.types.chat import (
        ChatCompletionContentPartImageParam,
        ChatCompletionContentPartParam,
        ChatCompletionMessageFunctionToolCallParam,
        ChatCompletionMessageParam,
        ChatCompletionToolMessageParam,
        ChatCompletionToolParam,
    )
    from openai.types.shared_params import FunctionDefinition

log = logging.getLogger("drivetrain.models.openai")

# Why a chat completion ended (``choices[].finish_reason``).
FinishReason: TypeAlias = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]

ERROR_PREFIX = "Error: "
_FINISH_TO_STOP: dict[str | None, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
_STOP_TO_FINISH: dict[str | None, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}
_EMPTY_SCHEMA = {"type": "object", "properties": {}}


def finish_reason_to_stop_reason(finish_reason: str | None) -> StopReason:
    return _FINISH_TO_STOP.get(finish_reason or "stop", "end_turn")


def stop_reason_to_finish_reason(stop_reason: str | None) -> FinishReason:
    return _STOP_TO_FINISH.get(stop_reason or "end_turn", "stop")


# ------------------------------------------------------------ canonical -> chat


def to_chat_messages(system: str, messages: list[Message]) -> list[ChatCompletionMessageParam]:
    out: list[ChatCompletionMessageParam] = [{"role": "system", "content": system}] if system else []
    for msg in messages:
        out += _assistant_to_chat(msg) if msg.role == "assistant" else _user_to_chat(msg)
    return out


def _assistant_to_chat(msg: Message) -> list[ChatCompletionMessageParam]:
    text = "".join(b.text for b in msg.content if isinstance(b, TextBlock))
    calls: list[ChatCompletionMessageFunctionToolCallParam] = [
        {
            "id": b.id,
            "type": "function",
            "function": {"name": b.name, "arguments": json.dumps(b.input, ensure_ascii=False)},
        }
        for b in msg.content
        if isinstance(b, ToolUseBlock)
    ]
    for b in msg.content:
        if isinstance(b, RawBlock):
            log.warning("dropped a %r block from an assistant message: chat completions cannot carry it", b.type)
    if not text and not calls:
        return []  # thinking only: nothing chat can say
    if calls:
        return [{"role": "assistant", "content": text or None, "tool_calls": calls}]
    return [{"role": "assistant", "content": text or None}]


def _user_to_chat(msg: Message) -> list[ChatCompletionMessageParam]:
    tool_messages: list[ChatCompletionToolMessageParam] = []
    parts: list[ChatCompletionContentPartParam] = []
    for b in msg.content:
        if isinstance(b, ToolResultBlock):
            tool_messages.append(
                {
                    "role": "tool",
                    "tool_call_id": b.tool_use_id,
                    "content": (ERROR_PREFIX if b.is_error else "") + b.text,
                }
            )
            images = [p for p in map(_image_part, b.content if isinstance(b.content, list) else []) if p]
            if images:
                parts += [{"type": "text", "text": f"(the image(s) returned by tool call {b.tool_use_id})"}, *images]
        elif isinstance(b, TextBlock):
            parts.append({"type": "text", "text": b.text})
        elif (part := _image_part(b.to_wire())) is not None:
            parts.append(part)
        else:
            log.warning("dropped a %r block from a user message: chat completions cannot carry it", b.type)
    out: list[ChatCompletionMessageParam] = [*tool_messages]
    if not parts:
        return out
    first = parts[0]
    out.append({"role": "user", "content": first["text"] if len(parts) == 1 and first["type"] == "text" else parts})
    return out


def _image_part(block: JsonObject) -> ChatCompletionContentPartImageParam | None:
    source: JsonValue = (block.get("source") or {}) if block.get("type") == "image" else {}
    if source.get("type") == "base64":
        return {
            "type": "image_url",
            "image_url": {"url": f"data:{source.get('media_type')};base64,{source.get('data')}"},
        }
    if source.get("type") == "url":
        return {"type": "image_url", "image_url": {"url": source.get("url")}}
    return None


def to_chat_tools(tools: list[JsonObject]) -> list[ChatCompletionToolParam]:
    out: list[ChatCompletionToolParam] = []
    for t in tools:
        if "input_schema" not in t:  # a server tool (web search, …): chat has no equivalent
            log.warning("tool %r is not offered over chat completions: it has no input_schema", t.get("name"))
            continue
        fn: FunctionDefinition = {"name": t["name"]}
        if t.get("description"):
            fn["description"] = t["description"]
        fn["parameters"] = t["input_schema"]
        out.append({"type": "function", "function": fn})
    return out


def to_chat_completion(response: ModelResponse, model: str) -> JsonObject:
    message = _assistant_to_chat(response.message) or [{"role": "assistant", "content": ""}]
    return {
        "id": response.id or f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message[0],
                "logprobs": None,
                "finish_reason": stop_reason_to_finish_reason(response.stop_reason),
            }
        ],
        "usage": _usage_to_chat(response.usage),
    }


def _usage_to_chat(u: Usage) -> JsonObject:
    # chat counts cached prompt tokens inside prompt_tokens; the canonical input_tokens excludes them
    prompt = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": u.output_tokens,
        "total_tokens": prompt + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cache_read_input_tokens},
    }


# ------------------------------------------------------------ chat -> canonical


def from_chat_completion(data: JsonObject) -> ModelResponse:
    choice = (data.get("choices") or [{}])[0] or {}
    message = choice.get("message") or {}
    blocks: list[Block] = []
    if text := _text(message.get("content")):
        blocks.append(TextBlock(text))
    if refusal := message.get("refusal"):
        blocks.append(TextBlock(str(refusal)))
    calls = list(message.get("tool_calls") or [])
    if not calls and message.get("function_call"):  # the legacy single-function form
        calls = [{"function": message["function_call"]}]
    blocks += [tool_use_from_chat(c) for c in calls]
    reason: StopReason = "refusal" if refusal else finish_reason_to_stop_reason(choice.get("finish_reason"))
    if calls and reason == "end_turn":  # some servers say "stop" after tool calls
        reason = "tool_use"
    return ModelResponse(
        tuple(blocks), reason, _usage(data.get("usage")), data.get("model") or "", data.get("id") or ""
    )


def tool_use_from_chat(call: JsonObject) -> ToolUseBlock:
    """One chat ``tool_calls`` entry as a block; undecodable arguments give an ``InvalidToolUseBlock``."""
    fn = call.get("function") or {}
    call_id = call.get("id") or f"call_{uuid.uuid4().hex[:24]}"
    name = str(fn.get("name") or "")
    raw = fn.get("arguments")
    if isinstance(raw, dict):  # some servers send the object itself
        return ToolUseBlock(call_id, name, raw)
    if raw is None or not str(raw).strip():  # a call without arguments
        return ToolUseBlock(call_id, name, {})
    try:
        value = json.loads(raw)
        problem = None if isinstance(value, dict) else f"they are JSON {type(value).__name__}, not an object"
    except ValueError as e:
        value, problem = None, f"they are not valid JSON ({e})"
    if problem is None:
        return ToolUseBlock(call_id, name, value)
    quoted = raw if len(raw) <= 2000 else raw[:2000] + f"… ({len(raw)} characters)"
    return InvalidToolUseBlock(
        call_id,
        name,
        {},
        input_error=(f"The arguments of this {name} call could not be used: {problem}. You sent: {quoted}"),
    )


def _usage(u: JsonObject | None) -> Usage:
    if not u:
        return Usage()
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return Usage(max(0, (u.get("prompt_tokens") or 0) - cached), u.get("completion_tokens") or 0, 0, cached)


def _text(content: JsonValue) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text") or p.get("refusal") or "") for p in content if isinstance(p, dict))
    return content or ""


def from_chat_messages(messages: list[JsonObject]) -> tuple[str, list[Message]]:
    """A chat request's messages as system text and canonical history.

    Consecutive ``tool`` messages become one user message of tool_result blocks; a user message
    right after them joins that message (after the results), as the canonical shape requires.
    """
    system: list[str] = []
    history: list[Message] = []
    results_open = False  # the last message holds tool results and may take more
    for m in messages:
        role = m.get("role")
        if role in ("system", "developer"):
            system.append(_text(m.get("content")))
        elif role == "tool":
            block = _tool_result(m)
            if results_open:
                history[-1] = Message("user", history[-1].content + (block,))
            else:
                history.append(Message("user", (block,)))
        elif role == "user":
            blocks = _user_blocks(m.get("content"))
            if results_open:
                history[-1] = Message("user", history[-1].content + blocks)
            else:
                history.append(Message("user", blocks))
        elif role == "assistant":
            text = _text(m.get("content"))
            calls = tuple(tool_use_from_chat(c) for c in m.get("tool_calls") or [])
            history.append(Message("assistant", ((TextBlock(text),) if text else ()) + calls))
        else:
            log.warning("dropped a chat message with role %r", role)
        results_open = role == "tool"
    return "\n\n".join(s for s in system if s), history


def _tool_result(m: JsonObject) -> ToolResultBlock:
    text = _text(m.get("content"))
    is_error = text.startswith(ERROR_PREFIX)
    return ToolResultBlock(str(m.get("tool_call_id") or ""), text[len(ERROR_PREFIX) :] if is_error else text, is_error)


def _user_blocks(content: JsonValue) -> tuple[Block, ...]:
    if not isinstance(content, list):
        return (TextBlock(str(content or "")),)
    blocks: list[Block] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            blocks.append(TextBlock(str(part.get("text") or "")))
        elif kind == "image_url":
            blocks.append(RawBlock(_image_block(str((part.get("image_url") or {}).get("url") or ""))))
        else:
            log.warning("dropped a %r part from a user message: drivetrain cannot carry it", kind)
    return tuple(blocks)


def _image_block(url: str) -> JsonObject:
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def from_chat_tools(tools: list[JsonObject]) -> list[JsonObject]:
    out: list[JsonObject] = []
    for t in tools:
        fn = t.get("function") if t.get("type", "function") == "function" else None
        if not isinstance(fn, dict) or not fn.get("name"):
            log.warning("dropped a chat tool drivetrain cannot offer: %s", json.dumps(t)[:200])
            continue
        spec: JsonObject = {"name": fn["name"]}
        if fn.get("description"):
            spec["description"] = fn["description"]
        spec["input_schema"] = fn.get("parameters") or dict(_EMPTY_SCHEMA)
        out.append(spec)
    return out

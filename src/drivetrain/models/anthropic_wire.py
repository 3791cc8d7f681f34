"""The Messages API wire rules: request validation and the SSE event stream of a response message.

Shared by ``drivetrain serve`` and the scripted test server (``drivetrain.testing``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from drivetrain.jsontypes import JsonObject, JsonValue

if TYPE_CHECKING:
    from drivetrain.messages import Message

# ----------------------------------------------------------------- responses


def estimate_tokens(body: JsonValue) -> int:
    """Rough input tokens (4 characters each) of what the model reads; ignores ``stream``."""
    if not isinstance(body, dict):
        return 1
    seen = [body.get("system"), body.get("tools"), body.get("messages")]
    return max(1, len(json.dumps(seen)) // 4)


def sse_events(message: JsonObject) -> list[tuple[str, JsonObject]]:
    """The event sequence the real API streams for ``message``."""
    skeleton = dict(
        message, content=[], stop_reason=None, stop_sequence=None, usage=dict(message["usage"], output_tokens=1)
    )
    events: list[tuple[str, JsonObject]] = [
        ("message_start", {"type": "message_start", "message": skeleton}),
        ("ping", {"type": "ping"}),
    ]
    for i, block in enumerate(message["content"]):
        events += block_events(i, block)
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": message["usage"]}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def block_events(i: int, block: JsonObject) -> list[tuple[str, JsonObject]]:
    """The start, delta and stop events of content block ``block`` at index ``i``."""
    kind = block.get("type")
    if kind == "text":
        start = {k: v for k, v in block.items() if k != "citations"} | {"text": ""}
        deltas = [{"type": "citations_delta", "citation": c} for c in block.get("citations") or []]
        deltas += [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
    elif kind in ("tool_use", "server_tool_use"):
        start = dict(block, input={})
        # the real API opens with an empty partial_json; clients must cope
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in ["", *pieces(json.dumps(block["input"]))]]
    elif kind == "thinking":
        start = dict(block, thinking="", signature="")
        deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces(block["thinking"])]
        deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
    else:
        start, deltas = block, []
    return [
        ("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}),
        *(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}) for d in deltas),
        ("content_block_stop", {"type": "content_block_stop", "index": i}),
    ]


def pieces(s: str, n: int = 3) -> list[str]:
    """``s`` cut into (at most) ``n`` pieces, as a stream would send it."""
    size = max(1, -(-len(s) // n))
    return [s[k : k + size] for k in range(0, len(s), size)]


# ----------------------------------------------------------------- prompt caching

EPHEMERAL = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4  # the API rejects a request with more blocks carrying cache_control
# The API caches no prefix shorter than 1024 tokens (2048-4096 for some models); a breakpoint in front of
# less is wasted, and leaving it out keeps small requests as they were. ~3 characters a token: generous.
MIN_CACHE_CHARS = 3 * 1024
_UNMARKABLE = ("thinking", "redacted_thinking")  # cache_control cannot sit on these blocks


def with_cache_breakpoints(params: JsonObject, history: Sequence[Message] | None = None) -> JsonObject:
    """``params`` with ``cache_control`` breakpoints (never more than 3), the rest untouched and not copied.

    - the stable prefix: the last tool definition, or the system prompt when there are no tools;
    - the last block of the last message: this request's whole prefix is written to the cache;
    - the last block of the user message before it, where the previous request ended (in a tool loop it
      is the previous request's last message): this request reads what that one wrote, even where the
      server would not look back far enough from the last breakpoint to find it.

    Tools and system are before the messages in the cache's order, so a history rewritten in the middle
    (clearing old results) still reads the tools. The blocks are copied where marked: a message's
    cached wire form is shared with the history. Breakpoints the caller placed (a client of
    `drivetrain serve`, say) stand, and none are added.

    ``history``: the messages ``params["messages"]`` was made from, when the caller has them. Whether a
    message carries a breakpoint and how large it is are then found once per message
    (``Message.cache_marked``, ``Message.wire_chars``), not again on every request of a long run.
    """
    messages = list(params.get("messages") or ())
    if history is not None:
        placed = any(m.cache_marked for m in history) or _tools_or_system_marked(params)
        sizes: Iterable[int] = (m.wire_chars for m in history)
    else:
        placed = bool(breakpoints(params))
        sizes = (len(json.dumps(m)) for m in messages)
    if placed:
        return params
    out = dict(params)
    tools, system = params.get("tools"), params.get("system")
    size = len(json.dumps(tools)) if tools else 0
    if tools:
        if size >= MIN_CACHE_CHARS:
            out["tools"] = [*tools[:-1], dict(tools[-1], cache_control=EPHEMERAL)]
        size += len(json.dumps(system)) if system else 0
    elif system:
        size = len(json.dumps(system))
        if size >= MIN_CACHE_CHARS:
            blocks = [{"type": "text", "text": system}] if isinstance(system, str) else list(system)
            out["system"] = [*blocks[:-1], dict(blocks[-1], cache_control=EPHEMERAL)]
    if not messages:
        return out
    first = 0  # messages[:first] make the request large enough to cache (sizes are measured up to there)
    for n in sizes:
        if size >= MIN_CACHE_CHARS:
            break
        size, first = size + n, first + 1
    if size < MIN_CACHE_CHARS:
        return out
    last = len(messages) - 1
    previous = next((i for i in range(last - 1, -1, -1) if messages[i].get("role") == "user"), None)
    for i in (previous, last):
        if i is not None and i >= first - 1:
            messages[i] = _mark_last_block(messages[i])
    out["messages"] = messages
    return out


def _tools_or_system_marked(params: JsonObject) -> bool:
    system = params.get("system")
    return any(
        isinstance(b, dict) and "cache_control" in b
        for b in (*(params.get("tools") or ()), *(system if isinstance(system, list) else ()))
    )


def _mark_last_block(message: JsonObject) -> JsonObject:
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return message
    for j in range(len(content) - 1, -1, -1):
        block = content[j]
        if isinstance(block, dict) and block.get("type") not in _UNMARKABLE:
            return dict(message, content=[*content[:j], dict(block, cache_control=EPHEMERAL), *content[j + 1 :]])
    return message


def breakpoints(body: JsonObject) -> list[tuple[str, JsonValue]]:
    """Where ``body`` carries cache_control: (where, the cache_control value)."""
    found: list[tuple[str, JsonValue]] = []
    for j, t in enumerate(body.get("tools") or ()):
        if isinstance(t, dict) and "cache_control" in t:
            found.append((f"tools.{j}", t["cache_control"]))
    system = body.get("system")
    for j, b in enumerate(system if isinstance(system, list) else ()):
        if isinstance(b, dict) and "cache_control" in b:
            found.append((f"system.{j}", b["cache_control"]))
    for i, m in enumerate(body.get("messages") or ()):
        content = m.get("content") if isinstance(m, dict) else None
        for j, b in enumerate(content if isinstance(content, list) else ()):
            if isinstance(b, dict) and "cache_control" in b:
                found.append((f"messages.{i}.content.{j}", b["cache_control"]))
    return found


def _check_cache_control(body: JsonObject, problems: list[str]) -> None:
    marks = breakpoints(body)
    if len(marks) > MAX_BREAKPOINTS:
        problems.append(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(marks)}."
        )
    for where, mark in marks:
        if not isinstance(mark, dict) or mark.get("type") != "ephemeral" or set(mark) - {"type", "ttl"}:
            problems.append(
                f'{where}.cache_control: must be {{"type": "ephemeral"}} (optionally with a ttl), got {mark!r}'
            )
        elif mark.get("ttl", "5m") not in ("5m", "1h"):
            problems.append(f"{where}.cache_control.ttl: must be '5m' or '1h', got {mark.get('ttl')!r}")
        elif where.startswith("messages.") and _block_at(body, where).get("type") in _UNMARKABLE:
            problems.append(f"{where}: cache_control cannot be set on {_block_at(body, where)['type']} blocks")


def _block_at(body: JsonObject, where: str) -> JsonValue:
    _, i, _, j = where.split(".")
    return body["messages"][int(i)]["content"][int(j)]


# ----------------------------------------------------------------- validation


def validate(body: JsonValue) -> list[str]:
    """The problems the real Messages API would reject this request body for."""
    if not isinstance(body, dict):
        return ["request body is not a JSON object"]
    problems: list[str] = []
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model: field required (a non-empty string)")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        problems.append(f"max_tokens: field required (an integer >= 1), got {max_tokens!r}")
        max_tokens = None
    _check_thinking(body.get("thinking"), max_tokens, problems)
    _check_system(body.get("system"), problems)
    tool_names = _check_tools(body.get("tools"), problems)
    _check_tool_choice(body.get("tool_choice"), tool_names, problems)
    _check_cache_control(body, problems)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages: field required (a non-empty list)")
        return problems
    _check_messages(messages, tool_names, problems)
    return problems


def _check_thinking(thinking: JsonValue, max_tokens: int | None, problems: list[str]) -> None:
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < 1024:
        problems.append(f"thinking.budget_tokens: must be an integer >= 1024, got {budget!r}")
    elif max_tokens is not None and budget >= max_tokens:
        problems.append(f"max_tokens ({max_tokens}) must be greater than thinking.budget_tokens ({budget})")


def _check_system(system: JsonValue, problems: list[str]) -> None:
    if isinstance(system, list):
        for j, b in enumerate(system):
            if not isinstance(b, dict) or b.get("type") != "text" or not str(b.get("text", "")).strip():
                problems.append(f"system.{j}: text content blocks must contain non-whitespace text")


def _check_tools(tools: JsonValue, problems: list[str]) -> set[str] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        problems.append("tools: must be a list")
        return set()
    names: set[str] = set()
    for j, tool in enumerate(tools):
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not name:
            problems.append(f"tools.{j}: name required")
            continue
        if name in names:
            problems.append(f"tools.{j}: tool names must be unique ({name!r} repeated)")
        names.add(name)
        if tool.get("type", "custom") == "custom" and not isinstance(tool.get("input_schema"), dict):
            problems.append(f"tools.{j}: input_schema required for custom tool {name!r}")
    return names


def _check_tool_choice(choice: JsonValue, tool_names: set[str] | None, problems: list[str]) -> None:
    if choice is None:
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        problems.append(f"tool_choice.type: must be one of auto, any, tool, none; got {kind!r}")
    elif kind == "tool" and choice.get("name") not in (tool_names or set()):
        problems.append(f"tool_choice.name: {choice.get('name')!r} is not one of the tools")
    elif kind in ("any", "tool") and not tool_names:
        problems.append(f"tool_choice: {kind!r} needs tools")


def _blocks(content: JsonValue) -> list[JsonValue]:
    return (
        [{"type": "text", "text": content}]
        if isinstance(content, str)
        else content
        if isinstance(content, list)
        else []
    )


def _check_messages(messages: list[JsonValue], tool_names: set[str] | None, problems: list[str]) -> None:
    seen_ids: set[str | None] = set()  # the tool_use ids as the request has them (None: one without)
    for i, msg in enumerate(messages):
        where = f"messages.{i}"
        role = msg.get("role") if isinstance(msg, dict) else None
        if role not in ("user", "assistant"):
            problems.append(f"{where}: role must be 'user' or 'assistant', got {role!r}")
            continue
        if i == 0 and role != "user":
            problems.append("messages.0: the first message must use the user role")
        content = msg.get("content")
        final_assistant = role == "assistant" and i == len(messages) - 1
        if not isinstance(content, (str, list)) or (not content and not final_assistant):
            problems.append(f"{where}: content must be a non-empty string or list of blocks")
            continue
        blocks = _blocks(content)
        for j, b in enumerate(blocks):
            if not isinstance(b, dict) or not isinstance(b.get("type"), str):
                problems.append(f"{where}.content.{j}: a content block must be an object with a type")
            elif b["type"] == "text" and not (isinstance(b.get("text"), str) and b["text"].strip()):
                problems.append(f"{where}.content.{j}: text content blocks must contain non-whitespace text")
        blocks = [b for b in blocks if isinstance(b, dict)]
        if role == "assistant":
            _check_tool_uses(messages, i, blocks, tool_names, seen_ids, problems)
        else:
            _check_tool_results(messages, i, blocks, problems)


def _check_tool_uses(
    messages: list[JsonValue],
    i: int,
    blocks: list[JsonObject],
    tool_names: set[str] | None,
    seen_ids: set[str | None],
    problems: list[str],
) -> None:
    uses = [b for b in blocks if b["type"] == "tool_use"]
    if any(b["type"] == "tool_result" for b in blocks):
        problems.append(f"messages.{i}: tool_result blocks belong in user messages")
    nxt = messages[i + 1] if i + 1 < len(messages) else None
    answered = (
        [
            b.get("tool_use_id")
            for b in _blocks(nxt.get("content"))
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        if isinstance(nxt, dict) and nxt.get("role") == "user"
        else []
    )
    for use in uses:
        uid, name = use.get("id"), use.get("name")
        if uid in seen_ids:
            problems.append(f"messages.{i}: tool_use ids must be unique ({uid!r} repeated)")
        seen_ids.add(uid)
        if tool_names is None:
            problems.append(f"messages.{i}: tool_use {name!r} present but the request defines no tools")
        elif name not in tool_names:
            problems.append(f"messages.{i}: tool_use names unknown tool {name!r}")
        if answered.count(uid) != 1:
            problems.append(
                f"messages.{i}: tool_use id {uid!r} must be answered by exactly one tool_result in the "
                f"immediately following user message (found {answered.count(uid)})"
            )


def _check_tool_results(messages: list[JsonValue], i: int, blocks: list[JsonObject], problems: list[str]) -> None:
    prev = messages[i - 1] if i > 0 else None
    offered = (
        {b.get("id") for b in _blocks(prev.get("content")) if isinstance(b, dict) and b.get("type") == "tool_use"}
        if isinstance(prev, dict) and prev.get("role") == "assistant"
        else set()
    )
    other_seen = False
    for j, b in enumerate(blocks):
        if b["type"] == "tool_use":
            problems.append(f"messages.{i}.content.{j}: tool_use blocks belong in assistant messages")
        if b["type"] != "tool_result":
            other_seen = True
            continue
        if other_seen:
            problems.append(f"messages.{i}.content.{j}: tool_result blocks must come before any other content")
        if b.get("tool_use_id") not in offered:
            problems.append(
                f"messages.{i}.content.{j}: tool_result for {b.get('tool_use_id')!r}, "
                "which is not a tool_use in the previous assistant message"
            )


def same_content(a: JsonValue, b: JsonValue) -> bool:
    """Equal as the API sees it: a string is one text block, null-valued keys are absent."""

    def norm(content: JsonValue) -> list[JsonValue]:
        return [{k: v for k, v in x.items() if v is not None} if isinstance(x, dict) else x for x in _blocks(content)]

    return norm(a) == norm(b)

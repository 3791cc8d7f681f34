"""Qwen2.5's chat format for the local model, as plain strings (no llama.cpp here).

- parsing: tool calls out of generated text, as ``<tool_call>`` blocks, bare JSON, or JSON in a
  ```json fence; only names that were offered count;
- rendering: the history as Qwen's chat template has it (tools listed in ``<tools>``, calls in
  ``<tool_call>``, results as user-role ``<tool_response>``);
- the grammar: a GBNF grammar that lets the model answer EITHER with plain text OR with calls to
  offered tools whose arguments follow the tools' schemas;
- streaming: passing the answer on as it comes, holding back whatever may turn out to be a call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.messages import Message, TextBlock, ToolResultBlock

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: JsonObject


@dataclass
class ParsedOutput:
    text: str  # whatever is left once the calls are taken out, stripped
    calls: list[ParsedCall] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # calls that were attempted but rejected


_TAGGED = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
# A whole answer that is JSON inside a ``` fence or inside some other tag (small Qwen models use ``<tools>``).
_WRAPPED = re.compile(r"\A(?:```[a-zA-Z]*\s*\n?(.*?)\n?```|<([a-z_]+)>(.*?)</\2>)\Z", re.DOTALL)


def parse_tool_calls(text: str, offered: Collection[str]) -> ParsedOutput:
    """Find the tool calls in a model's output; the rest is its text."""
    if CALL_OPEN in text:
        out = ParsedOutput(text="")
        for match in _TAGGED.finditer(text):
            _accept(match.group(1), offered, out)
        out.text = _TAGGED.sub("", text).strip() if out.calls else text.strip()
        return out
    out = ParsedOutput(text=text.strip())
    body = out.text
    wrapped = _WRAPPED.match(body)
    if wrapped:
        body = (wrapped.group(1) if wrapped.group(1) is not None else wrapped.group(3)).strip()
    if body[:1] in ("{", "[") and _looks_like_calls(body):
        _accept(body, offered, out)
        if out.calls:
            out.text = ""
    return out


def _looks_like_calls(body: str) -> bool:
    try:
        value = json.loads(body)
    except ValueError:
        return False
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def _accept(raw: str, offered: Collection[str], out: ParsedOutput) -> None:
    try:
        value = json.loads(raw.strip())
    except ValueError as exc:
        out.problems.append(f"tool call is not valid JSON ({exc}): {raw.strip()[:200]}")
        return
    for item in value if isinstance(value, list) else [value]:
        call = _to_call(item, offered, out.problems)
        if call is not None:
            out.calls.append(call)


def _to_call(item: JsonValue, offered: Collection[str], problems: list[str]) -> ParsedCall | None:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        problems.append(f"tool call without a name: {json.dumps(item)[:200]}")
        return None
    name = item["name"]
    if name not in offered:
        problems.append(f"tool {name!r} was not offered")
        return None
    args = item.get("arguments", item.get("parameters", {}))
    if isinstance(args, str):  # some models encode the arguments object as a string
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            args = None
    if not isinstance(args, dict):
        problems.append(f"tool {name!r} called with arguments that are not a JSON object")
        return None
    return ParsedCall(name, args)


# --------------------------------------------------------------------- rendering (Qwen2.5's chat template)

QWEN_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
_TOOLS_INTRO = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_OUTRO = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'  # noqa: E501  (the model's own template, verbatim)
)


def system_text(system: str, tools: list[JsonObject]) -> str:
    """The system turn's content: the system prompt, then the offered tools as Qwen lists them."""
    text = system or QWEN_DEFAULT_SYSTEM
    if not tools:
        return text
    listed = "".join("\n" + json.dumps(_qwen_tool(t), ensure_ascii=False) for t in tools)
    return text + _TOOLS_INTRO + listed + _TOOLS_OUTRO


def _qwen_tool(tool: JsonObject) -> JsonObject:
    return {
        "type": "function",
        "function": {
            "name": tool["name"],
            "description": tool.get("description", ""),
            "parameters": tool.get("input_schema", {}),
        },
    }


def assistant_text(msg: Message) -> str:
    """An assistant turn's content: its text, then its calls (thinking and unknown blocks are left out)."""
    parts = [msg.text] if msg.text else []
    parts += [render_call(u.name, u.input) for u in msg.tool_uses]
    return "\n".join(parts)


def user_turns(msg: Message) -> list[str]:
    """A user message as Qwen turns ("user\\n..." strings): tool results in one turn, any text in the next."""
    results = [b for b in msg.content if isinstance(b, ToolResultBlock)]
    # Images, documents and other blocks a text-only model cannot see are named, not silently dropped.
    texts = [
        b.text if isinstance(b, TextBlock) else f"[{b.type} omitted]"
        for b in msg.content
        if not isinstance(b, ToolResultBlock)
    ]
    turns = []
    if results:
        turns.append(
            "user"
            + "".join(
                f"\n<tool_response>\n{'Error: ' if r.is_error else ''}{r.text}\n</tool_response>" for r in results
            )
        )
    if texts or not results:
        turns.append("user\n" + "\n\n".join(texts))
    return turns


def render_call(name: str, arguments: JsonObject) -> str:
    """A call exactly as Qwen's chat template renders it (and as the grammar makes the model write it)."""
    return f'{CALL_OPEN}\n{{"name": "{name}", "arguments": {json.dumps(arguments, ensure_ascii=False)}}}\n{CALL_CLOSE}'


# --------------------------------------------------------------------- grammar

_PRIMITIVES = r"""
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1F\x7F] | "\\" (["\\/bfnrt] | "u" hex hex hex hex)
hex ::= [0-9a-fA-F]
integer ::= "-"? ("0" | [1-9] [0-9]{0,17})
number ::= integer ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ( string ": " value ( ", " string ": " value )* )? "}"
array ::= "[" ( value ( ", " value )* )? "]"
"""


def tool_call_grammar(tools: Iterable[JsonObject], *, allow_text: bool = True) -> str:
    """GBNF for: plain text, or calls to the given (Anthropic-shaped) tools with schema-shaped arguments.

    Calls may be written as Qwen's template has them (one or more ``<tool_call>`` blocks) or the
    way Qwen2.5-Coder models prefer to write them: a bare JSON call (or list of calls), or one in
    a ```json fence. Asked to act, both the 0.5B and 1.5B put 50-95% of their first-token
    probability on ``{`` or ``` and under 0.01% on ``<tool_call>``, so accepting those shapes,
    constrained the same way, is what lets the grammar catch the calls they mean to make.
    ``allow_text=False`` leaves only the calls (a "must use a tool" turn).
    """
    b = _GrammarBuilder()
    objs = []
    for i, tool in enumerate(tools):
        args = b.schema(tool.get("input_schema") or {}, f"t{i}-args")
        args = args if args != "value" else "object"  # arguments are always an object
        head = f'{{"name": {json.dumps(tool["name"])}, "arguments": '
        objs.append(b.rule(f"t{i}-call", f'{_lit(head)} {args} "}}"'))
    if not objs:
        raise ValueError("tool_call_grammar needs at least one tool")
    b.rule("call", " | ".join(objs))
    b.rule("tagged", f"{_lit(CALL_OPEN + chr(10))} call {_lit(chr(10) + CALL_CLOSE)}")
    b.rule("json-calls", 'call | "[" call ( ", " call )* "]"')
    b.rule("calls", 'tagged ( "\\n" tagged )* | json-calls | "```json\\n" json-calls "\\n```"')
    if not allow_text:
        return "root ::= calls\n" + "\n".join(b.rules) + _PRIMITIVES
    _add_text_rules(b)
    return "root ::= calls | text\n" + "\n".join(b.rules) + _PRIMITIVES


# A final answer may not start like a call (or the model could write its call as free text).
_NOT_TEXT_STARTS = ("```json", "```\n{", "```\n[")


def _add_text_rules(b: _GrammarBuilder) -> None:
    """Text that never contains ``<tool_call>`` and does not start like a call.

    That is: not with whitespace, ``<``, ``{``, ``[``, nor with any of ``_NOT_TEXT_STARTS``; a
    fence in another language is fine. Two small automata do it. ``nt<k>``: the last k characters
    read are the first k of ``<tool_call>``; reading its last character is the one move left out.
    ``ts<i>``: a node of the trie of the forbidden starts; completing one is left out, and leaving
    the trie continues in ``nt0``.
    """
    word = CALL_OPEN  # only its first character is "<", so a mismatch restarts at state 0 or 1
    for k in range(len(word)):
        alts = ['""', '"<" nt1']
        if 0 < k < len(word) - 1:
            alts.append(f"{_lit(word[k])} nt{k + 1}")
        alts.append(f"[^{_class_escape('<' if k == 0 else '<' + word[k])}] nt0")
        b.rule(f"nt{k}", " | ".join(alts))
    prefixes = sorted({w[:i] for w in _NOT_TEXT_STARTS for i in range(len(w))})
    node = {p: f"ts{i}" for i, p in enumerate(prefixes)}
    for p in prefixes:
        children = sorted({w[len(p)] for w in _NOT_TEXT_STARTS if w.startswith(p)} - {""})
        alts = [f"{_lit(c)} {node[p + c]}" for c in children if p + c in node]
        if p:
            alts += ['""', '"<" nt1']
        excluded = "<" + "".join(children) + ("{[" + "".join(map(chr, range(0x21))) if not p else "")
        b.rule(node[p], " | ".join(alts + [f"[^{_class_escape(excluded)}] nt0"]))
    b.rule("text", node[""])


class _GrammarBuilder:
    def __init__(self) -> None:
        self.rules: list[str] = []

    def rule(self, name: str, body: str) -> str:
        self.rules.append(f"{name} ::= {body}")
        return name

    def schema(self, schema: JsonValue, name: str) -> str:
        """A rule for values of a JSON schema; what it does not understand becomes any JSON value."""
        if not isinstance(schema, dict):
            return "value"
        if schema.get("enum"):
            return self.rule(name, " | ".join(_lit(json.dumps(v, ensure_ascii=False)) for v in schema["enum"]))
        if "const" in schema:
            return self.rule(name, _lit(json.dumps(schema["const"], ensure_ascii=False)))
        kind = schema.get("type")
        if kind in ("string", "integer", "number", "boolean", "null"):
            return str(kind)  # the primitive rule of that name
        if kind == "array":
            item = self.schema(schema.get("items") or {}, f"{name}-item")
            return self.rule(name, f'"[" ( {item} ( ", " {item} )* )? "]"')
        if kind == "object" or "properties" in schema:
            return self._object(schema, name)
        return "value"

    def _object(self, schema: JsonObject, name: str) -> str:
        declared = schema.get("properties") or {}
        wanted = [k for k in schema.get("required") or () if isinstance(k, str)]
        props = {**declared, **{k: {} for k in wanted if k not in declared}}  # required but undeclared: any value
        if not props:
            return "object"
        required = [k for k in props if k in wanted]
        optional = [k for k in props if k not in wanted]
        kv = {
            k: f"{_lit(json.dumps(k, ensure_ascii=False) + ': ')} {self.schema(props[k], f'{name}-p{i}')}"
            for i, k in enumerate(props)
        }
        # Keys come in schema order: required ones first, then any subset of the optional ones.
        tail = " ".join(f'( ", " {kv[k]} )?' for k in optional)
        if required:
            body = ' ", " '.join(kv[k] for k in required) + (" " + tail if tail else "")
            return self.rule(name, f'"{{" {body} "}}"')
        # No required keys: the first present optional key has no leading comma.
        firsts = []
        for i, k in enumerate(optional):
            rest = " ".join(f'( ", " {kv[o]} )?' for o in optional[i + 1 :])
            firsts.append(f"{kv[k]} {rest}".strip())
        inner = self.rule(f"{name}-kvs", " | ".join(f"( {f} )" for f in firsts))
        return self.rule(name, f'"{{" {inner}? "}}"')


def _lit(text: str) -> str:
    """A GBNF string literal."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ch == "\x7f":
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _class_escape(chars: str) -> str:
    out = []
    for ch in chars:
        special = ord(ch) <= 0x20 or ch in "\x7f]\\^-["
        out.append(f"\\x{ord(ch):02X}" if special else ch)
    return "".join(out)


# --------------------------------------------------------------------- streaming


class AnswerStream:
    """Streams the final answer as it is generated, holding back anything that may turn out to be a tool call."""

    # How a call can start (see tool_call_grammar); an answer that starts so is passed on at the end.
    _CALL_STARTS = (CALL_OPEN, "<", "{", "[", "```json", "```\n{", "```\n[")

    def __init__(self, sink: Callable[[str], object] | None, stops: list[str]) -> None:
        self.sink, self.stops = sink, stops
        self.sent = 0  # characters of the (left-stripped) text already passed on
        self.done = sink is None  # nothing more to stream before the end

    def feed(self, raw: str) -> None:
        if self.done:
            return
        text = raw.lstrip()
        if self.sent == 0:
            if any(w.startswith(text) for w in self._CALL_STARTS):
                return  # undecided yet
            if any(text.startswith(w) for w in self._CALL_STARTS):
                self.done = True
                return
        cut = text.find(CALL_OPEN, self.sent)
        if cut >= 0:
            self._emit(text[self.sent : cut])
            self.done = True
            return
        hold = max((_overlap(text, w) for w in [CALL_OPEN, *self.stops]), default=0)
        self._emit(text[self.sent : len(text) - hold])

    def finish(self, final_text: str) -> None:
        """No tool call after all: pass on whatever of the answer was held back."""
        if self.sink is not None:
            self._emit(final_text[self.sent :])

    def _emit(self, piece: str) -> None:
        if piece and self.sink is not None:
            self.sink(piece)
            self.sent += len(piece)


def _overlap(text: str, word: str) -> int:
    """Length of the longest end of ``text`` that is a proper start of ``word``."""
    for n in range(min(len(word) - 1, len(text)), 0, -1):
        if text.endswith(word[:n]):
            return n
    return 0

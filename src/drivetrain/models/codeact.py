"""Code as action: a small model answers each turn with one fenced bash or python block, or ``DONE: answer``.

A 1.5B model writes one shell command far more reliably than a JSON tool call inside a multi-turn
loop, and it already knows the shell. ``CodeActionModel`` wraps any ``Model``: it shows the history to
the inner model as plain text (each Bash call as the block it came from, each result as its output)
and turns the reply back into the canonical shape: a block becomes an ordinary Bash ``tool_use``, so
permissions, hooks, the audit log and the wire format are exactly as for any other call. A python
block runs as ``python3 - <<'PY' … PY``.

Where the inner model can decode under a grammar (the local model), the reply is constrained to that
shape: an optional one-line plan, then one block, or the answer. ``tool_choice`` "any" leaves only a
block, "none" only the answer, and every call in ``forbidden_calls`` (a refused repeat) is left out of
the grammar, so that exact command cannot be sampled again.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import replace

from drivetrain.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from drivetrain.models.base import Model, ModelRequest, ModelResponse

DONE = "DONE:"
_PY_OPEN, _PY_CLOSE = "python3 - <<'PY'\n", "\nPY"
_FENCE = re.compile(r"```(bash|sh|shell|console|python|py|python3)[ \t]*\n(.*?)```", re.DOTALL)
_DONE_LINE = re.compile(r"^\s*DONE:[ \t]*", re.MULTILINE)
# Commands a small model reaches for that never help here: root rights, and editors that wait for a person.
NEVER_STARTS = ("sudo ", "nano ", "vi ", "vim ", "emacs ")


def to_command(lang: str, code: str) -> str:
    """The Bash command a block runs as."""
    return f"{_PY_OPEN}{code}{_PY_CLOSE}" if lang.startswith("py") else code


def to_block(command: str) -> tuple[str, str]:
    """(language, code) of a Bash command: the inverse of ``to_command``."""
    if command.startswith(_PY_OPEN) and command.endswith(_PY_CLOSE):
        return "python", command[len(_PY_OPEN):-len(_PY_CLOSE)]
    return "bash", command


def render_assistant(msg: Message) -> str:
    """An assistant turn as the model wrote it: plan line and block, or ``DONE: answer``."""
    parts = [msg.text] if msg.text else []
    for use in msg.tool_uses:
        command = use.input.get("command", "") if use.name == "Bash" else f"# {use.name} {use.input}"
        lang, code = to_block(str(command))
        parts.append(f"```{lang}\n{code}\n```")
    if not msg.tool_uses:
        return f"{DONE} {msg.text}"
    return "\n".join(parts)


def render_result(r: ToolResultBlock) -> str:
    text = r.text
    if r.is_error:
        return f"Error:\n{text}"
    if text.strip() in ("", "(no output)"):
        return "(no output, exit code 0)"
    if text.startswith("(no output)\n"):  # and a note after it (what the command changed)
        return "(no output, exit code 0)" + text[len("(no output)"):]
    return f"Output:\n{text}"


def render_user(msg: Message) -> str:
    parts = [render_result(b) for b in msg.content if isinstance(b, ToolResultBlock)]
    parts += [b.text for b in msg.content if isinstance(b, TextBlock) and b.text]
    return "\n\n".join(parts) or "(empty)"


def to_text_history(messages: list[Message]) -> list[Message]:
    return [Message(m.role, (TextBlock(render_assistant(m) if m.role == "assistant" else render_user(m)),))
            for m in messages]


def parse_reply(text: str) -> tuple[str, tuple[str, str] | None]:
    """(plan or answer text, (language, code) of the first block or None)."""
    fence = _FENCE.search(text)
    done = _DONE_LINE.search(text)
    if fence and not (done and done.start() < fence.start()):
        code = fence.group(2)
        code = code[:-1] if code.endswith("\n") else code
        return text[: fence.start()].strip(), (fence.group(1), code)
    if done:
        return text[done.end():].strip(), None
    return text.strip(), None


class CodeActionModel:
    """Any ``Model``, spoken to in code blocks (see the module docstring)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name = inner.name
        self.context_window = getattr(inner, "context_window", None)

    async def respond(self, request: ModelRequest) -> ModelResponse:
        choice = request.tool_choice or "auto"
        if not any(t["name"] == "Bash" for t in request.tools):
            choice = "none"
        forbidden = [to_block(str(inp.get("command", ""))) for name, inp in request.forbidden_calls if name == "Bash"]
        inner = replace(request, messages=to_text_history(request.messages), tools=[], tool_choice=None,
                        forbidden_calls=(), grammar=grammar(choice, forbidden))
        response = await self.inner.respond(inner)
        raw = "".join(b.text for b in response.content if isinstance(b, TextBlock))
        text, block = parse_reply(raw)
        if block is None or choice == "none":
            content = (TextBlock(text),) if text else ()
            stop = response.stop_reason if response.stop_reason != "tool_use" else "end_turn"
            return replace(response, content=content, stop_reason=stop)
        call = ToolUseBlock(f"toolu_{uuid.uuid4().hex[:24]}", "Bash", {"command": to_command(*block)})
        return replace(response, content=((TextBlock(text),) if text else ()) + (call,), stop_reason="tool_use")


# --------------------------------------------------------------------- grammar


def grammar(choice: str, forbidden: list[tuple[str, str]] = ()) -> str:
    """GBNF for one reply: ``auto`` a block or the answer, ``any`` a block, ``none`` the answer.

    A block's body is any text without backticks that ends in a newline, except the bodies in
    ``forbidden`` (per language) and bash bodies starting with ``NEVER_STARTS``: a trie over those strings,
    left as soon as the body differs.
    """
    rules = [
        'done ::= "DONE: " [^ \\t\\n\\x00-\\x08\\x0B-\\x1F] [^\\x00-\\x08\\x0B-\\x1F]*',
        'thought ::= [^`\\n \\t#] [^`\\n]* "\\n"',
        'free ::= [^`]* "\\n```"',
        'fresh ::= "```" | free',  # the body so far ends in a newline: it may close here
        'act ::= thought? ( "```bash\\n" bash-body | "```python\\n" python-body )',
    ]
    for lang in ("bash", "python"):
        bodies = [code + "\n" for kind, code in forbidden if kind == lang]
        rules += _body_rules(f"{lang}-body", bodies + list(NEVER_STARTS) * (lang == "bash"))
    root = {"auto": "act | done", "any": "act", "none": "done"}[choice]
    return f"root ::= {root}\n" + "\n".join(rules) + "\n"


def _body_rules(name: str, forbidden: list[str]) -> list[str]:
    """A body that does not start with any forbidden body (each a whole number of lines): the refused
    command is left out, and so is the refused command with more lines added after it."""
    forbidden = {f for f in forbidden if "`" not in f}  # such a body cannot be generated anyway
    forbidden = [f for f in forbidden if not any(g != f and f.startswith(g) for g in forbidden)]
    if not forbidden:
        return [f"{name} ::= [^`] free"]
    prefixes = sorted({f[:i] for f in forbidden for i in range(len(f))})
    node = {p: f"{name}-{i}" if p else name for i, p in enumerate(prefixes)}
    rules = []
    for p in prefixes:
        children = sorted({f[len(p)] for f in forbidden if f.startswith(p)})
        alts = [f"{_lit(c)} {node[p + c]}" for c in children if p + c in node]  # a completed one is a dead end
        if "\n" not in children:
            alts.append('"\\n" fresh' if p else '"\\n" free')
        alts.append(f"[^{_cls('`' + chr(10) + ''.join(children))}] free")
        if p.endswith("\n"):
            alts.append('"```"')  # p is no forbidden body: those are never reached
        rules.append(f"{node[p]} ::= " + " | ".join(alts))
    return rules


def _lit(ch: str) -> str:
    return '"' + "".join(_esc(c) for c in ch) + '"'


def _cls(chars: str) -> str:
    return "".join(_esc(c, cls=True) for c in chars)


def _esc(c: str, cls: bool = False) -> str:
    if c in '"\\' or (cls and c in "]^-["):
        return "\\" + c
    if ord(c) < 0x20 or c == "\x7f":
        return f"\\x{ord(c):02X}"
    return c

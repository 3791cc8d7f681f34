"""Code as action: a small model answers each turn with one fenced bash or python block, or ``DONE: answer``.

A small model writes one shell command far more reliably than a JSON tool call inside a multi-turn
loop, and it already knows the shell. ``CodeActionModel`` wraps any ``Model``: it shows the history to
the inner model as plain text (each Bash call as the block it came from, each result as its output)
and turns the reply back into the canonical shape: a block becomes an ordinary Bash ``tool_use``, so
permissions, hooks, the audit log and the wire format are exactly as for any other call. A python
block runs as ``python3 - <<'PY' … PY``. A block that names a file after its language (```python
greet.py) is a change to that file instead: an ``Edit`` (or ``Write``) call, see ``fragments.py``.

Where the inner model can decode under a grammar (the local model), the reply is constrained to that
shape: an optional one-line plan, then one block, or the answer. ``tool_choice`` "any" leaves only a
block, "none" only the answer.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path, PurePath

from drivetrain.jsontypes import JsonObject
from drivetrain.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from drivetrain.models.base import Model, ModelRequest, ModelResponse
from drivetrain.pricing import Windowed
from drivetrain.small.fragments import home_of, to_call

DONE = "DONE:"
_PY_OPEN, _PY_CLOSE = "python3 - <<'PY'\n", "\nPY"
_RUN_LANGS = ("bash", "sh", "shell", "console", "python", "py", "python3")
# ```bash … ``` runs; ```python greet.py … ``` (any language, then a file name) changes that file.
_FENCE = re.compile(r"```([\w+-]*)(?:[ \t]+([\w./-]*\.\w+))?[ \t]*\n(.*?)```", re.DOTALL)
_TRAILING_BLANKS = re.compile(r"[ \t\r]+$", re.MULTILINE)
# A first line naming a file, the way models head a file's code: the block is that file's content, not a script
# (run, a block of definitions writes nothing, and the model repeats it).
_NAMED_FIRST_LINE = re.compile(r"(?:#[ \t]*)?([\w./-]+\.\w+)[ \t]*\n(?=.)")
# One echo/printf line redirected into a file: the command is meant, not the file's content.
_WRITES_ITSELF = re.compile(r"(?:echo|printf)\b[^\n]*?>>?[ \t]*([\w./-]+)[ \t]*\Z")
_DONE_LINE = re.compile(r"^\s*DONE:[ \t]*", re.MULTILINE)
# Where an answer ends although the model wrote on: a turn it made up ("User: Create a new file…", after the
# examples' pattern), a code block, or the answer's mark again ("… 1198. Done: The value …" until max_tokens).
# Kept, a right answer reads as calls described in prose and is sent back.
_ANSWER_END = re.compile(r"^\s*(?:User|Assistant):|```|\bDONE:|(?<=[.!\n] )Done:", re.MULTILINE)
_SENTENCE = re.compile(r"[^\n.!?。！？]+[.!?。！？]*")  # a sentence or a line, in any language
STOPS = ["\nUser:", "\nAssistant:"]  # the made-up turns, cut as they start (the answer's end is parsed anyway)
# Commands a small model reaches for that never help here: root rights, and editors that wait for a person.
# Installing packages is never the way around a denied command.
# "sudo" whole: "sudoapt-get" was tried; "vi/app.cfg" too, and "vi<tab>service.ini" (it waited out the 120 s timeout)
NEVER_STARTS = ("sudo", "vi ", "vi/", "vi.", "vi\n", "vi\t", "apt-get ", "apt ")
# Editors never appear in a bash block at all: "nano.service.ini" and "nanoledger.py" were tried seven times each,
# with comments added, after "nano " was left out.
EDITORS = ("nano", "vim", "emacs")
# No line of a block ends in blanks: a reply's blocks are read without them (``parse_reply``), so a refused block
# with a blank added at a line's end would be a new body to the grammar yet the same call once read.
BLANK_ENDS = [" \n", "\t\n"]
# The plan line before a block is one short line: unbounded, a model can ramble in it until max_tokens and never
# reach the block the turn must hold.
THOUGHT_CHARS = 200
# The plan line and the answer never start as a line the harness just said does (its first ECHO_CHARS characters):
# the 1.5B took "The file already holds exactly this block: nothing changed." or "The test command still fails …"
# for its own plan, turn after turn, and gave it as its answer.
ECHO_CHARS = 16


def to_command(lang: str, code: str) -> str:
    """The Bash command a block runs as."""
    return f"{_PY_OPEN}{code}{_PY_CLOSE}" if lang.startswith("py") else code


def to_block(command: str) -> tuple[str, str]:
    """(language, code) of a Bash command: the inverse of ``to_command``."""
    if command.startswith(_PY_OPEN) and command.endswith(_PY_CLOSE):
        return "python", command[len(_PY_OPEN) : -len(_PY_CLOSE)]
    return "bash", command


_PLAIN = ("text", "txt", "plain", "plaintext")
_LANGS = {".txt": "text", ".py": "python", ".sh": "bash", ".js": "javascript", ".ts": "typescript", ".md": "markdown"}


def written(call_input: JsonObject) -> str:
    """What an Edit or Write call puts in its file: the text a file block held."""
    return str(call_input.get("new_string", call_input.get("content", "")))


def run_block(command: str) -> str:
    """A Bash command as the block it runs from."""
    return "```{}\n{}\n```".format(*to_block(command))


def file_block(path: str, content: str) -> str:
    lang = _LANGS.get(PurePath(path).suffix, PurePath(path).suffix.lstrip(".") or "text")
    return f"```{lang} {path}\n{content.rstrip(chr(10))}\n```"


def render_assistant(msg: Message) -> str:
    """An assistant turn as the model wrote it: plan line and block, or ``DONE: answer``."""
    parts = [msg.text] if msg.text else []
    for use in msg.tool_uses:
        if use.name in ("Edit", "Write") and isinstance(use.input.get("file_path"), str):
            parts.append(file_block(use.input["file_path"], written(use.input)))
            continue
        command = use.input.get("command", "") if use.name == "Bash" else f"# {use.name} {use.input}"
        parts.append(run_block(str(command)))
    if not msg.tool_uses:
        return f"{DONE} {msg.text}"
    return "\n".join(parts)


# the Edit tool's error for a block that changes nothing (its file already holds it)
HELD_ALREADY = "old_string and new_string are identical"
_NOTES = ("Changed ", "Created ", "Deleted ", "No file changed")  # what changes.py says a call changed


def render_result(r: ToolResultBlock, tool: str = "Bash") -> str:
    text = r.text
    if r.is_error and tool == "Edit" and text.startswith(HELD_ALREADY):
        # the Edit tool's words are about its fields, which a file block does not show
        return "Error:\nThe file already holds exactly this block: nothing changed. Write the lines as they must be."
    if r.is_error:
        return f"Error:\n{text}"
    if tool in ("Edit", "Write"):  # a file block: what it changed is the whole story (not the tool's snippet)
        note = text.split("\n\n", 1)[-1]
        if note.startswith(_NOTES):
            return note
    if text.strip() in ("", "(no output)"):
        return "(no output, exit code 0)"
    if text.startswith("(no output)\n"):  # and a note after it (what the command changed)
        return "(no output, exit code 0)" + text[len("(no output)") :]
    return f"Output:\n{text}"


def render_user(msg: Message, tools: dict[str, str] | None = None) -> str:
    parts = [
        render_result(b, (tools or {}).get(b.tool_use_id, "Bash"))
        for b in msg.content
        if isinstance(b, ToolResultBlock)
    ]
    parts += [b.text for b in msg.content if isinstance(b, TextBlock) and b.text]
    return "\n\n".join(parts) or "(empty)"


def to_text_history(messages: list[Message]) -> list[Message]:
    tools = {u.id: u.name for m in messages if m.role == "assistant" for u in m.tool_uses}
    return [
        Message(m.role, (TextBlock(render_assistant(m) if m.role == "assistant" else render_user(m, tools)),))
        for m in messages
    ]


def without_repeats(answer: str) -> str:
    """The answer up to where it starts saying again what it said (a sentence of some length, or a line, a second
    time): a model caught in a loop repeats its last sentence until max_tokens."""
    seen: set[str] = set()
    for m in _SENTENCE.finditer(answer):
        sentence = " ".join(m.group(0).split())
        if len(sentence.encode()) >= 12 and sentence in seen:  # (bytes: a CJK sentence is short in characters)
            return answer[: m.start()].rstrip()
        seen.add(sentence)
    return answer


def does_nothing(code: str) -> bool:
    """A block with no statement in it: blank, comments, ``pass`` or ``...``. Run, it shows nothing."""
    lines = [ln.strip() for ln in code.splitlines()]
    return all(not ln or ln.startswith("#") or ln in ("pass", "...") for ln in lines)


def parse_reply(text: str) -> tuple[str, tuple[str, str, str | None] | None]:
    """(plan or answer text, (language, code, file name or None) of the first block or None)."""
    fence = next((f for f in _FENCE.finditer(text) if f.group(2) or f.group(1) in _RUN_LANGS), None)
    done = _DONE_LINE.search(text)
    if fence and not (done and done.start() < fence.start()):
        # Trailing blanks on a line are a small model's noise, and would make a refused call new to the grammar.
        code = _TRAILING_BLANKS.sub("", fence.group(3))
        code = code[:-1] if code.endswith("\n") else code
        return text[: fence.start()].strip(), (fence.group(1), code, fence.group(2))
    if done:
        answer = text[done.end() :]
        end = _ANSWER_END.search(answer)
        return without_repeats(answer[: end.start() if end else None].strip()), None
    return text.strip(), None


class CodeActionModel:
    """Any ``Model``, spoken to in code blocks (see the module docstring)."""

    def __init__(self, inner: Model, cwd: Path | None = None) -> None:
        self.inner = inner
        self.cwd = cwd or Path.cwd()  # where a file block's file is read, to make its Edit call
        self.name = inner.name
        self.context_window = inner.context_window if isinstance(inner, Windowed) else None

    async def respond(self, request: ModelRequest) -> ModelResponse:
        choice = request.tool_choice or "auto"
        if not any(t["name"] == "Bash" for t in request.tools):
            choice = "none"
        files = {"Edit", "Write"} <= {t["name"] for t in request.tools}
        rules = grammar(
            choice, denied_programs(request.messages), echoes(request.messages), files, said(request.messages)
        )
        inner = replace(
            request,
            messages=to_text_history(request.messages),
            tools=[],
            tool_choice=None,
            grammar=rules,
            stop_sequences=[*request.stop_sequences, *STOPS],
        )
        response = await self.inner.respond(inner)
        raw = "".join(b.text for b in response.content if isinstance(b, TextBlock))
        text, block = parse_reply(raw)
        if block is None or choice == "none":
            content = (TextBlock(text),) if text else ()
            stop = response.stop_reason if response.stop_reason != "tool_use" else "end_turn"
            return replace(response, content=content, stop_reason=stop)
        lang, code, path = block
        if (
            files
            and not path
            and (named := _NAMED_FIRST_LINE.match(code))
            and named.group(1).endswith(".py" if lang.startswith("py") else ".sh")
        ):
            path, code = named.group(1), code[named.end() :]  # "# helpers.py" over the code: that file's content
        if files and not path and lang.startswith("py") and (home := home_of(code, self.cwd)):
            path, code = home  # it only redefines what that file defines: run, it would change nothing
        if not path and lang.startswith("py") and _shell_in_python(code):
            lang = "bash"  # "python3 report.py" in a python block: a command, not python
        if not path and does_nothing(code):  # "scheduler.py:9" over a block of "# Your code here": the line answers
            return replace(response, content=(TextBlock(text),) if text else (), stop_reason="end_turn")
        if path and (writes := _WRITES_ITSELF.match(code)) and writes.group(1) == path:
            lang, path = "bash", None  # a command writing the very file the block names: the command is meant
        if path and files and lang in _PLAIN:  # plain text is the file's content, not a fragment to merge: a
            name, call_input = "Write", {"file_path": path, "content": code + "\n"}  # value written again was appended
        elif path and files:
            name, call_input = to_call(path, code, self.cwd)
            if name == "Edit" and call_input["old_string"] == call_input["new_string"] and _held_before(request):
                # a second block the file already holds: it shows the file (what it thinks is done), so the turn
                # ends with it, and the end-of-turn checks say what is wrong, instead of a loop of blocks
                return replace(response, content=(TextBlock(raw.strip()),), stop_reason="end_turn")
        else:
            name, call_input = "Bash", {"command": to_command(lang, code)}
        call = ToolUseBlock(f"toolu_{uuid.uuid4().hex[:24]}", name, call_input)
        return replace(response, content=((TextBlock(text),) if text else ()) + (call,), stop_reason="tool_use")


def _held_before(request: ModelRequest) -> bool:
    """Did an earlier block of this task change nothing, because its file already held it?"""
    return any(
        isinstance(b, ToolResultBlock) and b.is_error and b.text.startswith(HELD_ALREADY)
        for m in request.messages
        for b in m.content
    )


def _shell_in_python(code: str) -> bool:
    """A python block that is a shell command: its first line does not parse as python, and starts with a program
    on the PATH (``python3 report.py``, ``ls -l``)."""
    try:
        compile(code, "<block>", "exec", dont_inherit=True)
        return False
    except SyntaxError as e:
        if e.lineno != 1:
            return False
    words = code.split(maxsplit=1)
    return bool(words) and re.fullmatch(r"[\w.+-]+", words[0]) is not None and shutil.which(words[0]) is not None


# --------------------------------------------------------------------- grammar

# What a policy denial says (gate.py, permissions/): a prefix rule ``Bash(wc:*)``, or a program no rule allows.
_DENIED_PREFIX = re.compile(r"\(rule Bash\(([^():*`]+):\*\)")
_NOT_ALLOWED = re.compile(r"no rule allows `([\w./+-]+)")
_ENDS = (" ", "\n", ";", "|", ")", "&", ":", ".", ",", "<", ">", "\t")  # "wc:", "wc.exe", "wc," were tried


def denied_programs(messages: list[Message]) -> list[str]:
    """Commands the permission policy denied outright in this run (a prefix rule, or a program no rule allows):
    the same command would be denied again, so the grammar leaves it out (see ``grammar``)."""
    out: dict[str, None] = {}
    for m in messages:
        for b in m.content:
            if isinstance(b, ToolResultBlock) and b.is_error:
                for hit in (*_DENIED_PREFIX.finditer(b.text), *_NOT_ALLOWED.finditer(b.text)):
                    out[hit.group(1).strip()] = None
    return [p for p in out if p]


def echoes(messages: list[Message], lines: int = 6, shortest: int = 12) -> list[str]:
    """The first lines of the last tool output, where a block must not start: a small model stuck in a rut
    copies the output it was just shown into its next block, runs it, and copies that error in turn."""
    if not messages or messages[-1].role != "user":
        return []
    out: dict[str, None] = {}
    for b in messages[-1].content:
        if isinstance(b, ToolResultBlock):
            for line in b.text.splitlines():
                line = line.rstrip()
                if len(line) >= shortest and len(out) < lines:
                    out[line] = None
    return list(out)


def said(messages: list[Message], lines: int = 12) -> list[str]:
    """The lines of the last user message as the model reads it (results rendered, the harness's notes), long
    enough to be a sentence, and not the task's own (a plan may restate the task): where the plan line and the
    answer must not start."""
    if len(messages) < 2 or messages[-1].role != "user":
        return []
    text = render_user(messages[-1], {u.id: u.name for m in messages if m.role == "assistant" for u in m.tool_uses})
    task = {ln.strip() for ln in render_user(messages[0]).splitlines()}
    out = [ln.strip() for ln in text.splitlines() if len(ln.strip()) >= ECHO_CHARS and ln.strip() not in task]
    return list(dict.fromkeys(out))[:lines]


def grammar(
    choice: str, denied: Sequence[str] = (), echoed: Sequence[str] = (), files: bool = False, heard: Sequence[str] = ()
) -> str:
    """GBNF for one reply: ``auto`` a block or the answer, ``any`` a block, ``none`` the answer. With
    ``files``, a block may also name a file after its language (a change to it, any text).

    A block's body is any text without backticks, carriage returns or blanks at a line's end (``BLANK_ENDS``)
    that ends in a newline, except bodies starting with a line of the output just shown (``echoed``) or with the
    answer's mark (``DONE:``, which bash ran as a command: exit 127), and bash bodies starting with ``NEVER_STARTS``:
    a trie over those
    strings, left as soon as the body differs. A bash body also never contains a ``denied`` program as a command
    word (``wc`` followed by a space, ``;``, ``|`` …), nor ``EDITORS`` at all: an automaton over those words runs
    alongside. A denied ``python3`` leaves out python blocks, which run as python3.
    """
    python = not any(d in ("python3", "python") for d in denied)
    blocks = ['"```bash\\n" bash-body'] + ['"```python\\n" python-body'] * python
    blocks += ['"```" [a-z] [a-z0-9]* " " file-name "\\n" file-body'] * files
    starts = [h[:ECHO_CHARS] for h in heard if len(h) >= ECHO_CHARS]
    control = "\\x00-\\x08\\x0B-\\x1F"
    # the answer: any text, never starting as a line just said does
    rules = _start_rules("answer", starts, " \t\n", lambda depth: f"[^{control}]*", "", control)
    # the plan line: one line, never "DONE:" (the answer's mark: it would read as an answer), nor a line just said
    rules += _start_rules(
        "thought",
        ["DONE:", *starts],
        " \t#",
        lambda depth: f'[^`\\n]{{0,{max(THOUGHT_CHARS - depth, 0)}}} "\\n"',
        '"\\n"',
        "`\\n",
    )
    rules += [
        'done ::= "DONE: " answer',
        f"act ::= thought? ( {' | '.join(blocks)} )",
        # a file name has an extension (``text 18`` is not a file) and is bounded (no name until max_tokens)
        'file-name ::= [A-Za-z0-9_/] [A-Za-z0-9_./-]{0,100} "." [A-Za-z0-9]{1,10}',
    ]
    if files:
        rules += _body_rules("file-body", [], BLANK_ENDS)
    words = [d + end for d in denied for end in _ENDS] + list(EDITORS)
    for lang in ("bash", "python") if python else ("bash",):
        rules += _body_rules(
            f"{lang}-body",
            [*echoed, DONE, *NEVER_STARTS * (lang == "bash")],
            (words if lang == "bash" else []) + BLANK_ENDS,
        )
    root = {"auto": "act | done", "any": "act", "none": "done"}[choice]
    return f"root ::= {root}\n" + "\n".join(rules) + "\n"


class _Words:
    """An Aho-Corasick automaton over banned words: its states are the words' prefixes; reading a word whole
    is the dead state (None)."""

    def __init__(self, words: list[str]) -> None:
        self.words = [w for w in dict.fromkeys(words) if w and "`" not in w]
        self.states = sorted({""} | {w[:i] for w in self.words for i in range(len(w))}, key=lambda x: (len(x), x))
        self.alphabet = sorted({c for w in self.words for c in w} - {"\n"})

    def step(self, state: str | None, c: str) -> str | None:
        if state is None:
            return None
        t = state + c
        if any(t.endswith(w) for w in self.words):
            return None
        while t not in self.states:
            t = t[1:]
        return t

    def run(self, text: str) -> str | None:
        state: str | None = ""
        for c in text:
            state = self.step(state, c)
        return state


def _start_rules(
    name: str, starts: list[str], first: str, rest: Callable[[int], str], end: str, never: str
) -> list[str]:
    """Text that does not start with any of ``starts``: a trie over them, left as soon as the text differs, then
    ``rest(depth)``. ``first``: characters it never starts with; ``end``: what may close it on the trie (a text that
    is a proper prefix of a start); ``never``: what it never holds, as a class's GBNF (``\\x00-\\x08``)."""
    starts = [t for t in dict.fromkeys(starts) if t and not any(c in t for c in "`\n\r")]
    starts = [t for t in starts if not any(u != t and t.startswith(u) for u in starts)]
    prefixes = sorted({t[:i] for t in starts for i in range(len(t))} | {""})
    node = {p: f"{name}-{i}" if p else name for i, p in enumerate(prefixes)}
    rules = []
    for p in prefixes:
        children = sorted({t[len(p)] for t in starts if t.startswith(p)})
        alts = [f"{_lit(c)} {node[p + c]}" for c in children if p + c in node]  # a whole start: not allowed
        banned = "".join(children) + (first if not p else "")
        alts.append(f"[^{never}{_cls(banned)}] {rest(len(p) + 1)}")
        if p and end:
            alts.append(end)
        rules.append(f"{node[p]} ::= " + " | ".join(alts))
    return rules


def _body_rules(name: str, forbidden: list[str], words: Sequence[str] = ()) -> list[str]:
    """A body that does not start with any of the ``forbidden`` starts (an echoed line, ``sudo ``) and never
    contains a banned word. Rules: a trie over the forbidden starts (a newline only ever ends one); off the trie,
    ``{name}-f{k}`` is "free text in word state k" and ``{name}-g`` free text that may close here (just after a
    newline)."""
    can = {f for f in forbidden if "`" not in f}  # such a body cannot be generated anyway
    forbidden = [f for f in can if not any(g != f and f.startswith(g) for g in can)]
    ac = _Words(list(words))
    free = {state: f"{name}-f{i}" for i, state in enumerate(ac.states)}
    other = f"[^{_cls('`' + chr(10) + chr(13) + ''.join(ac.alphabet))}] {free['']}"  # a character no banned word has

    rules = []
    for state, rule in free.items():  # free text from a word state, up to a newline that closes the block
        alts = [f"{_lit(c)} {free[t]}" for c in ac.alphabet if (t := ac.step(state, c)) is not None]
        if ac.step(state, "\n") is not None:  # a newline ends every word but can complete one ("wc\n")
            alts.append('"\\n" ' + f"{name}-g")
        rules.append(f"{rule} ::= " + " | ".join(alts + [other]))
    rules.append(f'{name}-g ::= "```" | {free[""]}')
    prefixes = sorted({f[:i] for f in forbidden for i in range(len(f))} | {""})
    node = {p: f"{name}-{i}" if p else name for i, p in enumerate(prefixes)}
    for p in prefixes:
        here = ac.run(p)
        if here is None:
            continue  # holds a banned word: never reached
        children = sorted({f[len(p)] for f in forbidden if f.startswith(p)})
        alts = [f"{_lit(c)} {node[p + c]}" for c in children if p + c in node and ac.run(p + c) is not None]
        if "\n" not in children and ac.step(here, "\n") is not None:
            alts.append('"\\n" ' + (f"{name}-g" if p else free[""]))  # a body is never empty
        others = [c for c in ac.alphabet if c not in children]  # leave the trie: on with the word automaton
        alts += [f"{_lit(c)} {free[t]}" for c in others if (t := ac.step(here, c)) is not None]
        alts.append(f"[^{_cls('`' + chr(10) + chr(13) + ''.join(children + others))}] {free['']}")
        rules.append(f"{node[p]} ::= " + " | ".join(alts))
    return rules


def _lit(ch: str) -> str:
    return '"' + "".join(_esc(c) for c in ch) + '"'


def _cls(chars: str) -> str:
    return "".join(_esc(c, cls=True) for c in chars)


def _esc(c: str, cls: bool = False) -> str:
    if cls and c in "^-":  # llama.cpp has no \^ or \- escape (an echoed traceback line of ^^^ broke the grammar)
        return f"\\x{ord(c):02X}"
    if c in '"\\' or (cls and c in "]["):
        return "\\" + c
    if ord(c) < 0x20 or c == "\x7f":
        return f"\\x{ord(c):02X}"
    return c

"""Parse a shell command into the simple commands bash would run, with every word decoded.

bashlex (a port of bash's own grammar) finds the structure; this module decodes each word
from the source text itself (quotes, escapes, ``$'…'``), so ``g""it``, ``'r'm`` and ``\\rm``
come out as ``git``, ``rm`` and ``rm``. Anything whose value is only known at run time
(``$x``, ``$(…)``, ``~user``, brace expansion) is *dynamic*: it never matches a rule word.
What cannot be understood at all is reported in ``ParsedShell.problems`` and must be asked
about, never allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import bashlex
from bashlex import parser as _bl_parser

from .words import Word, decode_word, dynamic, parameter_problem, substitution_spans, unescape_backticks

# Control characters other than tab and newline (\r among them), and Unicode characters that
# make the text a person approves look unlike what bash runs (line separators, bidi overrides).
_BAD_CHARS = re.compile("[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")
_LEFTOVER_OK = re.compile(r"(?:[ \t\n;&]|#[^\n]*)*")
MAX_DEPTH = 8  # bash -c inside bash -c inside …: deeper than this is not worth understanding


@dataclass(frozen=True)
class Redirect:
    op: str  # >, >>, >|, &>, &>>, <, <>, <<, <<-, <<<, >&, <&
    fd: int | None
    target: Word | int | None  # a file word, an fd number (2>&1), or None (here-doc)


@dataclass
class SimpleCommand:
    words: list[Word]
    assigns: list[tuple[str, Word]] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    text: str = ""


@dataclass
class ParsedShell:
    commands: list[SimpleCommand]
    problems: list[str]  # anything not understood: the command must be asked about

    @property
    def understood(self) -> bool:
        return not self.problems


# ---------------------------------------------------------------- parsing


def parse_shell(command: str, home: str | None = None, _depth: int = 0) -> ParsedShell:
    """Every simple command ``command`` would run (substitutions first), and what was not understood."""
    result = ParsedShell([], [])
    bad = _BAD_CHARS.search(command)
    if bad:
        result.problems.append(f"contains the control or invisible character {bad.group()!r}")
        return result
    if _depth > MAX_DEPTH:
        result.problems.append("shells nested too deeply")
        return result
    try:
        nodes = bashlex.parse(_neutralize_time(command))
    except Exception as e:  # bashlex raises ParsingError, NotImplementedError and friends
        msg = str(e).split("\n")[0] or type(e).__name__
        result.problems.append(f"the shell parser does not understand it ({msg})")
        return result
    spans: list[tuple[int, int]] = []
    for node in nodes:
        spans.append(node.pos)
        spans.extend(_heredoc_spans(node))
    leftover = _uncovered(command, spans)
    if not _leftover_ok(command, leftover):
        result.problems.append(f"part of it was not parsed: {leftover.strip()[:60]!r}")
    walker = _Walker(command, result, home, _depth)
    try:
        for node in nodes:
            walker.walk(node)
    except RecursionError:
        result.problems.append("nested too deeply to analyse")
    except Exception as e:  # an AST shape this walker does not know: not understood, never allowed
        result.problems.append(f"could not analyse it ({type(e).__name__}: {e})")
    return result


def _neutralize_time(command: str) -> str:
    """bashlex rejects the `time` keyword; spell it TIME (same length) and treat it as a wrapper."""
    if "time" not in command:
        return command
    try:
        toks = [t for t in _bl_parser._parser(command).tok if t.ttype and t.ttype.name == "TIME"]
    except Exception:
        return command
    chars = list(command)
    for t in toks:
        if command[t.lexpos:t.lexpos + 4] == "time":
            chars[t.lexpos:t.lexpos + 4] = "TIME"
    return "".join(chars)


def _leftover_ok(command: str, leftover: str) -> bool:
    """Outside the parsed nodes only blanks, ; & and comments, each comment starting a word."""
    if not _LEFTOVER_OK.fullmatch(leftover):
        return False
    return all(m.start() == 0 or command[m.start() - 1] in " \t\n;&|()"
               for m in re.finditer(r"#[^\n]*", leftover))


def _heredoc_spans(node) -> list[tuple[int, int]]:
    found = []

    class V(bashlex.ast.nodevisitor):
        def visitheredoc(self, n, value):
            found.append(n.pos)

    V().visit(node)
    return found


def _uncovered(text: str, spans: list[tuple[int, int]]) -> str:
    covered = bytearray(len(text))
    for a, b in spans:
        covered[a:b] = b"\x01" * (min(b, len(text)) - a)
    return "".join(" " if covered[k] else ch for k, ch in enumerate(text))


class _Walker:
    def __init__(self, src: str, result: ParsedShell, home: str | None, depth: int):
        self.src, self.result, self.home, self.depth = src, result, home, depth

    def problem(self, msg: str) -> None:
        if msg not in self.result.problems:
            self.result.problems.append(msg)

    def walk(self, node) -> None:
        kind = node.kind
        if kind in ("list", "pipeline"):
            for part in node.parts:
                if part.kind not in ("operator", "pipe", "reservedword"):
                    self.walk(part)
        elif kind == "compound":
            for part in node.list:
                if part.kind != "reservedword":
                    self.walk(part)
            self._redirect_only(node)
        elif kind in ("if", "while", "until", "for"):
            words = [p for p in node.parts if p.kind == "word"]
            if kind == "for" and words:  # the loop variable is assigned each value
                self.result.commands.append(SimpleCommand(
                    [], [(words[0].word, dynamic(words[0].word, "loop variable"))], [], self._text(node)))
                for w in words[1:]:
                    self._word(w)
            for part in node.parts:
                if part.kind not in ("reservedword", "word"):
                    self.walk(part)
            self._redirect_only(node)
        elif kind == "function":
            self.problem("defines a shell function (it could shadow any command name)")
            for part in node.parts:
                if part.kind not in ("reservedword", "word"):
                    self.walk(part)
        elif kind == "command":
            self._command(node)
        else:
            self.problem(f"unsupported shell construct: {kind}")

    def _text(self, node) -> str:
        return self.src[node.pos[0]:node.pos[1]]

    def _redirect_only(self, node) -> None:
        redirects = [self._redirect(r) for r in getattr(node, "redirects", None) or []]
        if redirects:
            self.result.commands.append(SimpleCommand([], [], redirects, self._text(node)))

    def _word(self, node) -> Word:
        """Decode a word node, and parse the commands substituted into it.

        The substitutions are found twice, by bashlex and by our own scanner of bash's quoting
        rules; they must agree (bashlex has been seen to miss one after a comment, or inside
        'x'"$(…)"'…'). The commands inside are then parsed from the text our scanner found.
        """
        raw, base = self._text(node), node.pos[0]
        theirs = sorted((p.pos[0] - base, p.pos[1] - base) for p in getattr(node, "parts", None) or []
                        if p.kind in ("commandsubstitution", "processsubstitution"))
        for part in getattr(node, "parts", None) or []:
            if part.kind not in ("parameter", "tilde", "commandsubstitution", "processsubstitution"):
                self.problem(f"unsupported shell construct in a word: {part.kind}")
        mine = substitution_spans(raw)
        if mine is None or [(s, e) for s, e, _ in mine] != theirs:
            self.problem(f"cannot tell for sure which commands this word substitutes: {raw[:60]}")
        if "${" in raw and re.search(r"\$\(|`|[<>]\(", raw):
            self.problem(f"command substitution inside a parameter expansion: {raw[:60]}")
        if "${" in raw and (why := parameter_problem(raw)):
            self.problem(f"{why}: {raw[:60]}")
        for start, end, kind in mine or []:
            body = raw[start + 1:end - 1] if kind == "`" else raw[start + 2:end - 1]
            inner = parse_shell(unescape_backticks(body) if kind == "`" else body, self.home, self.depth + 1)
            self.result.commands.extend(inner.commands)
            for p in inner.problems:
                self.problem(f"in {raw[start:end][:40]}: {p}")
        return decode_word(raw, self.home)

    def _redirect(self, node) -> Redirect:
        op = node.type
        fd = node.input if isinstance(getattr(node, "input", None), int) else None
        target = node.output
        if op in ("<<", "<<-"):
            delim = self._text(target)
            doc = getattr(node, "heredoc", None)
            body = self.src[doc.pos[0]:doc.pos[1]] if doc else ""
            lines = [line.lstrip("\t") if op == "<<-" else line for line in body.split("\n")]
            if not doc or lines[-1] != delim or delim in lines[:-1]:  # where bash would end it
                self.problem(f"cannot tell where the here-document {delim!r} ends")
            if not re.search(r"[\\'\"]", delim) and re.search(r"\$[({\[]|`", body):
                self.problem("a here-document substitutes commands or parameters")
            return Redirect(op, fd, None)
        if isinstance(target, int):
            return Redirect(op, fd, target)
        if isinstance(target, str):  # >&- and <&- close a descriptor
            if target != "-":
                self.problem(f"unsupported redirection target {target!r}")
            return Redirect(op, fd, None)
        word = self._word(target)
        if word.static and re.fullmatch(r"/dev/(tcp|udp)/.*", word.value or ""):
            self.problem(f"redirection to a network socket: {word.value}")
        return Redirect(op, fd, word)

    def _command(self, node) -> None:
        cmd = SimpleCommand([], [], [], self._text(node))
        for part in node.parts:
            if part.kind == "word":
                cmd.words.append(self._word(part))
            elif part.kind == "assignment":
                raw = self._text(part)
                name, _, value = raw.partition("=")
                self._word(part)  # walk substitutions in the value
                cmd.assigns.append((name.rstrip("+"), decode_word(value, self.home)))
            elif part.kind == "redirect":
                cmd.redirects.append(self._redirect(part))
            else:
                self.problem(f"unsupported shell construct in a command: {part.kind}")
        self.result.commands.append(cmd)

"""Parse a shell command into the simple commands bash would run, with every word decoded.

tree-sitter's Bash grammar finds the structure; this module checks it against bash's own rules
and decodes each word from the source text itself (quotes, escapes, ``$'…'``), so ``g""it``,
``'r'm`` and ``\\rm`` come out as ``git``, ``rm`` and ``rm``. Every word boundary and every
substitution the grammar reports is found a second time by drivetrain's scanner of bash's
quoting rules (``words``), and every character of the command must belong to a word, an
operator, a here-document or a comment; where the two disagree, or the grammar reports an
error, the command is not understood. Anything whose value is only known at run time (``$x``,
``$(…)``, ``~user``, brace expansion) is *dynamic*: it never matches a rule word. What is not
understood is reported in ``ParsedShell.problems`` and must be asked about, never allowed.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .grammar import STATEMENTS, SUBSTITUTIONS, TOKENS, UNSUPPORTED, WORDS, first_error, parse_tree, rightmost_command
from .redirects import REDIRECTS, Redirect, Redirections
from .words import Word, decode_word, dynamic, parameter_problem, substitution_spans, unescape_backticks, word_end

if TYPE_CHECKING:
    from tree_sitter import Node

# Control characters other than tab and newline (\r among them), and Unicode characters that
# make the text a person approves look unlike what bash runs (line separators, bidi overrides).
_BAD_CHARS = re.compile("[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")
_GAP_OK = re.compile(r"(?:[ \t\n]|\\\n)*")
BLANKS = re.compile(r"(?:[ \t]|\\\n)*")
MAX_DEPTH = 8  # bash -c inside bash -c inside …: deeper than this is not worth understanding


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
        source = command.encode("utf-8")
    except UnicodeEncodeError:
        result.problems.append("contains text that is not valid Unicode")
        return result
    walker = _Walker(command, source, result, home, _depth)
    try:
        walker.walk_all(parse_tree(source))
    except RecursionError:
        result.problems.append("nested too deeply to analyse")
    except Exception as e:  # an AST shape this walker does not know: not understood, never allowed
        result.problems.append(f"could not analyse it ({type(e).__name__}: {e})")
    return result


class _Walker(Redirections):
    def __init__(self, src: str, source: bytes, result: ParsedShell, home: str | None, depth: int):
        self.src, self.result, self.home, self.depth = src, result, home, depth
        self.chars = None if src.isascii() else [i for i, ch in enumerate(src) for _ in ch.encode("utf-8")]
        self.covered: list[tuple[int, int]] = []
        self.made: dict[int, SimpleCommand] = {}  # command node id -> its SimpleCommand

    # ------------------------------------------------------------ helpers

    def problem(self, msg: str) -> None:
        if msg not in self.result.problems:
            self.result.problems.append(msg)

    def span(self, node: Node) -> tuple[int, int]:
        if self.chars is None:
            return node.start_byte, node.end_byte
        c = self.chars
        return (
            c[node.start_byte] if node.start_byte < len(c) else len(self.src),
            c[node.end_byte] if node.end_byte < len(c) else len(self.src),
        )

    def text(self, node: Node) -> str:
        a, b = self.span(node)
        return self.src[a:b]

    def cover(self, node_or_span: Node | tuple[int, int]) -> None:
        self.covered.append(node_or_span if isinstance(node_or_span, tuple) else self.span(node_or_span))

    def token(self, node: Node, allowed: set[str] | tuple[str, ...], where: str) -> None:
        if node.type in allowed:
            self.cover(node)
        else:
            self.problem(f"unexpected {self.text(node)[:20]!r} in {where.replace('_', ' ')}")

    def one_line(self, nodes: list[Node], node: Node) -> None:
        """The parts of one simple command (or redirection) are separated by blanks only: a newline
        between them ends the command in bash, whatever the grammar made of it (``echo != =~⏎rm``)."""
        for prev, nxt in itertools.pairwise(nodes):
            if not BLANKS.fullmatch(self.src[self.span(prev)[1] : self.span(nxt)[0]]):
                self.problem(f"cannot tell where the command ends: {self.text(node)[:60]!r}")
                return

    def walk_all(self, root: Node) -> None:
        if root.has_error:
            bad = first_error(root)
            at = self.text(bad)[:40] if bad is not None else ""
            self.problem(f"the shell parser does not understand it{f' (at {at!r})' if at else ''}")
        self.container(root)
        gaps = _uncovered(self.src, self.covered)
        if not self.result.problems and not _GAP_OK.fullmatch(gaps):
            self.problem(f"part of it was not parsed: {gaps.strip()[:60]!r}")

    # ------------------------------------------------------------ statements

    def container(self, node: Node) -> None:
        """program, subshell, { … }, do … done, if, while, &&/||, |, !: statements and their operators."""
        allowed = TOKENS.get(node.type, set())
        for child in node.children:
            if child.type == "comment":
                self.comment(child)
            elif not child.is_named:
                self.token(child, allowed, node.type)
            elif child.type in STATEMENTS:
                self.statement(child)
            elif child.type in ("do_group", "elif_clause", "else_clause"):
                self.container(child)
            else:
                self.problem(f"unsupported shell construct: {child.type.replace('_', ' ')}")

    def statement(self, node: Node) -> None:
        kind = node.type
        if kind == "command":
            self.command(node)
        elif kind == "redirected_statement":
            self.redirected(node)
        elif kind in ("variable_assignment", "variable_assignments"):
            pairs = [node] if kind == "variable_assignment" else node.named_children
            cmd = SimpleCommand(
                [], [self.assignment(a) for a in pairs if a.type == "variable_assignment"], text=self.text(node)
            )
            if any(a.type not in ("variable_assignment", "comment") for a in pairs):
                self.problem(f"unsupported assignment: {self.text(node)[:60]}")
            self.one_line(node.children, node)
            self.result.commands.append(cmd)
        elif kind in ("declaration_command", "unset_command"):
            self.flat(node, node.type.split("_")[0] + " command")
        elif kind == "test_command":
            opener = node.children[0].type if node.children else ""
            if opener != "[":
                self.problem(
                    f"unsupported shell construct: {opener} … (a test or arithmetic command that "
                    "evaluates arithmetic, which can run commands)"
                )
            self.flat(node, "[ … ]")
        elif kind == "for_statement":
            self.for_loop(node)
        elif kind in UNSUPPORTED:
            self.problem(UNSUPPORTED[kind])
            self.salvage(node)
        else:
            self.container(node)

    def salvage(self, node: Node) -> None:
        """In a construct that is not understood, still find the commands inside (for deny rules)."""
        for child in node.named_children:
            if child.type in STATEMENTS:
                self.statement(child)
            elif child.type in ("do_group", "compound_statement", "case_item", "subshell"):
                self.salvage(child)

    def for_loop(self, node: Node) -> None:
        if node.children and node.children[0].type == "select":
            self.problem("a select loop")
        var = node.child_by_field_name("variable")
        if var is not None:
            self.cover(var)
            name = self.text(var)
            self.result.commands.append(
                SimpleCommand([], [(name, dynamic(name, "loop variable"))], [], self.text(node))
            )
        header = [c for c in node.children if c.type in WORDS or c.type in ("for", "select", "in")]
        self.one_line(header, node)
        for child in node.children:
            if child == var:
                continue
            if child.type == "comment":
                self.comment(child)
            elif child.type == "do_group":
                self.container(child)
            elif not child.is_named:
                self.token(child, TOKENS["for_statement"] | {"select"}, "a for loop")
            elif child.type in WORDS:
                self.word(child)
            else:
                self.problem(f"unsupported shell construct in a for loop: {child.type}")

    def command(self, node: Node) -> SimpleCommand:
        cmd = SimpleCommand([], [], [], self.text(node))
        named = False
        for child in node.children:
            kind = child.type
            if kind == "comment":
                self.comment(child)
            elif kind == "variable_assignment" and not named:
                cmd.assigns.append(self.assignment(child))
            elif kind in REDIRECTS:
                self.redirect(child, cmd)
            elif kind in WORDS or (not child.is_named and kind in ("$", "==", "=~", "=")):
                named = True
                cmd.words.append(self.word(child))
            else:
                self.problem(f"unsupported shell construct in a command: {kind}")
        self.one_line(node.children, node)
        self.result.commands.append(cmd)
        self.made[node.id] = cmd
        return cmd

    def flat(self, node: Node, where: str) -> None:
        """declare/export/local/unset and ``[ … ]``, as one simple command of blank-separated words
        (each checked to be one word by bash's rules)."""
        cmd = SimpleCommand([], [], [], self.text(node))
        stack, pieces = list(reversed(node.children)), []
        while stack:
            child = stack.pop()
            pieces.append(child)
            if child.type == "comment":
                self.comment(child)
            elif child.type in ("unary_expression", "binary_expression", "parenthesized_expression"):
                pieces.pop()
                stack.extend(reversed(child.children))
            elif (
                child.type in WORDS
                or child.type in ("variable_assignment", "test_operator", "regex")
                or not child.is_named
            ):
                cmd.words.append(self.word(child))
            else:
                self.problem(f"unsupported shell construct in {where}: {child.type}")
        self.one_line(pieces, node)
        self.result.commands.append(cmd)

    def redirected(self, node: Node) -> None:
        body = node.child_by_field_name("body")
        if body is not None:
            self.statement(body)
        target = self.made.get(rightmost_command(body).id) if body is not None else None
        cmd = target or SimpleCommand([], [], [], self.text(node))
        prev = body
        for child in node.children:
            if body is not None and child == body:
                continue
            if child.type == "comment":
                self.comment(child)
                continue
            if prev is not None:
                self.lost_words(prev, child, cmd)
            prev = child
            if child.type in REDIRECTS:
                self.redirect(child, cmd)
            else:
                self.problem(f"unsupported shell construct in a redirection: {child.type}")
        if target is None and cmd.words:
            self.problem(f"words after a redirection of a compound command: {self.text(node)[:60]}")
        if target is None and (cmd.redirects or cmd.words):
            self.result.commands.append(cmd)

    def lost_words(self, before: Node, after: Node, cmd: SimpleCommand) -> None:
        """Between a command and its redirections only blanks, or plain words the grammar dropped
        (it loses the ``-`` of ``python3 - <<'PY'``): those are read by bash's rules and kept."""
        a, b = self.span(before)[1], self.span(after)[0]
        gap = self.src[a:b]
        if BLANKS.fullmatch(gap):
            return
        if not re.fullmatch(r"(?:[ \t]+[-\w./=:,+%@]+)+[ \t]+", gap):
            self.problem(f"cannot tell where the command ends: {self.text(before)[:30]!r}…{gap[:30]!r}")
            return
        for m in re.finditer(r"[^ \t]+", gap):
            self.cover((a + m.start(), a + m.end()))
            cmd.words.append(decode_word(m.group(), self.home))

    # ------------------------------------------------------------ words

    def word_text(self, node: Node) -> str:
        """The node's text, once bash's own rules agree that it is exactly one word."""
        a, b = self.span(node)
        self.cover((a, b))
        if word_end(self.src, a) != b:
            self.problem(f"cannot tell where the word {self.src[a:b][:40]!r} ends")
        return self.src[a:b]

    def substitutions(self, node: Node) -> list[tuple[int, int]]:
        """The outermost $(…), `…`, <(…) and >(…) the grammar found under ``node``."""
        found, stack = [], [node]
        while stack:
            n = stack.pop()
            if n.type in SUBSTITUTIONS:
                found.append(self.span(n))
            else:
                stack.extend(n.children)
        return found

    def substituted(self, raw: str, spans: list[tuple[int, int, str]]) -> None:
        """Parse the commands inside each substitution from the text our scanner found."""
        for start, end, kind in spans:
            body = raw[start + 1 : end - 1] if kind == "`" else raw[start + 2 : end - 1]
            inner = parse_shell(unescape_backticks(body) if kind == "`" else body, self.home, self.depth + 1)
            self.result.commands.extend(inner.commands)
            for p in inner.problems:
                self.problem(f"in {raw[start:end][:40]}: {p}")

    def word(self, node: Node) -> Word:
        """Decode a word node, and parse the commands substituted into it.

        The substitutions are found twice, by the grammar and by our own scanner of bash's quoting
        rules; they must agree. The commands inside are then parsed from the text our scanner found.
        """
        raw, base = self.word_text(node), self.span(node)[0]
        theirs = sorted((a - base, b - base) for a, b in self.substitutions(node))
        mine = substitution_spans(raw)
        if mine is None or [(s, e) for s, e, _ in mine] != theirs:
            self.problem(f"cannot tell for sure which commands this word substitutes: {raw[:60]}")
        if "${" in raw and re.search(r"\$\(|`|[<>]\(", raw):
            self.problem(f"command substitution inside a parameter expansion: {raw[:60]}")
        if "${" in raw and (why := parameter_problem(raw)):
            self.problem(f"{why}: {raw[:60]}")
        self.substituted(raw, mine or [])
        return decode_word(raw, self.home)

    def assignment(self, node: Node) -> tuple[str, Word]:
        raw = self.text(node)
        self.word(node)  # the whole NAME=value is one word; walk substitutions in the value
        name, _, value = raw.partition("=")
        return name.rstrip("+"), decode_word(value, self.home)

    def comment(self, node: Node) -> None:
        """bash starts a comment only at the start of a word."""
        a, b = self.span(node)
        if a and self.src[a - 1] not in " \t\n;&|()":
            self.problem(f"a # that bash would not take for a comment: {self.src[a:b][:40]!r}")
        self.cover((a, b))


def _uncovered(text: str, spans: list[tuple[int, int]]) -> str:
    covered = bytearray(len(text))
    for a, b in spans:
        covered[a:b] = b"\x01" * (min(b, len(text)) - a)
    return "".join(" " if covered[k] else ch for k, ch in enumerate(text))

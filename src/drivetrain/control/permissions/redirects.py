"""Redirections and here-documents, as bash reads them (the part of the shell walker that handles them).

A here-document's body ends at the first line that is exactly its delimiter (after leading tabs,
for ``<<-``), checked here against what the grammar made of it. With a quoted delimiter
(``<<'EOF'``, ``<<"EOF"``, ``<<\\EOF``) the body is text; otherwise it is expanded like a
double-quoted string, except that quotes are not special in it, and every ``$(…)`` and backtick
in it is a command that runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .grammar import STATEMENTS, WORDS
from .words import Word, decode_word, expansion_problems, heredoc_substitution_spans

if TYPE_CHECKING:
    from tree_sitter import Node

REDIRECTS = ("file_redirect", "heredoc_redirect", "herestring_redirect")


@dataclass(frozen=True)
class Redirect:
    op: str  # >, >>, >|, &>, &>>, <, <&, >&, <<, <<-, <<<
    fd: int | None
    target: Word | int | None  # a file word, an fd number (2>&1), or None (here-doc, >&-)


class Redirected(Protocol):
    """What a redirection is added to (``shell.SimpleCommand``)."""

    words: list[Word]
    redirects: list[Redirect]


class WalkerParts(Protocol):
    """What the redirections read and call of the shell walker (``shell._Walker``), which mixes them in."""

    src: str
    home: str | None

    def problem(self, msg: str) -> None: ...

    def span(self, node: Node) -> tuple[int, int]: ...

    def text(self, node: Node) -> str: ...

    def cover(self, node_or_span: Node | tuple[int, int]) -> None: ...

    def one_line(self, nodes: list[Node], node: Node) -> None: ...

    def container(self, node: Node) -> None: ...

    def statement(self, node: Node) -> None: ...

    def comment(self, node: Node) -> None: ...

    def word(self, node: Node) -> Word: ...

    def word_text(self, node: Node) -> str: ...

    def substitutions(self, node: Node) -> list[tuple[int, int]]: ...

    def substituted(self, raw: str, spans: list[tuple[int, int, str]]) -> None: ...


class Redirections(WalkerParts):
    """Mixed into the shell walker (``shell._Walker``), which provides the ``WalkerParts`` it uses."""

    def redirect(self, node: Node, cmd: Redirected) -> None:
        """Adds the redirection to ``cmd``; words the grammar hangs on a redirection (``> out extra``)
        are the command's own words, as bash reads them."""
        if node.type == "heredoc_redirect":
            return self.heredoc(node, cmd)
        fd, op, targets = None, None, []
        for child in node.children:
            if child.type == "file_descriptor":
                fd = child
            elif child.type == "comment":
                self.comment(child)
            elif not child.is_named and op is None:
                op = child.type
                self.cover(child)
                if fd is not None and (fd.end_byte != child.start_byte or not self.text(fd).isdigit()):
                    self.problem(f"unsupported file descriptor in {self.text(node)[:40]!r}")
            elif child.type in WORDS:
                targets.append(child)
            else:
                self.problem(f"unsupported redirection: {self.text(node)[:40]!r}")
                return None
        if fd is not None:
            self.cover(fd)
        self.one_line(node.children, node)
        if op is None:
            self.problem(f"unsupported redirection: {self.text(node)[:40]!r}")
            return None
        number = int(self.text(fd)) if fd is not None and self.text(fd).isdigit() else None
        if op in (">&-", "<&-"):
            cmd.redirects.append(Redirect(op[:2], number, None))
        elif not targets:
            self.problem(f"a redirection without a target: {self.text(node)[:40]!r}")
        else:
            first = targets.pop(0)
            raw = self.text(first)
            if op in (">&", "<&") and raw.isdigit():
                self.cover(first)
                cmd.redirects.append(Redirect(op, number, int(raw)))
            else:
                word = self.word(first)
                if word.static and re.fullmatch(r"/dev/(tcp|udp)/.*", word.value or ""):
                    self.problem(f"redirection to a network socket: {word.value}")
                cmd.redirects.append(Redirect(op, number, word))
        cmd.words.extend(self.word(t) for t in targets)

    def heredoc(self, node: Node, cmd: Redirected) -> None:
        fd, op, start, body, end = None, "", None, None, None
        for child in node.children:
            kind = child.type
            if kind == "file_descriptor":
                fd = child
                self.cover(child)
            elif kind in ("<<", "<<-"):
                op = kind
                self.cover(child)
            elif kind == "heredoc_start":
                start = child
            elif kind == "heredoc_body":
                body = child
            elif kind == "heredoc_end":
                end = child
            elif kind == "comment":
                self.comment(child)
            elif kind == "file_redirect":  # cat <<EOF > out
                self.redirect(child, cmd)
            elif kind == "pipeline":  # cat <<EOF | grep x: the grammar hangs the rest of the line here
                self.container(child)
            elif kind in STATEMENTS:  # cat <<EOF && rm x
                self.statement(child)
            elif not child.is_named and kind in ("&&", "||", "\n"):
                self.cover(child)
            else:
                self.problem(f"unsupported shell construct after a here-document: {kind}")
        if start is None or end is None or end.start_byte == end.end_byte or not op:
            self.problem("cannot tell where a here-document ends")
            return
        number = int(self.text(fd)) if fd is not None and self.text(fd).isdigit() else None
        cmd.redirects.append(Redirect(op, number, None))
        self.heredoc_body(node, op, start, body, end)

    def heredoc_body(self, node: Node, op: str, start: Node, body: Node | None, end: Node) -> None:
        """Check the body ends where bash would end it, and look through what an unquoted one runs."""
        src = self.src
        raw = self.word_text(start)
        delim = decode_word(raw, self.home).value
        if delim is None:
            self.problem(f"a here-document delimiter only known at run time: {raw}")
            return
        newline = src.find("\n", self.span(start)[1])  # bash reads the body from the next line on
        body_from = newline + 1
        line = [c for c in node.children if c.type not in ("heredoc_body", "heredoc_end")]
        if (
            newline < 0
            or any(self.span(c)[1] > newline for c in line)
            or self.span(body if body is not None else end)[0] < body_from
        ):
            self.problem("a here-document whose command goes on over several lines")
            return
        end_a, _end_b = self.span(end)
        line_from = src.rfind("\n", 0, end_a) + 1
        line_to = src.find("\n", end_a) % (len(src) + 1)  # -1 (the last line) becomes len(src)
        strip: Callable[[str], str] = (lambda s: s.lstrip("\t")) if op == "<<-" else (lambda s: s)
        lines = src[body_from:line_from].split("\n")[:-1]
        if strip(src[line_from:line_to]) != delim or any(strip(x) == delim for x in lines):
            self.problem(f"cannot tell where the here-document {delim!r} ends")
            return
        self.cover((body_from, line_to))
        if re.search(r"[\\'\"]", raw):
            return  # a quoted delimiter: the body is literal text
        text = src[body_from:line_from]
        theirs = {(a - body_from, b - body_from) for a, b in self.substitutions(body)} if body else set()
        mine = heredoc_substitution_spans(text)
        # The grammar does not look for `…` in a here-document: every substitution it found must be
        # one our scanner found, and all of ours are looked through.
        if mine is None or not theirs <= {(s, e) for s, e, _ in mine}:
            self.problem(f"cannot tell for sure which commands the here-document {delim!r} substitutes")
        for why in expansion_problems(text):
            self.problem(f"in the here-document {delim!r}: {why}")
        self.substituted(text, mine or [])

"""Shell words as bash sees them: the value after quote removal, and where commands are substituted.

``decode_word`` turns ``g""it``, ``'r'm``, ``\\rm`` and ``$'\\x72m'`` into ``git``, ``rm``, ``rm``, ``rm``;
anything only known at run time (``$x``, ``$(…)``, ``~user``, ``{a,b}``) has no value.
``substitution_spans`` finds every ``$(…)``, backtick and ``<(…)``/``>(…)`` bash would run, and
``word_end`` where bash ends a word, both by bash's quoting rules: the cross-check on the parser
(tree-sitter), so that where the two disagree the command is not understood rather than misread.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

_EXPANSION_START = re.compile(r"[A-Za-z0-9_{(\[@*#?!$-]")
_ANSI_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}


@dataclass(frozen=True)
class Word:
    """One shell word: its value after quote removal, or None when only known at run time."""

    raw: str
    value: str | None
    glob: bool = False  # unquoted * ? [ : the value is a pattern bash expands
    why: str = ""  # why the value is dynamic
    procsub: bool = False  # the whole word is <(…) or >(…): a pipe, not a file

    @property
    def static(self) -> bool:
        return self.value is not None

    def __str__(self) -> str:
        return self.value if self.value is not None else self.raw


def dynamic(raw: str, why: str) -> Word:
    return Word(raw, None, why=why)


def decode_word(raw: str, home: str | None = None) -> Word:
    """Decode a word as bash would before running it: quotes, escapes, $'…', leading ~."""
    out: list[str] = []
    glob = False
    i, n = 0, len(raw)
    if raw.startswith(("<(", ">(")) and raw.endswith(")"):
        return Word(raw, None, why="process substitution", procsub=True)
    assign = re.match(r"[A-Za-z_][A-Za-z0-9_]*\+?=", raw)  # bash expands ~ after = and : in NAME=…
    while i < n:
        c = raw[i]
        if c == "~" and (i == 0 or (assign and (i == assign.end() or (i > assign.end() and raw[i - 1] == ":")))):
            stop = re.compile(r"[/:]" if assign and i else "/").search(raw, i)
            end = stop.start() if stop else n
            if end != i + 1:  # ~user, ~+, ~- : depend on the system or the shell's state
                return dynamic(raw, f"tilde expansion {raw[i:end]!r}")
            out.append(home if home is not None else os.path.expanduser("~"))
            i += 1
        elif c == "\\":
            if i + 1 < n:
                if raw[i + 1] != "\n":
                    out.append(raw[i + 1])
                i += 2
            else:
                out.append("\\")
                i += 1
        elif c == "'":
            j = raw.find("'", i + 1)
            if j < 0:
                return dynamic(raw, "unterminated quote")
            out.append(raw[i + 1 : j])
            i = j + 1
        elif c == '"' or (c == "$" and raw.startswith('$"', i)):
            i += 2 if c == "$" else 1
            text, i, why = _double_quoted(raw, i)
            if why:
                return dynamic(raw, why)
            out.append(text)
        elif c == "$" and raw.startswith("$'", i):
            text, i, why = _ansi_c(raw, i + 2)
            if why:
                return dynamic(raw, why)
            out.append(text)
        elif c == "$" and i + 1 < n and _EXPANSION_START.match(raw[i + 1]):
            return dynamic(raw, "parameter expansion" if raw[i + 1] not in "([" else "substitution")
        elif c == "`":
            return dynamic(raw, "command substitution")
        elif c in "<>" and raw.startswith("(", i + 1):
            return dynamic(raw, "process substitution")
        elif c == "{" and _is_brace_expansion(raw, i):
            return dynamic(raw, "brace expansion")
        else:
            glob = glob or c in "*?" or (c == "[" and "]" in raw[i + 1 :])
            out.append(c)
            i += 1
    value = "".join(out)
    if "\x00" in value:
        return dynamic(raw, "NUL character")
    return Word(raw, value, glob=glob)


def _double_quoted(raw: str, i: int) -> tuple[str, int, str]:
    out: list[str] = []
    while i < len(raw):
        c = raw[i]
        if c == '"':
            return "".join(out), i + 1, ""
        if c == "\\" and i + 1 < len(raw) and raw[i + 1] in '$`"\\\n':
            if raw[i + 1] != "\n":
                out.append(raw[i + 1])
            i += 2
            continue
        if c == "`" or (c == "$" and i + 1 < len(raw) and _EXPANSION_START.match(raw[i + 1])):
            return "", i, "expansion inside double quotes"
        out.append(c)
        i += 1
    return "", i, "unterminated double quote"


def _ansi_c(raw: str, i: int) -> tuple[str, int, str]:
    out: list[str] = []
    while i < len(raw):
        c = raw[i]
        if c == "'":
            return "".join(out), i + 1, ""
        if c != "\\" or i + 1 >= len(raw):
            out.append(c)
            i += 1
            continue
        e = raw[i + 1]
        i += 2
        if e in _ANSI_SIMPLE:
            out.append(_ANSI_SIMPLE[e])
        elif e in "01234567":
            m = re.match(r"[0-7]{0,2}", raw[i:])
            assert m is not None  # it matches the empty string
            out.append(chr(int(e + m.group(), 8) & 0xFF))
            i += m.end()
        elif e in "xuU":
            m = re.match(rf"[0-9a-fA-F]{{1,{ {'x': 2, 'u': 4, 'U': 8}[e] }}}", raw[i:])
            if not m:
                out.append("\\" + e)
                continue
            try:
                out.append(chr(int(m.group(), 16)))
            except (ValueError, OverflowError):
                return "", i, "bad escape in $'…'"
            i += m.end()
        elif e == "c":
            return "", i, "control-character escape in $'…'"
        else:
            out.append("\\" + e)
    return "", i, "unterminated $'…'"


def _is_brace_expansion(raw: str, i: int) -> bool:
    j = raw.find("}", i + 1)
    return j > i and ("," in raw[i + 1 : j] or ".." in raw[i + 1 : j])


# ---------------------------------------------------------------- substitutions


def substitution_spans(raw: str) -> list[tuple[int, int, str]] | None:
    """(start, end, kind) of each top-level $(…) / `…` / <(…) / >(…) in a word, by bash's quoting.

    None when the word holds something this scanner will not vouch for: arithmetic ($((, $[),
    an unterminated quote or substitution, a here-document inside a substitution.
    """
    spans: list[tuple[int, int, str]] = []
    i, n, in_dq = 0, len(raw), False
    while i < n:
        c = raw[i]
        if c == "\\":
            i += 2
        elif c == "'" and not in_dq:
            j = raw.find("'", i + 1)
            if j < 0:
                return None
            i = j + 1
        elif raw.startswith("$'", i) and not in_dq:
            j = i + 2
            while j < n and raw[j] != "'":
                j += 2 if raw[j] == "\\" else 1
            if j >= n:
                return None
            i = j + 1
        elif c == '"':
            in_dq = not in_dq
            i += 1
        elif raw.startswith(("$((", "$["), i):
            return None
        elif raw.startswith("$(", i) or (not in_dq and c in "<>" and raw.startswith("(", i + 1)):
            end = _match_paren(raw, i + 2)
            if end is None:
                return None
            spans.append((i, end, c))
            i = end
        elif c == "`":
            end = _backtick_end(raw, i)
            if end is None:
                return None
            spans.append((i, end, c))
            i = end
        else:
            i += 1
    return None if in_dq else spans


def _dq_end(raw: str, i: int) -> int | None:
    """The index just past the " closing a double-quoted string whose body starts at i."""
    n = len(raw)
    while i < n and raw[i] != '"':
        if raw[i] == "\\":
            i += 2
        elif raw.startswith("$(", i):
            i = _match_paren(raw, i + 2) or n + 1
        elif raw[i] == "`":
            i = _backtick_end(raw, i) or n + 1
        else:
            i += 1
    return i + 1 if i < n else None


def _brace_end(raw: str, i: int) -> int | None:
    """The index just past the } closing a ${ whose body starts at i (quotes and substitutions skipped)."""
    depth, n = 1, len(raw)
    while i < n:
        c = raw[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            j = raw.find("'", i + 1)
            end = j + 1 if j >= 0 else None
        elif c == '"':
            end = _dq_end(raw, i + 1)
        elif raw.startswith(("$((", "$["), i):
            return None
        elif raw.startswith("$(", i):
            end = _match_paren(raw, i + 2)
        elif c == "`":
            end = _backtick_end(raw, i)
        else:
            depth += (c == "{") - (c == "}")
            if depth == 0:
                return i + 1
            end = i + 1
        if end is None:
            return None
        i = end
    return None


def word_end(text: str, i: int) -> int | None:
    """Where bash ends the word that starts at text[i], by its quoting rules; None if it cannot tell.

    The cross-check on the parser's word boundaries: an unquoted blank or one of ; & | ( ) < >
    ends a word, unless it is inside quotes, a substitution or a ${…}.
    """
    n = len(text)
    while i < n:
        c = text[i]
        if c in "<>" and text.startswith("(", i + 1):
            end = _match_paren(text, i + 2)
        elif c in " \t\n;&|()<>":
            return i
        elif c == "\\":
            end = i + 2 if i + 1 < n else None
        elif c == "'":
            j = text.find("'", i + 1)
            end = j + 1 if j >= 0 else None
        elif text.startswith("$'", i):
            j = i + 2
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            end = j + 1 if j < n else None
        elif c == '"':
            end = _dq_end(text, i + 1)
        elif text.startswith(("$((", "$["), i):
            return None
        elif text.startswith("$(", i):
            end = _match_paren(text, i + 2)
        elif text.startswith("${", i):
            end = _brace_end(text, i + 2)
        elif c == "`":
            end = _backtick_end(text, i)
        else:
            end = i + 1
        if end is None:
            return None
        i = end
    return i


def heredoc_substitution_spans(body: str) -> list[tuple[int, int, str]] | None:
    """Like ``substitution_spans``, for the body of an unquoted here-document: quotes are not special
    there (``'$(rm)'`` runs rm), only a backslash before $, ` or \\ keeps them literal."""
    spans: list[tuple[int, int, str]] = []
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c == "\\":
            i += 2
        elif body.startswith(("$((", "$["), i):
            return None
        elif body.startswith("$(", i) or c == "`":
            end = _match_paren(body, i + 2) if c == "$" else _backtick_end(body, i)
            if end is None:
                return None
            spans.append((i, end, c))
            i = end
        else:
            i += 1
    return spans


def expansion_problems(text: str) -> list[str]:
    """Why any ${…} in this text could run commands: a substitution inside it, or ``parameter_problem``."""
    out = []
    for m in re.finditer(r"\$\{", text):
        end = _brace_end(text, m.end())
        piece = text[m.start() : end] if end else text[m.start() :]
        if end is None:
            out.append(f"cannot tell where {piece[:30]!r} ends")
        elif re.search(r"\$\(|`|[<>]\(", piece):
            out.append(f"command substitution inside a parameter expansion: {piece[:60]}")
        elif why := parameter_problem(piece):
            out.append(f"{why}: {piece[:60]}")
    return out


def _backtick_end(raw: str, i: int) -> int | None:
    j = i + 1
    while j < len(raw) and raw[j] != "`":
        j += 2 if raw[j] == "\\" else 1
    return j + 1 if j < len(raw) else None


def _match_paren(raw: str, i: int) -> int | None:
    """The index just past the ) closing a $( or <( whose body starts at i."""
    depth, n, word_start = 1, len(raw), True
    while i < n:
        c = raw[i]
        if c == "\\":
            i += 2
            word_start = False
            continue
        if c == "'":
            j = raw.find("'", i + 1)
            if j < 0:
                return None
            i = j + 1
        elif c == '"':
            end = _dq_end(raw, i + 1)
            if end is None:
                return None
            i = end
        elif c == "`":
            end = _backtick_end(raw, i)
            if end is None:
                return None
            i = end
        elif c == "#" and word_start:  # a comment runs to the end of the line, ) included
            j = raw.find("\n", i)
            if j < 0:
                return None
            i = j
        elif raw.startswith("<<", i) or raw.startswith(("$((", "$["), i):
            return None
        else:
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        word_start = c in " \t\n;&|()<>"
    return None


def unescape_backticks(body: str) -> str:
    """Inside `…`, a backslash quotes only $, ` and \\ (bash removes it before parsing the body)."""
    return re.sub(r"\\([$`\\])", r"\1", body)


def parameter_problem(raw: str) -> str | None:
    """Why a ${…} in this word could run commands: arithmetic on a variable's value (${x:off},
    ${a[i]}), indirection (${!x}), prompt expansion (${x@P}), or an assignment (${x=v})."""
    for m in re.finditer(r"\$\{", raw):
        body = raw[m.end() :]
        head = re.match(r"([#!]?)([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])?(.?)(.?)", body)
        assert head is not None  # every part is optional
        bang, name, op, op2 = head.groups()
        if bang == "!" and name:
            return f"${{!{name}…}} expands a name held in a variable"
        if op == "[":
            return "an array subscript in ${…} is evaluated as arithmetic"
        if op == ":" and op2 not in ("-", "=", "?", "+"):
            return "a ${x:offset} expansion evaluates arithmetic"
        if op == "=" or (op == ":" and op2 == "="):
            return "${x=value} assigns a variable"
        if "@P" in body.split("}", 1)[0]:
            return "${x@P} expands a prompt string, which can run commands"
    return None

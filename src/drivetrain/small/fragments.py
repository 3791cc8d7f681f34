"""A file block (```python greet.py) applied to its file: definitions replaced by name, lines by likeness.

A small model that has found a bug writes the fixed function, not a sed command or a whole file: asked
to edit, it rewrote whole files from memory (dropping lines) or ran the fixed function as a script that
changed nothing. So a block may name a file after its language, and its content is a *fragment* of
that file: each ``def``/``class`` in it replaces the definition of the same name (indentation matched
to the file's), each other line replaces the file's most similar line, a line equal to one of the
file's is context and changes nothing, and what resembles nothing in the file is new: inserted after
the place of the block's line before it, or at the end of the file. A block that only leaves lines out
(its lines the file's, in the file's order) deletes them. A file that does not exist yet is created with the
block as its content.

The result is an ordinary ``Edit`` call (the span of the file that changes, old and new) or a ``Write``
for a new file, so permissions, hooks and the audit log see a normal edit; a block the file already holds
is an Edit that changes nothing, which the Edit tool refuses with its own message.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
from pathlib import Path
from typing import cast

from drivetrain.jsontypes import JsonObject

_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+(\w+)")
TOP_DEF = re.compile(r"^(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)", re.M)
_SKIP_DIRS = {"node_modules", "__pycache__", "venv", "site-packages"}
LIKENESS = 0.6  # below this, a line is not taken for a changed version of the file's line

Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """One past the last non-blank line of the definition starting at ``start``."""
    end = start + 1
    for j in range(start + 1, len(lines)):
        if lines[j].strip():
            if _indent(lines[j]) <= indent:
                break
            end = j + 1
    return end


def _units(lines: list[str]) -> list[tuple[str | None, int, int]]:
    """(definition name or None for a single line, start, end) for each non-blank unit of a fragment."""
    units: list[tuple[str | None, int, int]] = []
    i = 0
    while i < len(lines):
        m = _DEF.match(lines[i])
        if m:
            end = _block_end(lines, i, len(m.group(1)))
            units.append((f"{m.group(2)} {m.group(3)}", i, end))
            i = end
        else:
            if lines[i].strip():
                units.append((None, i, i + 1))
            i += 1
    return units


def _reindent(lines: list[str], delta: int) -> list[str]:
    if delta > 0:
        return [" " * delta + ln if ln.strip() else ln for ln in lines]
    if delta < 0:
        return [ln[min(-delta, _indent(ln)) :] for ln in lines]
    return lines


def merge(original: str, fragment: str) -> list[tuple[int, int, list[str]]]:
    """The edits (start, end, new lines) on ``original``'s lines that apply ``fragment``, in order, not
    overlapping. A line like none of the file's is inserted after the place the block's previous line
    went (before the next one's, when it comes first; at the end of the file when the block shows none)."""
    orig, frag = original.splitlines(), fragment.splitlines()
    defs = {
        f"{m.group(2)} {m.group(3)}": (i, len(m.group(1)))
        for i in reversed(range(len(orig)))
        if (m := _DEF.match(orig[i]))
    }  # the first definition of a name wins
    edits: list[tuple[int, int, list[str]]] = []
    pending: list[str] = []  # new lines waiting for a place
    at: int | None = None  # where the block's previous unit ended, in the file

    def place(start: int, end: int, body: list[str]) -> None:
        nonlocal pending, at
        if pending:
            edits.append((start, start, pending))
            pending = []
        edits.append((start, end, body))
        at = start + (len(body) > 0) if end == start else end

    for name, start, end in _units(frag):
        if name is not None:
            body = frag[start:end]
            if name in defs:
                k, indent = defs[name]
                place(k, _block_end(orig, k, indent), _reindent(body, indent - _indent(body[0])))
            else:  # a new definition: where the block puts it, else at the end of the file
                k = at if at is not None else len(orig)
                gap = [""] * (2 if k and orig[k - 1].strip() else 0)
                edits.append((k, k, gap + _reindent(body, -_indent(body[0]))))
            continue
        line = frag[start].strip()
        same = [k for k, o in enumerate(orig) if o.strip() == line]
        if same:  # context: the file has it already
            k = next((k for k in same if at is None or k >= at), same[0])
            if pending:
                place(k, k, [])
            at = k + 1
            continue
        scores = [(difflib.SequenceMatcher(None, o.strip(), line).ratio(), k) for k, o in enumerate(orig) if o.strip()]
        best = max(scores, default=(0.0, -1))
        if best[0] >= LIKENESS and sum(s == best[0] for s, _ in scores) == 1:
            k = best[1]
            if orig[k].rstrip().endswith(",") and not line.endswith((",", "{", "[", "(")):
                line += ","  # the separator the model dropped (a JSON value, a list item): not its point
            place(k, k + 1, [orig[k][: _indent(orig[k])] + line])
        elif at is not None:
            edits.append((at, at, [frag[start]]))
        else:
            pending.append(frag[start])
    if pending:
        edits.append((len(orig), len(orig), pending))
    edits = [e for e in edits if e[2] or e[1] > e[0]]
    edits.sort(key=lambda e: (e[0], e[1]))
    kept: list[tuple[int, int, list[str]]] = []
    for e in edits:  # a line inside a replaced definition is that definition's business
        if kept and e[0] < kept[-1][1]:
            continue
        kept.append(e)
    return kept


def to_call(path: str, fragment: str, cwd: Path) -> tuple[str, JsonObject]:
    """The ``Edit`` or ``Write`` call (name, input) that applies a file block to ``cwd/path``."""
    target = Path(path) if Path(path).is_absolute() else cwd / path
    try:
        original = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        original = None
    if original is None or not original.strip():
        content = fragment if fragment.endswith("\n") else fragment + "\n"
        return "Write", {"file_path": path, "content": content}
    edits = merge(original, fragment)
    lines = original.splitlines()
    if not edits:  # everything in the block is in the file already: lines left out, or nothing changes
        return _deletion(path, original, fragment) or (
            "Edit",
            {"file_path": path, "old_string": fragment, "new_string": fragment},
        )
    lo, hi = edits[0][0], edits[-1][1]
    new, at = [], lo
    for start, end, body in edits:
        new += lines[at:start] + body
        at = end
    new += lines[at:hi]
    if lo == hi == len(lines):  # only additions at the end: anchor on the last non-blank line
        lo = max((k for k, line in enumerate(lines) if line.strip()), default=0)
        new = lines[lo:hi] + new
    old_text, new_text = "\n".join(lines[lo:hi]), "\n".join(new)
    if old_text == new_text and (deleted := _deletion(path, original, fragment)):
        return deleted
    if original.count(old_text) != 1:  # not a unique anchor: the whole file, merged
        whole = lines[:lo] + new + lines[hi:]
        return "Write", {"file_path": path, "content": "\n".join(whole) + "\n"}
    return "Edit", {"file_path": path, "old_string": old_text, "new_string": new_text}


def _deletion(path: str, original: str, fragment: str) -> tuple[str, JsonObject] | None:
    """The call (an Edit, or a Write when its span is not unique) that leaves out what a block leaves out, when the
    block adds and changes nothing: its lines are the file's, in the file's order, with lines between them missing
    ("remove the debug print": the file rewritten without it). A fragment otherwise cannot say "delete", and such a
    block would change nothing. None when the block is not that (a line not in the file, out of order, or nothing
    left out)."""
    lines = original.splitlines()
    wanted = [ln.strip() for ln in fragment.splitlines() if ln.strip()]
    if len(wanted) < 2:
        return None
    matched, k = [], 0
    for line in wanted:
        k = next((j for j in range(k, len(lines)) if lines[j].strip() == line), -1)
        if k < 0:
            return None
        matched.append(k)
        k += 1
    lo, hi = matched[0], matched[-1] + 1
    keep = set(matched)
    if all(j in keep or not lines[j].strip() for j in range(lo, hi)):
        return None  # nothing left out
    longest = max((len(m.group(0)) for m in re.finditer(r"\n+", "\n".join(lines))), default=1)
    new = "\n".join(lines[j] for j in range(lo, hi) if j in keep or not lines[j].strip())
    new = re.sub(rf"\n{{{longest + 1},}}", "\n" * longest, new)  # no wider gap than the file had
    old = "\n".join(lines[lo:hi])
    if original.count(old) != 1:  # not a unique anchor: the whole file, less those lines
        whole = "\n".join(lines[:lo] + new.split("\n") + lines[hi:]) + "\n"
        return "Write", {"file_path": path, "content": whole}
    return "Edit", {"file_path": path, "old_string": old, "new_string": new}


def definitions(code: str) -> list[Definition | ast.Import | ast.ImportFrom]:
    """The statements of python code that only defines functions and classes (imports and docstrings aside):
    run, it does nothing. [] for code that does something, or does not parse."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    if not any(isinstance(n, defs) for n in body) or not all(
        isinstance(n, (*defs, ast.Import, ast.ImportFrom)) for n in body
    ):
        return []
    return cast(list[Definition | ast.Import | ast.ImportFrom], body)  # as the line above checked


def home_of(code: str, cwd: Path, scan: int = 300) -> tuple[str, str] | None:
    """(file, its fragment) when a python block only defines functions and classes that one workspace file
    defines, all of them: run, such a block changes nothing; it is that file's change. The fragment keeps the
    definitions (and imports), not the comments around them."""
    body = definitions(code)
    if not body:
        return None
    names = {n.name for n in body if not isinstance(n, (ast.Import, ast.ImportFrom))}
    files = []
    for root, dirs, names_here in os.walk(cwd):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        files += [Path(root, n).relative_to(cwd) for n in sorted(names_here) if n.endswith(".py")]
        if len(files) > scan:
            return None  # too many files to look through for each block
    homes = []
    for rel in files:
        try:
            defined = set(TOP_DEF.findall((cwd / rel).read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
        if names <= defined:
            homes.append(rel.as_posix())
    if len(homes) != 1:
        return None
    lines = code.splitlines()
    spans = [(_first_line(n), n.end_lineno) for n in body]
    return homes[0], "\n\n".join("\n".join(lines[a - 1 : b]) for a, b in spans)


def _first_line(n: Definition | ast.Import | ast.ImportFrom) -> int:
    """Where a statement starts: at its first decorator, if it has any."""
    decorators = n.decorator_list if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else []
    return min([n.lineno] + [d.lineno for d in decorators])

"""What a tool call changed in the workspace, told to the model right after the call.

A small model cannot see the effect of ``sed -i '4s/min/max/' f.py`` unless it looks again, and it
rarely does: when the line number or the pattern is wrong nothing changes, and it says "fixed". So after
each call the harness compares the workspace with the snapshot before it and adds a short note to the
result: the lines that changed (with their numbers), the files created or deleted, or, when the command
looks like an edit, that no file changed.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from pathlib import Path

from drivetrain.home import drivetrain_home

SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".drivetrain", ".mypy_cache", ".pytest_cache"}
MAX_FILES = 2000
MAX_BYTES = 256 * 1024
SHOW_FILES = 3  # files described in full in one note
SHOW_LINES = 10  # changed lines shown per file

# A command that means to change files: in-place editors, redirections into a file, file writes in Python.
_EDITS = re.compile(
    r"\bsed\s+(-\w*\s+)*-\w*i|\bperl\s+-\w*i|(?<![\d&>])>{1,2}(?!&)\s*(?!/dev/)[\w.~/$\"'-]|\btee\b|"
    r"\b(mv|cp|rm|touch|truncate|patch)\s|\.write(_text|_bytes)?\(|open\([^)]*,\s*(mode=)?['\"][wax]"
)


def snapshot(cwd: Path, known: dict[str, tuple[tuple[int, int], bytes]] | None = None) -> dict[str, bytes]:
    """Relative path -> content, for the workspace's ordinary files (bounded in count and size).

    ``known`` (updated in place) remembers each file's size and mtime with its content, so a file that has
    not changed since the last snapshot is not read again: this runs after every tool call.
    """
    known = {} if known is None else known
    out: dict[str, bytes] = {}
    own = os.path.realpath(drivetrain_home())  # drivetrain's own files (session logs …) are not the work
    for root, dirs, files in os.walk(cwd):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and os.path.realpath(os.path.join(root, d)) != own)
        for name in sorted(files):
            path = Path(root, name)
            rel = str(path.relative_to(cwd))
            try:
                st = path.lstat()
                if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
                    continue
                key = (st.st_size, st.st_mtime_ns)
                if rel not in known or known[rel][0] != key:
                    known[rel] = (key, path.read_bytes())
                out[rel] = known[rel][1]
            except OSError:
                continue
            if len(out) >= MAX_FILES:
                return out
    return out


def looks_like_edit(command: str) -> bool:
    return bool(_EDITS.search(command))


def describe(before: dict[str, bytes], after: dict[str, bytes], command: str = "") -> str:
    """The note for one call: what changed between two snapshots ("" when nothing did and ``command``
    does not look like an edit)."""
    paths = [p for p in sorted(set(before) | set(after)) if before.get(p) != after.get(p)]
    if not paths:
        return "No file changed." if looks_like_edit(command) else ""
    notes = [_one(p, before.get(p), after.get(p)) for p in paths[:SHOW_FILES]]
    if len(paths) > SHOW_FILES:
        notes.append(f"… and {len(paths) - SHOW_FILES} more files changed: {', '.join(paths[SHOW_FILES:][:10])}")
    return "\n".join(notes)


def _lines(content: bytes) -> list[str] | None:
    try:
        return content.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None


def _one(path: str, old: bytes | None, new: bytes | None) -> str:
    if new is None:
        return f"Deleted {path}."
    new_lines = _lines(new)
    if old is None:
        if new_lines is None:
            return f"Created {path} ({len(new)} bytes, binary)."
        shown = "\n".join(f"{i:>4}| {ln}" for i, ln in enumerate(new_lines[:SHOW_LINES], 1))
        more = f"\n     … {len(new_lines) - SHOW_LINES} more lines" if len(new_lines) > SHOW_LINES else ""
        return f"Created {path} ({len(new_lines)} line{'s' * (len(new_lines) != 1)}):\n{shown}{more}".rstrip(":\n")
    old_lines = _lines(old)
    if old_lines is None or new_lines is None:
        return f"Changed {path} (binary)."
    rows: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        rows += [f"-{i:>4}| {old_lines[i - 1]}" for i in range(i1 + 1, i2 + 1)]
        rows += [f"+{j:>4}| {new_lines[j - 1]}" for j in range(j1 + 1, j2 + 1)]
    if not rows:  # the same lines, other bytes (line endings, a final newline)
        return f"Changed {path} (whitespace at line ends only)."
    more = f"\n  … {len(rows) - SHOW_LINES} more changed lines" if len(rows) > SHOW_LINES else ""
    return f"Changed {path} (- old line, + new line):\n" + "\n".join(rows[:SHOW_LINES]) + more

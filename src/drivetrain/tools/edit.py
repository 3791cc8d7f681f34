"""Edit: exact string replacement in a file, with errors that say how to fix the call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import ClassVar

from drivetrain.jsontypes import JsonObject

from .base import ToolContext, ToolResult
from .read import missing_file_message, number_lines
from .write import atomic_write

SNIPPET_CONTEXT = 3
SNIPPET_MAX_LINES = 30


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _occurrence_lines(text: str, needle: str) -> list[int]:
    """Start line of each non-overlapping occurrence (the ones str.replace would touch)."""
    lines, pos = [], text.find(needle)
    while pos != -1:
        lines.append(_line_of(text, pos))
        pos = text.find(needle, pos + len(needle))
    return lines


def _squash(line: str) -> str:
    return " ".join(line.split())


def _whitespace_hint(text: str, old: str) -> str:
    """If old matches some lines once whitespace is ignored, say where: the usual slip is indentation."""
    want = [_squash(line) for line in old.strip("\n").splitlines()]
    if not any(want):
        return ""
    have = [_squash(line) for line in text.splitlines()]
    for i in range(len(have) - len(want) + 1):
        first, last = have[i], have[i + len(want) - 1]
        # The first and last lines of old_string may be partial lines, so they only need to fit.
        if len(want) == 1:
            fits = want[0] in first
        else:
            fits = (
                first.endswith(want[0]) and last.startswith(want[-1]) and have[i + 1 : i + len(want) - 1] == want[1:-1]
            )
        if fits:
            actual = text.splitlines()[i : i + len(want)]
            where = f"line {i + 1}" if len(want) == 1 else f"lines {i + 1}-{i + len(want)}"
            return (
                f" It does match {where} if whitespace is ignored, so the "
                "indentation or spacing differs. The file has exactly:\n"
                + number_lines(actual, i + 1)
                + "\nCopy the text exactly (without the line-number prefix) and retry."
            )
    return ""


def _snippet(text: str, start_line: int, end_line: int) -> str:
    lines = text.splitlines()
    lo = max(1, start_line - SNIPPET_CONTEXT)
    hi = min(len(lines), end_line + SNIPPET_CONTEXT, lo + SNIPPET_MAX_LINES - 1)
    return number_lines(lines[lo - 1 : hi], lo)


class Edit:
    """Claude Code's ``Edit``: replace an exact string of a file (once, or every copy with ``replace_all``)."""

    name = "Edit"
    description = (
        "Replace exact text in a file: old_string must appear in the file exactly as given, "
        "including indentation and line breaks, and by default exactly once. Read the file first "
        "and copy old_string from it without the line-number prefix. If old_string appears more "
        "than once, include a few surrounding lines to make it unique, or set replace_all=true to "
        "change every occurrence (handy for renames). To create a new file, use Write "
        "(or Edit with an empty old_string on a file that does not exist)."
    )
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {
            "file_path": {"type": "string", "description": "Path of the file to edit."},
            "old_string": {"type": "string", "description": "The exact text to replace."},
            "new_string": {"type": "string", "description": "The text to put in its place."},
            "replace_all": {
                "type": "boolean",
                "default": False,
                "description": "Replace every occurrence instead of exactly one.",
            },
        },
        "required": ["file_path", "old_string", "new_string"],
    }

    async def call(self, input: JsonObject, ctx: ToolContext) -> ToolResult:
        file_path = input.get("file_path")
        old, new = input.get("old_string"), input.get("new_string")
        replace_all = input.get("replace_all", False)
        if not isinstance(file_path, str) or not file_path.strip():
            return ToolResult("file_path is required: the path of the file to edit.", is_error=True)
        if not isinstance(old, str) or not isinstance(new, str):
            return ToolResult("old_string and new_string are required strings.", is_error=True)
        if not isinstance(replace_all, bool):
            return ToolResult("replace_all must be true or false.", is_error=True)
        if old == new:
            return ToolResult(
                "old_string and new_string are identical, so there is nothing to "
                "change. Pass the new text in new_string.",
                is_error=True,
            )
        return await asyncio.to_thread(self._edit, ctx.resolve(file_path), old, new, replace_all, ctx.roots)

    def _edit(self, path: Path, old: str, new: str, replace_all: bool, roots: list[Path]) -> ToolResult:
        if path.is_dir():
            return ToolResult(f"{path} is a directory, not a file.", is_error=True)
        if not path.exists():
            if old == "":
                return self._save(roots, path, new, f"Created {path}", 1, new.count("\n") + 1)
            return ToolResult(missing_file_message(path) + " To create it, use Write.", is_error=True)
        try:
            # newline="" keeps \r\n as is, so the file's line endings survive the edit.
            with open(path, encoding="utf-8", newline="") as f:
                text = f.read()
        except UnicodeDecodeError:
            return ToolResult(f"{path} is not UTF-8 text; Edit only changes text files.", is_error=True)
        except OSError as e:
            return ToolResult(f"Cannot read {path}: {e.strerror or e}", is_error=True)
        if old == "":
            if text:
                return ToolResult(
                    "old_string is empty, but the file is not. Give the exact text to "
                    "replace, or use Write to overwrite the whole file.",
                    is_error=True,
                )
            return self._save(roots, path, new, f"Wrote {path}", 1, new.count("\n") + 1)
        if old not in text and "\r\n" in text and "\r\n" not in old:
            # The model writes \n; a CRLF file should still match, and keep CRLF.
            old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        count = text.count(old)
        if count == 0:
            hint = _whitespace_hint(text, old) or (
                " Read the file again and copy the exact text, including indentation."
            )
            return ToolResult(f"old_string was not found in {path}.{hint}", is_error=True)
        if count > 1 and not replace_all:
            lines = _occurrence_lines(text, old)
            shown = ", ".join(map(str, lines[:20])) + (", ..." if len(lines) > 20 else "")
            return ToolResult(
                f"old_string is not unique: found {count} occurrences in {path}, "
                f"at lines {shown}. Include more surrounding lines in old_string to "
                "pick one, or set replace_all=true to change all of them.",
                is_error=True,
            )
        pos = text.find(old)
        result = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        start = _line_of(result, pos)
        n = count if replace_all else 1
        what = f"Replaced {n} occurrence{'s' if n != 1 else ''} in {path}"
        return self._save(roots, path, result, what, start, start + new.count("\n"))

    def _save(self, roots: list[Path], path: Path, text: str, what: str, start: int, end: int) -> ToolResult:
        try:
            atomic_write(path, text.encode("utf-8"), roots)
        except OSError as e:
            return ToolResult(f"Cannot write {path}: {e.strerror or e}", is_error=True)
        snippet = _snippet(text, start, end)
        return ToolResult(
            f"{what}. Lines around the (first) change now read:\n{snippet}"
            if snippet
            else f"{what}. The file is now empty."
        )

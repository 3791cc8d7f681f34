"""Read: a text file as numbered lines, like ``cat -n``, a window at a time."""

from __future__ import annotations

import asyncio
import codecs
import difflib
import os
from pathlib import Path
from typing import ClassVar

from drivetrain.jsontypes import JsonObject

from .base import ToolContext, ToolResult

DEFAULT_LIMIT = 2000
MAX_LINE_CHARS = 2000
SNIFF_BYTES = 8192


def number_lines(lines: list[str], first: int) -> str:
    """``cat -n`` format: right-aligned number, a tab, the line."""
    return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(lines, start=first))


def looks_binary(head: bytes) -> bool:
    """NUL bytes or bytes that are not UTF-8 mean we should not show the file as text."""
    if b"\0" in head:
        return True
    try:
        # Incremental decode with final=False: a multibyte char cut at the sniff edge is fine.
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return True
    return False


def int_field(input: JsonObject, key: str, *, minimum: int) -> int | str | None:
    """The optional integer ``input[key]``, or an error message string."""
    value = input.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        return f"{key} must be an integer >= {minimum}, got {value!r}"
    return value


def missing_file_message(path: Path) -> str:
    parent = path.parent
    if not parent.is_dir():
        return f"File does not exist: {path} (its directory {parent} does not exist either)."
    try:
        names = os.listdir(parent)
    except OSError:
        names = []
    close = difflib.get_close_matches(path.name, names, n=3, cutoff=0.6)
    close += [n for n in names if n.lower() == path.name.lower() and n not in close]
    msg = f"File does not exist: {path}."
    if close:
        msg += " Did you mean: " + ", ".join(str(parent / n) for n in close) + "?"
    else:
        msg += " Use Glob to find files by name."
    return msg


def directory_message(path: Path) -> str:
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError as e:
        return f"{path} is a directory, not a file (cannot list it: {e.strerror})."
    shown = [e.name + ("/" if e.is_dir() else "") for e in entries[:20]]
    more = f", ... ({len(entries) - 20} more)" if len(entries) > 20 else ""
    listing = ", ".join(shown) + more if shown else "(empty)"
    return (
        f"{path} is a directory, not a file. It contains {len(entries)} entries: {listing}. "
        "Read one of the files, or use Glob to search it."
    )


class Read:
    """Claude Code's ``Read``: a text file as ``cat -n`` numbers it, a window of it with ``offset`` and ``limit``."""

    name = "Read"
    description = (
        "Read a text file. Output is numbered lines like `cat -n`: the line number, a tab, then the "
        "line. The numbers are not part of the file: leave them out when you copy text into Edit. "
        f"Reads up to {DEFAULT_LIMIT} lines from the start; for longer files pass offset (1-based "
        "line to start at) and limit (number of lines). Lines longer than "
        f"{MAX_LINE_CHARS} characters are cut. file_path may be absolute or relative to the "
        "working directory. To list a directory use Glob or Bash `ls`."
    )
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {
            "file_path": {"type": "string", "description": "Path of the file to read."},
            "offset": {"type": "integer", "minimum": 1, "description": "1-based line number to start reading from."},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": f"How many lines to read (default {DEFAULT_LIMIT}).",
            },
        },
        "required": ["file_path"],
    }

    async def call(self, input: JsonObject, ctx: ToolContext) -> ToolResult:
        file_path = input.get("file_path")
        if not isinstance(file_path, str) or not file_path.strip():
            return ToolResult("file_path is required: the path of the file to read.", is_error=True)
        offset = int_field(input, "offset", minimum=1)
        limit = int_field(input, "limit", minimum=1)
        if isinstance(offset, str):
            return ToolResult(offset, is_error=True)
        if isinstance(limit, str):
            return ToolResult(limit, is_error=True)
        return await asyncio.to_thread(self._read, ctx.resolve(file_path), offset or 1, limit or DEFAULT_LIMIT)

    def _read(self, path: Path, offset: int, limit: int) -> ToolResult:
        if path.is_dir():
            return ToolResult(directory_message(path), is_error=True)
        if not path.exists():
            return ToolResult(missing_file_message(path), is_error=True)
        if not path.is_file():  # a FIFO or device would block or never end
            return ToolResult(f"{path} is not a regular file.", is_error=True)
        try:
            size = path.stat().st_size
            with open(path, "rb") as f:
                head = f.read(SNIFF_BYTES)
        except OSError as e:
            return ToolResult(f"Cannot read {path}: {e.strerror or e}", is_error=True)
        if size == 0 and not head:
            return ToolResult(f"{path} exists but is empty (0 bytes).")
        if looks_binary(head):
            return ToolResult(f"{path} is a binary file ({size} bytes); Read only shows text files.", is_error=True)
        shown: list[str] = []
        total = 0
        # errors="replace": one odd byte deep in a text file should not hide the whole file.
        with open(path, encoding="utf-8", errors="replace") as f:
            for total, line in enumerate(f, start=1):
                if offset <= total < offset + limit:
                    line = line.rstrip("\r\n")
                    if len(line) > MAX_LINE_CHARS:
                        line = line[:MAX_LINE_CHARS] + f" [... line cut, {len(line)} chars]"
                    shown.append(line)
        if offset > total:
            return ToolResult(f"offset {offset} is past the end of {path}, which has {total} lines.", is_error=True)
        text = number_lines(shown, offset)
        last = offset + len(shown) - 1
        if offset > 1 or last < total:
            text += f"\n\n(Showing lines {offset}-{last} of {total}." + (
                f" Use offset={last + 1} to read more.)" if last < total else ")"
            )
        return ToolResult(text)

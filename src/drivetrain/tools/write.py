"""Write: create or overwrite a file, atomically."""

from __future__ import annotations

import asyncio
import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from drivetrain.host.paths import confined_write, confining_root, default_file_mode, real_roots
from drivetrain.jsontypes import JsonObject

from .base import ToolContext, ToolResult


def atomic_write(path: Path, data: bytes, roots: Sequence[Path] = ()) -> bool:
    """Write ``data`` to ``path`` via a temp file in the same folder and os.replace.

    Readers never see a half-written file, and a failure leaves the old file intact.
    Creates parent folders, keeps an existing file's mode and writes through a symlink
    to its target. Returns True if the file already existed. A path inside ``roots`` (the
    workspace) is written through folder descriptors opened without following symlinks, so
    a folder swapped for a symlink after the permission check cannot carry the write outside.
    """
    if roots and _in_workspace(path, roots):
        return confined_write(roots, path, data)
    path = Path(os.path.realpath(path))  # replacing a symlink itself would turn it into a file
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        existed = True
    except FileNotFoundError:
        mode, existed = default_file_mode(), False
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # mkstemp makes 0o600
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return existed


def _in_workspace(path: Path, roots: Sequence[Path]) -> bool:
    """Meant for the workspace: as written (a symlink swapped in later must not carry it out) or as resolved."""
    candidates = [*roots, *real_roots(roots)]
    return any(
        confining_root(p, candidates) is not None for p in (Path(os.path.normpath(path)), Path(os.path.realpath(path)))
    )


def count_lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


class Write:
    """Claude Code's ``Write``: a whole file, written atomically and confined to the workspace roots."""

    name = "Write"
    description = (
        "Create a file or overwrite it completely with `content`. Parent folders are created. "
        "file_path may be absolute or relative to the working directory. To change part of an "
        "existing file, prefer Edit: Write replaces everything, so you must pass the whole file."
    )
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {
            "file_path": {"type": "string", "description": "Path of the file to write."},
            "content": {"type": "string", "description": "The complete new content of the file."},
        },
        "required": ["file_path", "content"],
    }

    async def call(self, input: JsonObject, ctx: ToolContext) -> ToolResult:
        file_path, content = input.get("file_path"), input.get("content")
        if not isinstance(file_path, str) or not file_path.strip():
            return ToolResult("file_path is required: the path of the file to write.", is_error=True)
        if not isinstance(content, str):
            return ToolResult(
                'content is required and must be a string (the whole file; use "" for an empty file).', is_error=True
            )
        path = ctx.resolve(file_path)
        if path.is_dir():
            return ToolResult(f"{path} is a directory; give a file path to write.", is_error=True)
        data = content.encode("utf-8")
        try:
            existed = await asyncio.to_thread(atomic_write, path, data, ctx.roots)
        except OSError as e:
            return ToolResult(f"Cannot write {path}: {e.strerror or e}", is_error=True)
        verb = "Overwrote" if existed else "Created"
        return ToolResult(f"{verb} {path}: {len(data)} bytes, {count_lines(content)} lines.")

"""The attempts' copies of a workspace: made with reflinks where the file system has them, compared by size and
mtime then content hash, and the winner's changes applied to the real workspace (``small/attempts.py``)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SKIP = frozenset({".git"})  # never compared nor applied: a repository's own state is not a change to the work


FileState = tuple[int, int]  # (size, mtime_ns): unchanged when both are
Tree = dict[str, FileState]


def scan(root: Path) -> Tree:
    """Every file and symlink under ``root`` (relative POSIX paths), with its size and mtime; ``.git`` left out."""
    out: Tree = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP]
        for name in files:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            out[os.path.relpath(path, root).replace(os.sep, "/")] = (st.st_size, st.st_mtime_ns)
    return out


def digest(path: Path) -> str | None:
    """The file's content hash (a symlink's target text), None when it is not there."""
    try:
        if path.is_symlink():
            return "link:" + os.readlink(path)
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (FileNotFoundError, NotADirectoryError):
        return None


def copy_tree(src: Path, dst: Path) -> None:
    """``dst`` becomes a copy of ``src`` (mtimes kept, so an unchanged file is seen as such): reflinks where the file
    system has them (``cp --reflink=auto``), else a plain copy. Never hard links: a tool writing a file in place
    would write through them into the user's workspace."""
    dst.mkdir(parents=True, exist_ok=True)
    if shutil.which("cp"):
        done = subprocess.run(
            ["cp", "-a", "--reflink=auto", f"{src}/.", str(dst)], capture_output=True, text=True, check=False
        )
        if done.returncode == 0:
            return
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)


def changes(base: Path, before: Tree, copy: Path) -> dict[str, str | None]:
    """What an attempt changed in its copy: relative path -> new content hash, or None for a file it removed."""
    after = scan(copy)
    out: dict[str, str | None] = {}
    for rel, state in after.items():
        if before.get(rel) != state:
            new = digest(copy / rel)
            if rel not in before or new != digest(base / rel):
                out[rel] = new
    for rel in before.keys() - after.keys():
        out[rel] = None
    return out


@dataclass(frozen=True)
class Applied:
    written: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    kept_both: tuple[tuple[str, str], ...] = ()  # (the user's file, where the winner's version went)

    def note(self) -> str:
        if not self.kept_both:
            return ""
        pairs = ", ".join(f"{user} (the attempt's version is in {beside})" for user, beside in self.kept_both)
        return f"files changed in the workspace while the attempts ran were kept: {pairs}"


def apply_changes(copy: Path, cwd: Path, before: Tree, changed: dict[str, str | None], base: Path) -> Applied:
    """The winner's changes, made in the real workspace. A file the user changed since the attempts began (its
    size or mtime differ from the scan taken then) is left as it is; the winner's version goes beside it."""
    written: list[str] = []
    removed: list[str] = []
    kept: list[tuple[str, str]] = []
    now = scan(cwd)
    for rel, new in sorted(changed.items()):
        target = cwd / rel
        if now.get(rel) != before.get(rel) and digest(target) != digest(base / rel):
            if new is not None:
                beside = f"{rel}.attempt"
                _put(copy / rel, cwd / beside)
                kept.append((rel, beside))
            continue
        if new is None:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
            removed.append(rel)
        else:
            _put(copy / rel, target)
            written.append(rel)
    return Applied(tuple(written), tuple(removed), tuple(kept))


def _put(src: Path, dst: Path) -> None:
    """``dst`` becomes ``src`` (content and mode), atomically."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        with contextlib.suppress(FileNotFoundError):
            dst.unlink()
        os.symlink(os.readlink(src), dst)
        return
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.")
    os.close(fd)
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise

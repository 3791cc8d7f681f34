"""Where a path really is, whether it is inside the workspace, and a write that cannot be redirected.

``resolve`` gives two views of a path: the *lexical* one (``~`` expanded, made absolute,
``..`` folded) that a person reads, and the *real* one (every symlink on the existing part,
parents included, followed by ``os.path.realpath``) that the kernel will use. Deny rules
match either view; allow rules and confinement use the real one.

``confined_write`` closes the gap between the check and the write: it walks from a
workspace root to the file's folder one component at a time with ``O_NOFOLLOW``, so a
parent swapped for a symlink after the check makes the write fail instead of escaping.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# What a command may write or read outside the workspace without it counting as a file access.
HARMLESS_WRITES = {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/1", "/dev/fd/2"}
HARMLESS_READS = {"/dev/null", "/dev/stdin", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/tty", "/dev/fd/0"}


class ConfinementError(PermissionError):
    """A write would have left the workspace (a symlink in the way, or a path outside every root)."""


@dataclass(frozen=True)
class Resolved:
    lexical: Path
    real: Path

    def views(self) -> tuple[Path, ...]:
        return (self.lexical,) if self.lexical == self.real else (self.lexical, self.real)


def expand(
    path: str | os.PathLike[str], cwd: str | os.PathLike[str], home: str | os.PathLike[str] | None = None
) -> Path:
    """Absolute, ``~`` expanded, ``.``/``..`` folded without touching the file system."""
    text = os.fspath(path)
    if text == "~" or text.startswith("~/"):
        text = os.path.join(os.fspath(home) if home is not None else os.path.expanduser("~"), text[2:])
    return Path(os.path.normpath(os.path.join(os.fspath(cwd), text)))


def resolve(
    path: str | os.PathLike[str], cwd: str | os.PathLike[str], home: str | os.PathLike[str] | None = None
) -> Resolved:
    text = os.fspath(path)
    if text == "~" or text.startswith("~/"):
        text = os.path.join(os.fspath(home) if home is not None else os.path.expanduser("~"), text[2:])
    joined = os.path.join(os.fspath(cwd), text)
    # realpath on the joined (not folded) path: `link/..` means the link target's parent.
    return Resolved(Path(os.path.normpath(joined)), Path(os.path.realpath(joined)))


def is_within(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    p, r = os.fspath(path), os.fspath(root).rstrip("/") or "/"
    return p == r or p.startswith(r if r == "/" else r + "/")


def real_roots(roots: Iterable[str | os.PathLike[str]]) -> list[Path]:
    return [Path(os.path.realpath(os.fspath(r))) for r in roots]


def confining_root(real: Path, roots: Sequence[Path]) -> Path | None:
    """The (real) root that contains ``real``, or None: the path is outside the workspace."""
    return next((r for r in roots if is_within(real, r)), None)


def default_file_mode() -> int:
    """0o666 less the umask, read without os.umask() (which would race with other threads)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except OSError:
        pass
    return 0o644


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _open_child_dir(name: str, parent_fd: int, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=parent_fd)
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)


def confined_write(
    root_dirs: Sequence[str | os.PathLike[str]], path: str | os.PathLike[str], data: bytes, *, make_parents: bool = True
) -> bool:
    """Write ``data`` to ``path`` atomically, never outside ``root_dirs``. Returns True if it existed.

    ``path`` (relative paths are taken from the first root) is resolved with realpath and must
    lie inside a root. The folders from that root down are then opened one by one with
    O_NOFOLLOW relative to the previous one, and the file is written as a temp file in the
    last folder and renamed over the name, all through that folder's descriptor. A folder
    swapped for a symlink at any moment raises ``ConfinementError`` (an OSError); nothing is
    written outside. An existing file keeps its mode; a symlink at the final name (which can
    only appear by a swap) is replaced, not followed.
    """
    roots = real_roots(root_dirs)
    if not roots:
        raise ConfinementError("no workspace root to write under")
    raw = Path(os.fspath(path))
    target = Path(os.path.realpath(raw if raw.is_absolute() else roots[0] / raw))
    root = confining_root(target, roots)
    if root is None or target == root:
        raise ConfinementError(f"{path} resolves to {target}, outside the workspace ({', '.join(map(str, roots))})")
    parts = target.relative_to(root).parts
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            try:
                child = _open_child_dir(name, fd, make_parents)
            except OSError as e:
                if isinstance(e, FileNotFoundError):
                    raise
                raise ConfinementError(
                    f"cannot write {target}: {name!r} is not a plain folder (a symlink appeared in the path?)"
                ) from e
            os.close(fd)
            fd = child
        return _write_in(fd, parts[-1], data, target)
    finally:
        os.close(fd)


def _write_in(dir_fd: int, name: str, data: bytes, shown: Path) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(f"{shown} is a directory")
        mode, existed = (stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else default_file_mode()), True
    except FileNotFoundError:
        mode, existed = default_file_mode(), False
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    tfd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(tfd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), mode)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return existed

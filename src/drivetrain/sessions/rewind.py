"""Rewind: put a workspace back as it was before a given user prompt of a session.

Before each user prompt the loop calls ``Checkpoints(cwd).snapshot(session_id, prompt, also=touched)``.
That records, as one commit in a *shadow* git repository, every file of the workspace that git would
consider (tracked, or untracked and not ignored), plus ``also``: the files Write/Edit touched in this session,
even when they are ignored. ``restore(session_id, prompt)`` later puts those files back, so changes made
through Bash are undone as well as Write/Edit ones.

The shadow repository lives at ``<drivetrain home>/rewind/<sha256(realpath(workspace))[:16]>.git``, never
in the workspace. The workspace's own ``.git`` is never written: it is excluded from snapshots, and only read
(``git ls-files``, ``rev-parse``) to learn which files the user tracks and their ``info/exclude``. git runs
with a clean environment: no user or system config, no hooks, no signing, no line-ending conversion.

Out of scope, by design:
- files outside the workspace (an Edit of ``~/.bashrc`` is not checkpointed, nor undone);
- ignored files nobody told us about (build output, ``node_modules``): never snapshotted, never touched;
- regular files over ``max_file_bytes`` (10 MB) found by the scan: skipped with a warning, and left alone by a
  restore (the ``also`` files are kept whatever their size);
- nested git repositories inside the workspace: neither snapshotted nor removed;
- ``.gitignore`` files above the workspace, when it is a subfolder of a larger repository.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, NamedTuple

from drivetrain.errors import HarnessError
from drivetrain.home import drivetrain_home
from drivetrain.jsontypes import JsonObject

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 10 * 1024 * 1024
REF_ROOT = "refs/drivetrain"
_SESSION_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")
_GIT_OPTIONS = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.safecrlf=false",
    "-c",
    "core.symlinks=true",
    "-c",
    "core.filemode=true",
    "-c",
    "core.bare=false",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "gc.auto=0",
    "-c",
    "core.fsmonitor=false",
)


Tree = dict[str, tuple[str, str]]  # a checkpoint's files: path → (mode, blob)
# What a workspace path is to a snapshot: a regular file or symlink to take, one too big, nothing, or anything else
FileKind = Literal["file", "big", "absent", "other"]


class RewindError(HarnessError):
    """A checkpoint could not be taken or restored; the message says what to do."""


class Checkpoint(NamedTuple):
    prompt: int
    commit: str
    time: datetime


class CheckpointMeta(NamedTuple):
    """What a checkpoint's commit message records beyond its tree."""

    absent: set[str]  # files known not to exist when it was taken
    skipped: list[str]  # files left out as too large


@dataclass(frozen=True)
class RestoreReport:
    """What a restore did. ``undo`` names the checkpoint that takes the workspace back to before the restore."""

    session_id: str
    to: str
    commit: str
    undo: str
    restored: tuple[str, ...]
    removed: tuple[str, ...]
    unchanged: int
    skipped: tuple[str, ...] = ()  # too large when snapshotted: left as they are

    def to_json(self) -> JsonObject:
        return {
            **asdict(self),
            "restored": list(self.restored),
            "removed": list(self.removed),
            "skipped": list(self.skipped),
            "num_restored": len(self.restored),
            "num_removed": len(self.removed),
        }


class Checkpoints:
    """The checkpoints of one workspace, for every session that worked in it."""

    def __init__(self, workspace: Path, home: Path | None = None, max_file_bytes: int = MAX_FILE_BYTES):
        self.workspace = Path(os.path.realpath(workspace))
        key = hashlib.sha256(str(self.workspace).encode()).hexdigest()[:16]
        self.repo = Path(os.path.abspath(home or drivetrain_home())) / "rewind" / f"{key}.git"
        self.max_file_bytes = max_file_bytes

    # -- taking a snapshot ---------------------------------------------------------------------------------------

    def snapshot(self, session_id: str, prompt: int, also: Iterable[Path] = ()) -> str:
        """Record the workspace as it is before user prompt ``prompt``; return the commit id."""
        if not _is_prompt_number(prompt):
            raise RewindError(f"a prompt number is a whole number from 1, not {prompt!r}")
        return self._snapshot(session_id, str(prompt), also)

    def ref(self, session_id: str, prompt: int | str) -> str:
        """The ref a checkpoint is kept under (what a session log's ``checkpoint`` record names)."""
        _check_session_id(session_id)
        return f"{REF_ROOT}/{session_id}/{prompt}"

    def _snapshot(self, session_id: str, name: str, also: Iterable[Path]) -> str:
        _check_session_id(session_id)
        self._ready()
        index = self.repo / f"index-{hashlib.sha256(session_id.encode()).hexdigest()[:16]}"  # the session's own
        tracked, user_exclude = self._user_repo()
        env = self._env(index, user_exclude)
        forced, absent = self._also(also)
        wanted, skipped = self._scan(env, tracked, forced)
        self._stage(env, wanted)
        tree = self._git(["write-tree"], env).strip()
        message = json.dumps(
            {
                "drivetrain": "rewind",
                "v": 1,
                "session_id": session_id,
                "checkpoint": name,
                "workspace": str(self.workspace),
                "absent": sorted(absent),
                "skipped": skipped,
            }
        )
        commit = self._git(["commit-tree", tree, "-m", message], env).strip()
        self._git(["update-ref", self.ref(session_id, name), commit], env)
        return commit

    def _scan(self, env: dict[str, str], tracked: set[str], forced: set[str]) -> tuple[set[str], list[str]]:
        """The files to snapshot, and the ones skipped as too large: tracked, untracked-not-ignored, forced."""
        found = set(self._git(["ls-files", "-z", "--others", "--exclude-standard"], env).split("\0"))
        cached = set(self._git(["ls-files", "-z", "--cached"], env).split("\0"))
        ignored = set(self._git(["ls-files", "-z", "--cached", "--ignored", "--exclude-standard"], env).split("\0"))
        wanted, skipped = set(forced), []
        for rel in (found | (cached - ignored) | tracked) - forced:
            kind = self._kind(rel)
            if kind == "big":
                skipped.append(rel)
            elif kind == "file":
                wanted.add(rel)
        if skipped:
            log.warning("rewind: not checkpointed, over %d bytes: %s", self.max_file_bytes, ", ".join(sorted(skipped)))
        return wanted, sorted(skipped)

    def _stage(self, env: dict[str, str], wanted: set[str]) -> None:
        """Make the session's index hold exactly ``wanted`` (unchanged files are not hashed again)."""
        cached = set(self._git(["ls-files", "-z", "--cached"], env).split("\0"))
        stale = sorted(cached - wanted - {""})
        if stale:
            self._git(
                ["rm", "-q", "--cached", "--ignore-unmatch", "--pathspec-from-file=-", "--pathspec-file-nul"],
                env,
                stdin="\0".join(stale),
            )
        if wanted:
            self._git(
                ["add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul"], env, stdin="\0".join(sorted(wanted))
            )

    def keep(self, session_id: str, prompt: int, paths: Iterable[Path]) -> str:
        """Add to checkpoint ``prompt`` the present state of ``paths`` it does not hold yet (content, or absence).

        For Write/Edit to call before first changing a file during that prompt: the checkpoint then knows an
        ignored file's state before the prompt, so a rewind can restore it, or remove it if it was created then.
        """
        _check_session_id(session_id)
        self._ready()
        ref = self.ref(session_id, prompt)
        old = self._refs(session_id).get(str(prompt))
        if old is None:
            raise RewindError(f"session {session_id} has no checkpoint for prompt {prompt} yet: snapshot it first")
        tree, meta = self._tree(old), self._meta(old)
        present, absent = self._also(paths)
        present, absent = present - set(tree) - meta.absent, absent - set(tree) - meta.absent
        if not present and not absent:
            return old
        index = self.repo / f"index-keep-{uuid.uuid4().hex}"
        try:
            env = self._env(index, None)
            self._git(["read-tree", old], env)
            if present:
                self._git(
                    ["add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul"],
                    env,
                    stdin="\0".join(sorted(present)),
                )
            new_tree = self._git(["write-tree"], env).strip()
        finally:
            index.unlink(missing_ok=True)
        message = json.loads(self._git(["log", "-1", "--format=%B", old], env))
        message["absent"] = sorted(meta.absent | absent)
        commit = self._git(["commit-tree", new_tree, "-m", json.dumps(message)], env).strip()
        self._git(["update-ref", ref, commit, old], env)  # fails, rather than lose an update, if it moved meanwhile
        return commit

    def _also(self, also: Iterable[Path]) -> tuple[set[str], set[str]]:
        """The ``also`` paths inside the workspace, relative: (present files, absent ones)."""
        present, absent = set(), set()
        for p in also:
            p = Path(p) if Path(p).is_absolute() else self.workspace / p
            parent = Path(os.path.realpath(p.parent))  # the file itself may be a symlink: keep it one
            if parent != self.workspace and self.workspace not in parent.parents:
                continue  # outside the workspace: out of scope
            rel = (parent / p.name).relative_to(self.workspace).as_posix()
            if rel in ("", ".") or ".git" in rel.split("/"):
                continue
            kind = self._kind(rel, limit=False)
            if kind == "file":
                present.add(rel)
            elif kind == "absent":
                absent.add(rel)
        return present, absent

    def _kind(self, rel: str, limit: bool = True) -> FileKind:
        """ "file" (a regular file or symlink to snapshot), "big", "absent" or "other" (a directory, a fifo…)."""
        if not rel or rel.endswith("/"):  # "dir/" is a nested repository
            return "other"
        try:
            st = (self.workspace / rel).lstat()
        except (FileNotFoundError, NotADirectoryError):
            return "absent"
        if stat.S_ISLNK(st.st_mode):
            return "file"
        if not stat.S_ISREG(st.st_mode):
            return "other"
        return "big" if limit and st.st_size > self.max_file_bytes else "file"

    # -- restoring -----------------------------------------------------------------------------------------------

    def restore(self, session_id: str, prompt: int | str) -> RestoreReport:
        """Put the workspace back as it was before ``prompt`` (or as a named checkpoint, e.g. ``before-rewind-1``).

        Files changed or deleted since are restored; files created since are removed, with the folders they leave
        empty. An ignored file that the checkpoint does not hold is judged by the first later checkpoint of the
        session that does know it (it was a Write/Edit target): recorded as absent there, it is removed; recorded
        with content, that content is put back (it is the nearest state known); known nowhere, it is left alone.
        The state before the restore is saved first as ``before-rewind-<n>``: restore that to undo this one.
        """
        _check_session_id(session_id)
        self._ready()
        name = str(prompt)
        refs = self._refs(session_id)
        if name not in refs:
            have = ", ".join(sorted(refs, key=_order)) or "none"
            raise RewindError(
                f"session {session_id} has no checkpoint {name!r} for {self.workspace} "
                f"(it has: {have}); `drivetrain rewind` takes a prompt number the session reached"
            )
        target = refs[name]
        undo = f"before-rewind-{1 + sum(n.startswith('before-rewind-') for n in refs)}"
        trees = {n: self._tree(c) for n, c in refs.items()}
        now = self._tree(self._snapshot(session_id, undo, (self.workspace / p for t in trees.values() for p in t)))
        then, meta = trees[name], self._meta(target)
        put, remove = self._plan(refs, trees, name, now)
        for path in remove:
            (self.workspace / path).unlink(missing_ok=True)
            self._prune(path)
        self._checkout(put)
        return RestoreReport(
            session_id,
            name,
            target,
            undo,
            tuple(sorted(put)),
            tuple(remove),
            sum(1 for p, e in then.items() if now.get(p) == e),
            tuple(meta.skipped),
        )

    def _plan(self, refs: dict[str, str], trees: dict[str, Tree], name: str, now: Tree) -> tuple[Tree, list[str]]:
        """What to write back (path → (mode, blob)) and what to remove, to go from ``now`` to checkpoint ``name``."""
        then, meta = trees[name], self._meta(refs[name])
        later = [n for n in sorted(refs, key=_order) if name.isdigit() and n.isdigit() and int(n) > int(name)]
        put = {p: e for p, e in then.items() if now.get(p) != e}
        extra = sorted(set(now) - set(then) - set(meta.skipped))
        ignored = self._ignored(extra)
        remove = []
        for path in extra:
            if path not in ignored or path in meta.absent:
                remove.append(path)
                continue
            for n in later:  # an ignored Write/Edit target: the nearest later checkpoint that knows it
                if path in trees[n]:
                    if trees[n][path] != now[path]:
                        put[path] = trees[n][path]
                    break
                if path in self._meta(refs[n]).absent:
                    remove.append(path)
                    break
        return put, remove

    def _ignored(self, paths: list[str]) -> set[str]:
        if not paths:
            return set()
        env = {**self._env(None, self._user_repo()[1]), "GIT_LITERAL_PATHSPECS": "0"}  # check-ignore refuses it
        out = self._git(["check-ignore", "-z", "--no-index", "--stdin"], env, stdin="\0".join(paths), ok=(0, 1))
        return set(out.split("\0"))

    def _checkout(self, entries: dict[str, tuple[str, str]]) -> None:
        """Write these (mode, blob) entries into the workspace, through a throwaway index."""
        if not entries:
            return
        index = self.repo / f"index-restore-{uuid.uuid4().hex}"
        try:
            env = self._env(index, None)
            for path in entries:  # a file now standing where a folder must go, or the other way round
                self._clear_way(path)
            self._git(
                ["update-index", "-z", "--index-info"],
                env,
                stdin="".join(f"{mode} {blob}\t{path}\0" for path, (mode, blob) in entries.items()),
            )
            self._git(["checkout-index", "-f", "-z", "--stdin"], env, stdin="\0".join(entries))
        finally:
            index.unlink(missing_ok=True)

    def _clear_way(self, rel: str) -> None:
        target = self.workspace / rel
        for parent in reversed(Path(rel).parents[:-1]):
            p = self.workspace / parent
            if p.is_symlink() or p.is_file():
                p.unlink()
        if target.is_dir() and not target.is_symlink() and not any(target.iterdir()):
            target.rmdir()

    def _prune(self, rel: str) -> None:
        """Remove the folders a removed file leaves empty, up to (not including) the workspace."""
        for parent in Path(rel).parents[:-1]:
            try:
                (self.workspace / parent).rmdir()
            except OSError:
                return

    # -- listing -------------------------------------------------------------------------------------------------

    def _refs(self, session_id: str) -> dict[str, str]:
        prefix = f"{REF_ROOT}/{session_id}/"
        out = self._git(["for-each-ref", "--format=%(refname) %(objectname)", prefix], self._env(None, None))
        return {ref[len(prefix) :]: commit for ref, commit in (line.split(" ") for line in out.splitlines())}

    def _tree(self, commit: str) -> Tree:
        """path → (mode, blob) of a checkpoint."""
        out = self._git(["ls-tree", "-r", "-z", "--full-tree", commit], self._env(None, None))
        entries = {}
        for line in filter(None, out.split("\0")):
            info, path = line.split("\t", 1)
            mode, _, blob = info.split(" ")
            entries[path] = (mode, blob)
        return entries

    def _meta(self, commit: str) -> CheckpointMeta:
        try:
            meta: JsonObject = json.loads(self._git(["log", "-1", "--format=%B", commit], self._env(None, None)))
        except ValueError:
            meta = {}
        return CheckpointMeta(set(meta.get("absent", ())), list(meta.get("skipped", ())))

    # -- git -----------------------------------------------------------------------------------------------------

    def _ready(self) -> None:
        if shutil.which("git") is None:
            raise RewindError("rewind needs the `git` command line tool, and it is not on PATH: install git")
        if not self.workspace.is_dir():
            raise RewindError(
                f"the workspace {self.workspace} does not exist (any more): nothing to snapshot "
                "or restore; run from the folder the session worked in, or pass --cwd"
            )
        if (self.repo / "HEAD").exists():
            return
        self.repo.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in self._env(None, None).items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
        self._git(["init", "-q", "--bare", str(self.repo)], env)
        (self.repo / "info").mkdir(exist_ok=True)
        (self.repo / "info" / "exclude").write_text(".git\n")
        # Highest-precedence attributes: store bytes as they are (no eol conversion, no clean/smudge filters).
        (self.repo / "info" / "attributes").write_text("* -text -filter -ident -working-tree-encoding\n")
        (self.repo / "description").write_text(f"drivetrain rewind checkpoints of {self.workspace}\n")

    def _user_repo(self) -> tuple[set[str], str | None]:
        """The workspace's own repository, read only: (the files it tracks, its info/exclude file)."""
        dot_git = self.workspace / ".git"
        if not dot_git.exists():
            return set(), None
        env = {**self._env(None, None), "GIT_DIR": str(dot_git), "GIT_OPTIONAL_LOCKS": "0"}
        del env["GIT_INDEX_FILE"]  # its own index, read only
        try:
            tracked = set(filter(None, self._git(["ls-files", "-z", "--cached"], env).split("\0")))
            exclude = self._git(["rev-parse", "--git-path", "info/exclude"], env).strip()
        except RewindError as e:  # a broken or foreign .git: snapshot as if it were not a repository
            log.warning("rewind: cannot read %s (%s); its tracked files and info/exclude are not used", dot_git, e)
            return set(), None
        exclude_path = self.workspace / exclude
        return tracked, str(exclude_path) if exclude_path.is_file() else None

    def _env(self, index: Path | None, user_exclude: str | None) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.repo.parent),
            "LC_ALL": "C",
            "GIT_DIR": str(self.repo),
            "GIT_WORK_TREE": str(self.workspace),
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_LITERAL_PATHSPECS": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_AUTHOR_NAME": "drivetrain",
            "GIT_AUTHOR_EMAIL": "rewind@drivetrain.invalid",
            "GIT_COMMITTER_NAME": "drivetrain",
            "GIT_COMMITTER_EMAIL": "rewind@drivetrain.invalid",
            "GIT_INDEX_FILE": str(index or self.repo / "index-unused"),
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "core.excludesFile",
            "GIT_CONFIG_VALUE_0": user_exclude or "/dev/null",
        }

    def _git(self, args: list[str], env: dict[str, str], stdin: str | None = None, ok: tuple[int, ...] = (0,)) -> str:
        try:
            cwd = self.workspace if self.workspace.is_dir() else None
            proc = subprocess.run(
                ["git", *_GIT_OPTIONS, *args],
                env=env,
                cwd=cwd,
                input=stdin,
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="surrogateescape",
            )
        except FileNotFoundError:
            raise RewindError("rewind needs the `git` command line tool, and it is not on PATH: install git") from None
        if proc.returncode not in ok:
            raise RewindError(
                f"git {args[0]} failed in the checkpoint store {self.repo}: {proc.stderr.strip() or proc.returncode}"
            )
        return proc.stdout

    def list(self, session_id: str) -> list[Checkpoint]:
        """The session's checkpoints, by prompt (the ``before-rewind-<n>`` safety ones are not listed)."""
        _check_session_id(session_id)
        if not (self.repo / "HEAD").exists():
            return []
        prefix = f"{REF_ROOT}/{session_id}/"
        out = self._git(
            ["for-each-ref", "--format=%(refname) %(objectname) %(committerdate:unix)", prefix], self._env(None, None)
        )
        found = []
        for ref, commit, when in (line.split(" ") for line in out.splitlines()):
            name = ref[len(prefix) :]
            if name.isdigit():
                found.append(Checkpoint(int(name), commit, datetime.fromtimestamp(int(when), UTC)))
        return sorted(found)


def _check_session_id(session_id: object) -> None:
    """Raises unless ``session_id`` is one (a caller without type checks may pass anything)."""
    if (
        not isinstance(session_id, str)
        or not _SESSION_ID.fullmatch(session_id)
        or session_id.endswith(".lock")
        or ".." in session_id
    ):
        raise RewindError(f"{session_id!r} is not a session id (letters, digits, '.', '_' and '-' only)")


def _is_prompt_number(value: object) -> bool:
    """A whole number from 1 (a caller without type checks may pass anything)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _order(name: str) -> tuple[int, int, str]:
    return (0, int(name), "") if name.isdigit() else (1, 0, name)

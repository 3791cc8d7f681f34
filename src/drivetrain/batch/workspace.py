"""A task's scratch workspace (a copy of a folder, or a git checkout) and the shell commands run in it."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping
from pathlib import Path

from drivetrain.batch.results import TaskSubtype
from drivetrain.batch.tasks import is_git_source
from drivetrain.errors import HarnessError
from drivetrain.host.procs import child_env, kill_group, signal_group, watch_group

COMMAND_TIMEOUT_S = 600.0  # for setup, check and a git clone
OUTPUT_TAIL = 2000  # characters of a failed command's output kept in its result line


class WorkspaceError(HarnessError):
    """The workspace could not be made, or its setup failed; the message says which and why."""

    def __init__(self, message: str, subtype: TaskSubtype = "workspace_failed"):
        super().__init__(message)
        self.subtype = subtype  # the result line's


async def prepare(source: str | None, where: Path, env: Mapping[str, str]) -> None:
    """A fresh ``where``: empty, a copy of the folder ``source``, or a checkout of ``URL@rev``."""
    if where.exists():
        await asyncio.to_thread(shutil.rmtree, where)
    where.parent.mkdir(parents=True, exist_ok=True)
    if source is None:
        where.mkdir()
    elif is_git_source(source):
        url, rev = split_rev(source)
        await _git(["clone", "--quiet", url, str(where)], where.parent, env)
        if rev:
            await _git(["checkout", "--quiet", "--detach", rev], where, env)
    else:
        try:
            await asyncio.to_thread(shutil.copytree, source, where, symlinks=True)
        except (OSError, shutil.Error) as e:
            raise WorkspaceError(f"cannot copy the workspace {source}: {e}") from None


def split_rev(source: str) -> tuple[str, str | None]:
    """``URL@rev`` → (URL, rev); the @ of ``git@host:`` is not a revision."""
    url, at, rev = source.rpartition("@")
    if not at or not url or "/" in rev or ":" in rev:
        return source, None
    return url, rev


async def _git(args: list[str], cwd: Path, env: Mapping[str, str]) -> None:
    code, out = await run_shell(["git", *args], cwd, env)
    if code != 0:
        raise WorkspaceError(f"git {' '.join(args)} failed (exit {code}): {out[-OUTPUT_TAIL:]}")


async def run_shell(
    command: str | list[str], cwd: Path, env: Mapping[str, str], timeout: float = COMMAND_TIMEOUT_S
) -> tuple[int, str]:
    """(exit code, stdout and stderr) of ``command`` (a string goes to bash -c) in its own process group,
    without the harness's credentials, plus ``env``. Timed out: 124, as timeout(1) says; cancelled: killed."""
    argv = ["/bin/bash", "-c", command] if isinstance(command, str) else command
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env={**child_env(), **env},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    watch_group(proc.pid)  # what it leaves running ends with us, even on kill -9
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        await kill_group(proc.pid, 2.0)
        await proc.wait()
        return 124, f"timed out after {timeout:g} s"
    finally:
        if proc.returncode is None:  # cancelled: the sweep is stopping
            signal_group(proc.pid, signal.SIGKILL)
    return await proc.wait(), out.decode(errors="replace")  # it has ended: communicate waited for it


def remove(where: Path) -> None:
    shutil.rmtree(where, ignore_errors=True)


def scratch_root(preferred: Path) -> Path:
    """``preferred`` when this machine can write there (a local run, a shared disk), else a temporary folder."""
    try:
        preferred.mkdir(parents=True, exist_ok=True)
        return preferred
    except OSError:
        return Path(tempfile.gettempdir()) / f"drivetrain-batch-{os.getuid()}"

"""The harness's child processes (Bash commands, shell hooks): the environment they start with, and ending them.

- ``child_env()``: the harness's environment without its provider settings (``ANTHROPIC_*``,
  ``OPENAI_*``), its session store's URL and without any variable whose name says it holds a secret (``*_API_KEY``,
  ``*_TOKEN``, ``*_SECRET``, ``*PASSWORD*``, ``*_CREDENTIALS``, …), except the names passed through.
  A prompt-injected ``echo $ANTHROPIC_API_KEY`` then prints nothing.
- ``kill_group``: SIGTERM a child's whole process group, a grace period, then SIGKILL.
- ``watch_group``: have a watchdog end a group when the harness dies, however it dies.
- ``keep_environment_private``: without it, a child could still read the harness's environment
  (its API key) from ``/proc/$PPID/environ``; the CLI calls it before any tool runs.

Why a watchdog: each command runs in its own process group, so nothing else ends it, and a
SIGKILL of the harness runs no handler. ``PR_SET_PDEATHSIG`` does not do it either: it reaches
only the direct child (``bash``), not what that shell started (``sleep 1000 &`` is re-parented
and lives on), it fires when the *thread* that forked exits rather than the process, and it
needs a ``preexec_fn``, which is not safe in a threaded program. So the harness starts one small
process, once, in its own session, holding the read end of a pipe; the harness writes each
child's process group id into it. When the harness ends (exit, crash, ``kill -9``) the kernel
closes the write end, the watchdog reads EOF and ends every group still alive: SIGTERM, then
SIGKILL a second later. It drops groups that have died every second, so a process group number
the kernel hands out again later is never signalled. The cost per command is one ``write`` of a
few bytes. A process that leaves its group on purpose (``setsid``) escapes it; in the sandbox
the PID namespace catches those too.
"""

from __future__ import annotations

import asyncio
import ctypes
import fnmatch
import functools
import logging
import os
import re
import select
import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

log = logging.getLogger("drivetrain.host.procs")

# ---------------------------------------------------------------- the environment children get

PR_SET_DUMPABLE = 4
PROVIDER_PREFIXES = ("ANTHROPIC_", "OPENAI_")  # the harness's own model settings: keys, and URLs that may carry them
HARNESS_URLS = ("DRIVETRAIN_SESSION_STORE",)  # the session store's URL, which may carry a password
TELEMETRY_HEADERS = ("OTEL_EXPORTER_OTLP_", "HEADERS")  # the collector's headers (…_TRACES_HEADERS too): its token
_SECRET_PARTS = {
    "key",
    "keys",
    "apikey",
    "token",
    "tokens",
    "secret",
    "secrets",
    "pass",
    "passwd",
    "password",
    "passphrase",
    "credential",
    "credentials",
}
_SECRET_INSIDE = ("PASSWORD", "PASSWD", "SECRET", "CREDENTIAL", "APIKEY")  # PGPASSWORD, MYSECRET
_SECRET_END = ("TOKEN", "AUTH")  # GHTOKEN, NPM_CONFIG__AUTH; not SSH_AUTH_SOCK (that is a socket path)


@functools.lru_cache(maxsize=1024)  # asked of every variable before every command: the names rarely change
def withheld(name: str) -> bool:
    """Is this variable kept from children by default: a provider setting, or named like a secret?"""
    upper = name.upper()
    if (
        upper.startswith(PROVIDER_PREFIXES)
        or upper in HARNESS_URLS
        or (upper.startswith(TELEMETRY_HEADERS[0]) and upper.endswith(TELEMETRY_HEADERS[1]))
        or any(s in upper for s in _SECRET_INSIDE)
        or upper.endswith(_SECRET_END)
    ):
        return True
    return any(part in _SECRET_PARTS for part in re.split(r"[^a-z0-9]+", name.lower()))


def passes(name: str, passthrough: Iterable[str]) -> bool:
    """Does ``name`` match one of the ``passthrough`` names or globs (``AWS_*``)? Case matters, as in the shell."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in passthrough)


def keep_environment_private() -> bool:
    """Make this process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``), so a process of the same user cannot
    read its environment from ``/proc/<pid>/environ`` nor its memory. It also turns off this process's core
    dumps and same-user debuggers (py-spy, gdb then need root). Children are unaffected: exec resets it.
    False where it cannot be done (not Linux)."""
    try:
        status: int = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        return status == 0
    except (OSError, AttributeError):
        return False


PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """End this process (SIGKILL) when its parent process ``parent`` ends, however it ends (Linux; a worker process
    started from the parent's main thread, whose exit is the process's). Already gone: exit now."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def child_env(passthrough: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ``os.environ``) without what ``withheld`` names, except the ``passthrough`` names."""
    env = os.environ if environ is None else environ
    passthrough = tuple(passthrough)
    return {k: v for k, v in env.items() if not withheld(k) or passes(k, passthrough)}


# ---------------------------------------------------------------- ending a group


def signal_group(pgid: int, sig: int) -> bool:
    """Signal the whole group; False once no process is left in it."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


async def kill_group(pgid: int, grace: float) -> None:
    """SIGTERM the group, give it ``grace`` seconds to exit, then SIGKILL what is left.

    ``grace`` 0 skips the SIGTERM. The SIGKILL is sent in any case: a leader that obeyed
    may leave children that did not. Reaping the leader is the caller's business.
    """
    loop = asyncio.get_running_loop()
    if grace > 0 and signal_group(pgid, signal.SIGTERM):
        deadline = loop.time() + grace
        while loop.time() < deadline and signal_group(pgid, 0):
            await asyncio.sleep(0.05)
    signal_group(pgid, signal.SIGKILL)


# ---------------------------------------------------------------- ending every group with the harness

WATCHDOG_GRACE_S = 1.0  # between the watchdog's SIGTERM and SIGKILL
PRUNE_S = 1.0  # how often the watchdog forgets groups that have ended

_lock = threading.Lock()
_watchdog: tuple[int, int, int] | None = None  # (harness pid, write end of the pipe, watchdog pid)
_fork_hook = False


def watch_group(pgid: int) -> bool:
    """Have the watchdog end process group ``pgid`` when this process ends. Started on first use.

    False (and a warning) if no watchdog can be started: the command still runs, but may outlive a crash.
    """
    line = b"%d\n" % pgid
    with _lock:
        for _ in range(2):
            try:
                os.write(_watchdog_fd(), line)  # a few bytes: atomic, and the watchdog keeps the pipe drained
                return True
            except (OSError, NotImplementedError) as e:  # it is gone (someone killed it): start another, once
                _forget(reap=True)
                problem = e
    log.warning("cannot start the process watchdog (%s): process group %d may outlive drivetrain", problem, pgid)
    return False


def _watchdog_fd() -> int:
    global _watchdog, _fork_hook
    if _watchdog is not None and _watchdog[0] == os.getpid():
        return _watchdog[1]
    read_end, write_end = os.pipe()  # both close-on-exec: no other child holds the write end open
    try:
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-S", os.path.abspath(__file__)],
            {},
            file_actions=[(os.POSIX_SPAWN_DUP2, read_end, 0)],
            setsid=True,
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    if not _fork_hook:  # a forked child lets go of ours and starts its own if it needs one
        os.register_at_fork(after_in_child=_after_fork)
        _fork_hook = True
    _watchdog = (os.getpid(), write_end, pid)
    return write_end


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    _forget()


def _forget(reap: bool = False) -> None:
    global _watchdog
    if _watchdog is None:
        return
    owner, fd, pid = _watchdog
    _watchdog = None
    os.close(fd)
    if reap and owner == os.getpid():
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _watchdog_main() -> None:
    """The watchdog: read group ids from stdin; at EOF, end every group still alive."""
    os.chdir("/")
    for sig in (signal.SIGINT, signal.SIGHUP):  # its own session has no terminal, but be sure
        signal.signal(sig, signal.SIG_IGN)
    groups: set[int] = set()
    pending = b""
    while True:
        if select.select([0], [], [], PRUNE_S)[0]:
            data = os.read(0, 65536)
            if not data:
                break
            *lines, pending = (pending + data).split(b"\n")
            groups.update(int(x) for x in lines if x.strip().isdigit())
        groups = {g for g in groups if signal_group(g, 0)}
    groups = {g for g in groups if signal_group(g, signal.SIGTERM)}
    deadline = time.monotonic() + WATCHDOG_GRACE_S
    while groups and time.monotonic() < deadline:
        select.select([], [], [], 0.05)
        groups = {g for g in groups if signal_group(g, 0)}
    for g in groups:
        signal_group(g, signal.SIGKILL)


if __name__ == "__main__":
    _watchdog_main()


async def run_command(command: str, cwd: Path, timeout_s: float) -> tuple[int, str]:
    """``bash -c command`` in ``cwd`` as a check runs it: its own process group (ended with drivetrain, however
    drivetrain ends; killed whole on timeout or cancellation), no credentials, stdout and stderr together.
    Returns (exit code, output); a timeout is exit code -1 with a line saying so."""
    proc = await asyncio.create_subprocess_exec(
        "/bin/bash",
        "-c",
        command,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        env=child_env(),
    )
    watch_group(proc.pid)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        await kill_group(proc.pid, 1.0)
        await proc.wait()
        return -1, f"(timed out after {timeout_s:g} s)"
    except asyncio.CancelledError:
        await kill_group(proc.pid, 1.0)
        raise
    return proc.returncode or 0, out.decode("utf-8", "replace")

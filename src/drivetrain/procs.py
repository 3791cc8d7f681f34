"""The harness's child processes (Bash commands, shell hooks): ending them.

- ``kill_group``: SIGTERM a child's whole process group, a grace period, then SIGKILL.
- ``watch_group``: have a watchdog end a group when the harness dies, however it dies.

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
import logging
import os
import select
import signal
import sys
import threading
import time

log = logging.getLogger("drivetrain.procs")

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
        pid = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", os.path.abspath(__file__)],
                             {}, file_actions=[(os.POSIX_SPAWN_DUP2, read_end, 0)], setsid=True)
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

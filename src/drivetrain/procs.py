"""Ending a child's whole process group: SIGTERM, a grace period, then SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal


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

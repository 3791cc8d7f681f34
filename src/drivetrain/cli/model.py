"""``drivetrain model status|stop``: the user's resident local model process (docs/local-model.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from drivetrain.control.permissions import load_settings
from drivetrain.errors import HarnessError
from drivetrain.models.resident import ENV_DAEMON, ENV_IDLE, ping, stop


def apply_settings(argv: list[str], cwd: Path | None = None) -> list[str]:
    """``--no-daemon`` (any command) and the settings files' ``localModelDaemon`` / ``localModelIdleSeconds``, put
    in the environment the model factory and a newly started model process read; ``argv`` without the flag."""
    if "--no-daemon" in argv:
        argv = [a for a in argv if a != "--no-daemon"]
        os.environ[ENV_DAEMON] = "0"
    try:
        files = load_settings(cwd or Path.cwd()).raw
    except (HarnessError, OSError):
        return argv  # the command itself reports a broken settings file
    for _, raw in files:  # local, project, user: the first that says wins, and the environment over all
        if isinstance(daemon := raw.get("localModelDaemon"), bool):
            os.environ.setdefault(ENV_DAEMON, "1" if daemon else "0")
        if isinstance(idle := raw.get("localModelIdleSeconds"), int | float) and idle > 0:
            os.environ.setdefault(ENV_IDLE, str(idle))
    return argv


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="drivetrain model", description="the resident local model process")
    p.add_argument("action", choices=["status", "stop"])
    p.add_argument("--json", action="store_true", help="status as one JSON object")
    args = p.parse_args(argv)
    if args.action == "stop":
        pid = stop(os.environ)
        print(f"stopped the model process {pid}" if pid else "no model process is running")
        return 0
    status = ping(os.environ)
    if args.json:
        print(json.dumps(status))
        return 0 if status else 1
    if not status:
        print("no model process is running (the next command that uses the local model starts one)")
        return 1
    up = time.time() - float(status["started"])
    print(
        f"pid {status['pid']}, up {up:.0f} s, idle {status['idle_s']} s of {status['idle_limit_s']:g} s, "
        f"{status['served']} replies, {status['in_flight']} in flight, RSS {status['rss_mb']} MB\n"
        f"models: {', '.join(status['models']) or '(none loaded yet)'}\nsocket: {status['socket']}",
        file=sys.stdout,
    )
    return 0

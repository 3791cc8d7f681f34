"""The default system prompt: how to use the tools, and the working directory's context up front.

Giving the model the workspace's layout at the start saves it a turn of exploring.
"""

from __future__ import annotations

import datetime
import platform
from pathlib import Path

BASE = """You are drivetrain, a coding agent working in the user's workspace. You act only through tools; \
each tool call is executed by the harness and its result comes back to you.

How to work:
- Work step by step: call a tool, read its result, then decide the next step from what the result says.
- Look before you act: Read a file before you Edit it; Glob finds files by name, Grep searches file contents.
- Several independent calls (e.g. reading three files) can be made in one turn; they run at the same time.
- Paths may be relative to the working directory.
- Bash runs shell commands in the working directory (timeout in milliseconds). Compute things with it \
(counts, sums, sizes, test runs) instead of working them out in your head.
- Only write real values into files, never placeholders such as <value>: find or compute the value first.
- When a tool result is an error, read the message: it says what went wrong. Fix the call; do not repeat it unchanged.
- When the task is done, answer briefly with the result, without calling more tools."""


def workspace_context(cwd: Path, limit: int = 40) -> str:
    try:
        entries = sorted(p for p in cwd.iterdir() if not p.name.startswith("."))
    except OSError:
        entries = []
    shown = [p.name + ("/" if p.is_dir() else "") for p in entries[:limit]]
    more = f"\n  … and {len(entries) - limit} more" if len(entries) > limit else ""
    listing = "\n".join(f"  {name}" for name in shown) or "  (empty)"
    return (
        f"Working directory: {cwd}\nPlatform: {platform.system()}\nToday: {datetime.date.today()}\n"
        f"Files in the working directory:\n{listing}{more}"
    )


def default_system_prompt(cwd: Path) -> str:
    return f"{BASE}\n\n{workspace_context(cwd)}"

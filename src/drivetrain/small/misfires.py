"""A call that failed in the model's own command, not in the workspace's code: a misfire.

Read from the call's result alone, in any language of the task: the shell could not run the command (a program
that does not exist, a syntax error the shell reports), the model's own python block raised (its traceback ends in
``<stdin>``), a program on the PATH refused its arguments (``cp: cannot stat 'clamp.py'``, ``python3: can't open
file``), or an Edit or Write the tool could not make. A workspace program that fails (a test's assertion, a
script's own traceback or usage error) is not one: reproducing that failure is often the task's first step.

A conversation that begins with such an error rarely recovers (docs/small-profile.md has the figures), so
``small/attempts.py`` abandons the attempt for a fresh one.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from drivetrain.jsontypes import JsonObject
from drivetrain.messages import ToolResultBlock

FILE_TOOLS = ("Edit", "Write")
_SHELL = re.compile(r"^(?:/bin/|/usr/bin/)?(?:ba)?sh: (?:-c: )?line \d+: (.*)$", re.MULTILINE)
_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+', re.MULTILINE)
_PROGRAM = re.compile(r"^([\w./+-]+): (.+)$")  # "cp: cannot stat …", "/usr/bin/python3: can't open file …"


def misfire(tool: str, result: ToolResultBlock, meta: JsonObject | None, cwd: Path) -> str:
    """Why the call failed in the model's own command ("" when it did not fail, or failed in the workspace's code,
    or never ran: a refusal is the policy's or the loop guard's, not a misfire)."""
    if not result.is_error or meta is None:
        return ""
    text = result.text
    if tool in FILE_TOOLS:
        return f"{tool} could not be made: {_first_line(text)}"
    if tool != "Bash":
        return ""
    if meta.get("exit_code") == 127:
        return f"a program it named does not exist: {_first_line(_stderr(text))}"
    err = _stderr(text)
    if shell := _SHELL.search(err):
        return f"the shell could not run it: {shell.group(1)[:120]}"
    frames = _FRAME.findall(err)
    if frames:
        return f"its own code raised: {_last_line(err)}" if frames[-1] in ("<stdin>", "<string>") else ""
    first = _PROGRAM.match(_first_line(err))
    if first and _installed(first.group(1), cwd):
        return f"`{Path(first.group(1)).name}` refused it: {first.group(2)[:120]}"
    return ""


def _installed(program: str, cwd: Path) -> bool:
    """A program of the system (on the PATH, or named by its absolute path), not one of the workspace's."""
    if "/" in program:
        path = Path(program)
        return path.is_absolute() and not path.is_relative_to(cwd) and os.access(path, os.X_OK) and path.is_file()
    return not (cwd / program).exists() and shutil.which(program) is not None


def _stderr(text: str) -> str:
    """The stderr part of a Bash result (``stderr:`` up to ``Exit code:``)."""
    _, found, err = text.rpartition("stderr:\n")
    return err.split("\nExit code:", 1)[0] if found else ""


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:160]


def _last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")[:160]

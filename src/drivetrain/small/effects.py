"""Work the run's own calls show was left half done, read from the workspace and the calls, not the task's words.

- A command printed a reordered or de-duplicated version of a file the task names (``sort -u f``, ``awk '!seen[$0]++'
  f``), and the file did not change: the result was shown, not written.
- A function the run put in a new file is still defined in the file it came from: a move left a copy behind.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from drivetrain.small.fragments import TOP_DEF

HALF = 0.5  # a printed version of a file keeps at least this share of its distinct lines


class Call(Protocol):
    command: str
    failed: bool
    output: str


def shown_not_written(named: Sequence[str], before: dict[str, bytes], now: dict[str, bytes],
                      calls: Sequence[Call]) -> list[str]:
    """A named file unchanged by the run, whose reordered or de-duplicated lines a command printed."""
    out = []
    for name in named:
        if name not in before or now.get(name) != before[name]:
            continue
        lines = [ln for ln in before[name].decode("utf-8", "replace").splitlines() if ln.strip()]
        for call in calls:
            printed = [ln for ln in call.output.splitlines() if ln.strip()]
            if call.failed or name not in call.command or not _transformed(lines, printed):
                continue
            out.append(f"`{call.command.strip()}` printed a changed version of {name} ({len(printed)} of its "
                       f"{len(lines)} lines), but {name} itself did not change. If the task asks for {name} to change, "
                       f"write the result into it (to a temporary file, then move that over {name}) and show it.")
            break
    return out


def _transformed(lines: list[str], printed: list[str]) -> bool:
    """``printed`` is made of the file's own lines, most of them, in another order or without its repeats."""
    distinct = set(lines)
    if not printed or not set(printed) <= distinct or len(set(printed)) < HALF * len(distinct) or printed == lines:
        return False
    order = [ln for ln in dict.fromkeys(lines) if ln in set(printed)]
    reordered = list(dict.fromkeys(printed)) != order
    return reordered or (len(distinct) < len(lines) and len(set(printed)) == len(printed))


def left_behind(named: Sequence[str], before: dict[str, bytes], now: dict[str, bytes]) -> list[str]:
    """A function or class the run defined in a new .py file the task names that a file it existed in before still
    defines. (A new file the task does not name is a stray: ``WorkChecks._strays``.)"""
    out = []
    for path in sorted(now.keys() - before.keys()):
        if not path.endswith(".py") or path not in named:
            continue
        moved = set(TOP_DEF.findall(now[path].decode("utf-8", "replace")))
        for old in sorted(before):
            if not old.endswith(".py") or old not in now:
                continue
            was = set(TOP_DEF.findall(before[old].decode("utf-8", "replace")))
            still = sorted(moved & was & set(TOP_DEF.findall(now[old].decode("utf-8", "replace"))))
            if still:
                names = ", ".join(still)
                module = path.removesuffix(".py").replace("/", ".")
                out.append(f"{names} is now defined both in {path} (new) and in {old}. Code lives in one place: "
                           f"remove it from {old} and import it there (`from {module} import {names}`), then run what "
                           f"uses it again.")
    return out

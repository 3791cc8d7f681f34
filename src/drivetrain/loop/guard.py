"""Run-level loop detection, after each tool turn: cycles (A-B-A-B) and the same error again and again.

The plain repeat (one call, same result, N times) is refused where calls run (``calls.py``). Here:
- a **cycle**: the last four tool turns go A, B, A, B — the same calls with the same results each time —
  so nothing changes; the calls of A and B are not run again (each refusal says why);
- the **same error**: error results with the very same text in a row; at ``SAME_ERROR_NOTE`` the result
  says so, at ``SAME_ERROR_END`` the run ends (``error_loop_detected``).
Every intervention is a ``LoopDetected`` event, which the session log records.
"""

from __future__ import annotations

import hashlib

from drivetrain.loop.calls import repeat_key
from drivetrain.loop.draft import Draft
from drivetrain.loop.events import LoopDetected
from drivetrain.messages import ToolResultBlock, ToolUseBlock

SAME_ERROR_NOTE = 3
SAME_ERROR_END = 5
KEEP_MARKS = 4


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def after_turn(w: Draft, calls: tuple[ToolUseBlock, ...], results: list[ToolResultBlock]) -> list[ToolResultBlock]:
    keys = tuple(repeat_key(c.name, c.input) for c in calls)
    # each call's result as the tool gave it (the digest the repeat guard keeps; a repeat note is not part of it)
    mark = _digest(
        "\0".join(
            k + "\0" + (w.seen_calls[k][1] if k in w.seen_calls else _digest(r.text)) for k, r in zip(keys, results)
        )
    )
    w.turn_marks = (*w.turn_marks, (mark, keys))[-KEEP_MARKS:]
    if len(w.turn_marks) == 4:
        (a, a_keys), (b, b_keys), (a2, _), (b2, _) = w.turn_marks
        if a == a2 and b == b2 and a != b:
            names = " and ".join(sorted({k.partition("\0")[0] for k in a_keys + b_keys}))
            why = (
                f"you are going round in a cycle ({names}, the same calls with the same results, twice "
                "in turn), so nothing changes. Use the results you already have, or change approach."
            )
            for k in a_keys + b_keys:
                w.blocked[k] = why
            w.emit(LoopDetected("cycle", "noted", names))
            w.turn_marks = ()
    out = []
    for r in results:
        if not r.is_error:
            w.error_streak = ("", 0)
        else:
            d = _digest(r.text)
            w.error_streak = (d, w.error_streak[1] + 1 if w.error_streak[0] == d else 1)
            if w.error_streak[1] == SAME_ERROR_NOTE and isinstance(r.content, str):
                r = ToolResultBlock(
                    r.tool_use_id,
                    f"{r.content}\n\n[drivetrain: the same error as your last "
                    f"{SAME_ERROR_NOTE - 1} calls. Repeating will not help: read it, then change "
                    "approach.]",
                    True,
                )
                w.emit(LoopDetected("same_error", "noted", r.text[:200]))
        out.append(r)
    return out

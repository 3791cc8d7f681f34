"""One line about a run's intervention or warning, for the turn log (``-p --verbose``) and the interactive screen."""

from __future__ import annotations

from drivetrain.loop.events import Compacted, Event, LimitApproaching, LimitReached, LoopDetected


def describe(e: Event) -> str:
    match e:
        case LoopDetected(pattern=p, action=a, detail=d):
            return f"loop ({p}) {a}: {d[:120]}"
        case LimitApproaching(limit=n, used=u, maximum=m) | LimitReached(limit=n, used=u, maximum=m):
            return f"limit {n} {'reached' if isinstance(e, LimitReached) else 'approaching'}: {u:g} of {m:g}"
        case Compacted(trigger=t, tokens_before=b, tokens_after=a, failed=f):
            return f"compaction ({t}) failed: {f}" if f else f"compacted ({t}): ~{b:,} → ~{a:,} tokens"
    return str(e)

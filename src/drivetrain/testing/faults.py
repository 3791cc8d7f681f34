"""Upstream faults for the scripted servers: one kind per row of the fault table (docs/faults.md).

A fault is a ``Step`` (``fault("cut")`` in a script answers that request with the fault) or comes from a
``FaultSchedule`` given to the server, which faults requests at a seeded rate *without* using a step: the
retried request gets the step the faulted one would have had, as a real upstream's retry would.

Kinds that only a stream can show are answered, for a request that asked for a whole answer, with the nearest
whole-answer fault: ``overloaded_in_stream`` as a 529, ``no_message_stop`` as a ``cut`` body, ``stall`` as a
``hang``. ``refused`` is served as a server restarting: the request's connection is reset and the server stops
listening for ``REFUSED_S``, so that the retry's new connection is refused (a test can also point the client at a
closed port).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from .script import Expect, Step

FaultKind = Literal[
    "http_408",
    "http_409",
    "http_429",
    "http_500",
    "http_502",
    "http_503",
    "http_504",
    "http_529",
    "overloaded_in_stream",
    "refused",
    "reset",
    "cut",
    "not_json",
    "broken_json",
    "no_message_stop",
    "stall",
    "hang",
]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
# what a server answers a request with; ``refused`` (a restart) also refuses the next connections for a moment
SERVED: tuple[FaultKind, ...] = tuple(k for k in FAULT_KINDS if k != "refused")
REFUSED_S = 1.0  # a served ``refused``: how long the server does not listen (the client's first retry is refused)
# the error type each status comes with, in the Messages API's words
ERROR_TYPES = {
    408: "timeout_error",
    409: "conflict_error",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
# what a request for a whole answer meets instead of a fault only a stream can show
STREAM_ONLY: dict[FaultKind, FaultKind] = {
    "overloaded_in_stream": "http_529",
    "no_message_stop": "cut",
    "stall": "hang",
}


@dataclass(frozen=True, kw_only=True)
class Fault(Step):
    kind: FaultKind
    retry_after: str | None = None  # the retry-after header sent with a status fault
    retry_after_ms: str | None = None
    seconds: float = 30.0  # hang, stall: how long nothing is sent before the connection is closed

    def as_whole(self) -> Fault:
        """The fault as a request for a whole answer (not a stream) meets it."""
        kind = STREAM_ONLY.get(self.kind)
        return self if kind is None else Fault(kind=kind, seconds=self.seconds)

    @property
    def status(self) -> int | None:
        return int(self.kind.removeprefix("http_")) if self.kind.startswith("http_") else None


def fault(
    kind: FaultKind,
    *,
    retry_after: str | None = None,
    retry_after_ms: str | None = None,
    seconds: float = 30.0,
    expect: Expect | None = None,
) -> Fault:
    """Answer this request with a fault of ``kind`` (see ``FAULT_KINDS`` and docs/faults.md)."""
    if kind not in FAULT_KINDS:
        raise ValueError(f"no such fault {kind!r}; one of {', '.join(FAULT_KINDS)}")
    return Fault(kind=kind, retry_after=retry_after, retry_after_ms=retry_after_ms, seconds=seconds, expect=expect)


@dataclass
class FaultSchedule:
    """Faults ``rate`` of the requests (the n-th request's fate drawn from ``seed``, so one seed gives one
    sequence), each of a kind drawn from ``kinds``; ``at`` faults given request numbers (1-based) instead.
    A 503 comes with ``retry-after: 0`` (the seconds a real one asks for would slow a test down for nothing).
    ``seconds``: how long a hang or stall lasts (longer than the client's timeout, or it is no fault)."""

    rate: float = 0.0
    seed: int = 0
    kinds: Sequence[FaultKind] = FAULT_KINDS
    at: Mapping[int, FaultKind] = field(default_factory=dict)
    seconds: float = 30.0
    injected: list[tuple[int, FaultKind]] = field(default_factory=list)  # (request number, kind), as served
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        if bad := [k for k in [*self.kinds, *self.at.values()] if k not in FAULT_KINDS]:
            raise ValueError(f"no such fault {bad}; one of {', '.join(FAULT_KINDS)}")

    def pick(self, n: int) -> Fault | None:
        """The fault for request ``n``, if any (called once a request, in the order requests arrive)."""
        with self._lock:
            draw, which = self._rng.random(), self._rng.randrange(len(self.kinds)) if self.kinds else 0
            kind = self.at.get(n) or (self.kinds[which] if self.kinds and draw < self.rate else None)
            if kind is None:
                return None
            self.injected.append((n, kind))
        retry_after = "0" if kind == "http_503" else None
        return Fault(kind=kind, retry_after=retry_after, seconds=self.seconds)

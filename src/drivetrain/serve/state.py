"""What the server runs with: its settings and its state (the model, the queue for it, the metrics)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from opentelemetry.trace import Tracer

from drivetrain.models.base import Model
from drivetrain.serve.calls import Admission
from drivetrain.serve.observe import Metrics
from drivetrain.serve.passthrough import Upstream

MAX_BODY = 32 * 1024 * 1024  # a long agent history with images stays well under it


@dataclass
class Settings:
    host: str = "127.0.0.1"
    api_key: str | None = None  # None: no key asked for (refused by the command off loopback)
    max_body: int = MAX_BODY
    max_concurrent: int | None = None  # model calls at once; None: 1 for an in-process model, 256 for HTTP ones
    max_queue: int = 64  # requests waiting beyond those; then 429
    commit_after: float = 5.0  # a stream's status waits this long for the model's first output
    keepalive_every: float = 10.0
    log: Callable[[str], None] | None = None


@dataclass
class ServeState:
    model: Model
    settings: Settings
    metrics: Metrics = field(default_factory=Metrics)
    draining: bool = False  # shutting down: in-flight requests finish, new ones get 503
    created: int = field(default_factory=lambda: int(time.time()))
    tracer: Tracer | None = None  # a span per request (serve/tracing.py): telemetry on; None costs nothing

    def __post_init__(self) -> None:
        self.upstream = Upstream.for_model(self.model)
        limit = self.settings.max_concurrent or (256 if self.upstream is not None else 1)
        self.admission = Admission(limit, self.settings.max_queue, self.metrics)

    def log(self, line: str) -> None:
        if self.settings.log is not None:
            self.settings.log(line)

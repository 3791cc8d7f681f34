"""What serve tells its operator: one access-log line per request and Prometheus-style ``/metrics``.

Counters live in the process: with ``--workers`` each worker counts its own requests, and a scrape
reaches whichever worker accepts it (the figures are per worker, labelled with its pid).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from drivetrain.jsontypes import JsonValue

# upper bounds (seconds) of the latency histogram's buckets
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass
class Usage:
    """The tokens of one request, as far as serve saw them (0 when the answer carried none)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0

    def add(self, usage: JsonValue) -> None:
        """Fold in a usage object of either API (anything else is ignored); later values replace earlier ones
        (streams repeat them)."""
        if not isinstance(usage, dict):
            return
        self.input = _int(usage.get("input_tokens", usage.get("prompt_tokens")), self.input)
        self.output = _int(usage.get("output_tokens", usage.get("completion_tokens")), self.output)
        self.cache_read = _int(usage.get("cache_read_input_tokens"), self.cache_read)


def _int(value: JsonValue, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


@dataclass
class Metrics:
    requests: Counter[tuple[str, str, int]] = field(default_factory=Counter)  # (method, route, status) -> count
    latency: dict[str, list[float]] = field(default_factory=dict)  # route -> [bucket counts..., +Inf count, sum]
    tokens: Counter[str] = field(default_factory=Counter)  # kind -> count
    in_flight: int = 0
    queued: int = 0  # requests waiting for the model
    rejected: int = 0  # turned away because the queue was full

    def record(self, method: str, route: str, status: int, seconds: float, usage: Usage) -> None:
        self.requests[(method, route, status)] += 1
        row = self.latency.setdefault(route, [0] * (len(BUCKETS) + 2))
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                row[i] += 1
        row[len(BUCKETS)] += 1
        row[-1] += seconds
        self.tokens["input"] += usage.input
        self.tokens["output"] += usage.output
        self.tokens["cache_read"] += usage.cache_read

    def render(self, model: str) -> str:
        pid = os.getpid()
        out = [
            "# HELP drivetrain_serve_requests_total Requests answered, by route and status.",
            "# TYPE drivetrain_serve_requests_total counter",
        ]
        for (method, route, status), n in sorted(self.requests.items()):
            out.append(
                f'drivetrain_serve_requests_total{{method="{method}",route="{route}",status="{status}",'
                f'pid="{pid}"}} {n}'
            )
        out += [
            "# HELP drivetrain_serve_request_seconds Time from request to the end of the answer.",
            "# TYPE drivetrain_serve_request_seconds histogram",
        ]
        for route, row in sorted(self.latency.items()):
            labels = f'route="{route}",pid="{pid}"'
            for bound, count in zip(BUCKETS, row):
                out.append(f'drivetrain_serve_request_seconds_bucket{{{labels},le="{bound}"}} {count}')
            out.append(f'drivetrain_serve_request_seconds_bucket{{{labels},le="+Inf"}} {row[len(BUCKETS)]}')
            out.append(f"drivetrain_serve_request_seconds_sum{{{labels}}} {row[-1]:.6f}")
            out.append(f"drivetrain_serve_request_seconds_count{{{labels}}} {row[len(BUCKETS)]}")
        out += [
            "# HELP drivetrain_serve_tokens_total Tokens reported by the model's answers.",
            "# TYPE drivetrain_serve_tokens_total counter",
        ]
        for kind in ("input", "output", "cache_read"):
            out.append(
                f'drivetrain_serve_tokens_total{{kind="{kind}",model="{model}",pid="{pid}"}} {self.tokens[kind]}'
            )
        for name, value, what in (
            ("in_flight", self.in_flight, "Requests being answered now."),
            ("queued", self.queued, "Requests waiting for the model."),
            ("rejected_total", self.rejected, "Requests refused because the queue was full."),
        ):
            kind = "counter" if name.endswith("_total") else "gauge"
            out += [
                f"# HELP drivetrain_serve_{name} {what}",
                f"# TYPE drivetrain_serve_{name} {kind}",
                f'drivetrain_serve_{name}{{pid="{pid}"}} {value}',
            ]
        return "\n".join(out) + "\n"


def access_line(client: str, method: str, path: str, status: int, seconds: float, usage: Usage) -> str:
    tokens = f" in={usage.input} out={usage.output}" if usage.input or usage.output else ""
    cached = f" cached={usage.cache_read}" if usage.cache_read else ""
    return f"{client} {method} {path} {status} {seconds * 1000:.1f}ms{tokens}{cached}"

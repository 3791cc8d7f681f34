"""A span per request ``drivetrain serve`` answers (OpenTelemetry's HTTP server conventions, with the GenAI usage
the answer carried), under the caller's span when the request carries W3C ``traceparent``: an agent's ``chat`` span
and the server's request then share one trace. Only when the server has a tracer (telemetry on)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import propagate
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from drivetrain.serve.observe import Usage


@contextmanager
def request_span(
    tracer: Tracer, method: str, route: str, path: str, headers: Mapping[str, str], model: str
) -> Iterator[Span]:
    """The request's span, current while it is answered; ``answered`` sets what is known at its end."""
    attributes: dict[str, str] = {
        "http.request.method": method,
        "http.route": route,
        "url.path": path,
        "gen_ai.request.model": model,
    }
    parent = propagate.extract(headers)
    with tracer.start_as_current_span(
        f"{method} {route}",
        context=parent,
        kind=SpanKind.SERVER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def answered(span: Span, status: int, usage: Usage) -> None:
    span.set_attribute("http.response.status_code", status)
    if usage.input or usage.output:
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": usage.input,
                "gen_ai.usage.output_tokens": usage.output,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read,
            }
        )
    if status >= 500:  # a client's error is the client's: the server span is an error only for its own
        span.set_attribute("error.type", str(status))
        span.set_status(Status(StatusCode.ERROR))

"""`drivetrain serve` with telemetry: a span per request (HTTP server conventions, with the answer's usage), under
the caller's span when the request carries W3C traceparent; an error only for the server's own failures."""

from __future__ import annotations

import anthropic
import pytest
from opentelemetry import propagate
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from drivetrain.models.anthropic import AnthropicModel
from drivetrain.serve import ModelServer
from drivetrain.testing import ScriptedServer, http_error, reply

HI = [{"role": "user", "content": "hi"}]
USAGE = {"input_tokens": 12, "output_tokens": 3, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 0}


def test_each_request_is_a_server_span_under_the_callers_with_its_usage():
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    steps = [reply("hello", usage=USAGE), reply("again"), http_error(500, "api_error", "upstream broke")]
    with ScriptedServer(steps) as upstream:
        model = AnthropicModel.from_env(
            "claude-upstream", {"ANTHROPIC_BASE_URL": upstream.url, "ANTHROPIC_API_KEY": "k"}, max_retries=0
        )
        with ModelServer(model, tracer=tracer) as server:
            client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
            with tracer.start_as_current_span("the caller's request") as caller:
                carrier: dict[str, str] = {}
                propagate.inject(carrier)  # traceparent, as an instrumented client sends it
                client.messages.create(model="m", max_tokens=50, messages=HI, extra_headers=carrier)
            client.messages.create(model="m", max_tokens=50, messages=HI)  # no traceparent: a trace of its own
            with pytest.raises(anthropic.APIStatusError):
                client.messages.create(model="m", max_tokens=50, messages=HI)
            with pytest.raises(anthropic.BadRequestError):
                client.messages.create(model="m", max_tokens=50, messages=[])
    served = [s for s in exporter.get_finished_spans() if s.name == "POST /v1/messages"]
    assert len(served) == 4
    first, second, failed, refused = served
    assert first.kind.name == "SERVER"
    assert first.parent is not None and first.parent.span_id == caller.get_span_context().span_id
    assert first.context.trace_id == caller.get_span_context().trace_id
    assert second.parent is None and second.context.trace_id != first.context.trace_id
    a = first.attributes
    assert (a["http.request.method"], a["http.route"], a["http.response.status_code"]) == ("POST", "/v1/messages", 200)
    assert a["gen_ai.request.model"] == "claude-upstream"
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (12, 3)
    assert failed.attributes["http.response.status_code"] >= 500 and failed.status.status_code.name == "ERROR"
    assert refused.attributes["http.response.status_code"] == 400 and refused.status.status_code.name == "UNSET"


def test_without_a_tracer_serve_makes_no_spans_and_loads_no_propagators():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from drivetrain.serve.app import build_app\n"
        "assert 'drivetrain.serve.tracing' not in sys.modules and 'opentelemetry.propagate' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

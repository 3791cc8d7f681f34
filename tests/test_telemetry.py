"""Telemetry against a real OTLP receiver (``drivetrain.testing.otlp``: the official protobuf messages over HTTP and
gRPC on 127.0.0.1): a scripted run with two tool calls and a denied one exports a span tree under the GenAI
conventions, Claude Code's metrics and events, usage matching the session log, and no content unless opted in."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from drivetrain import Agent, tool
from drivetrain.messages import Usage
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.sessions.file import FileStore
from drivetrain.telemetry.run import Telemetry
from drivetrain.telemetry.settings import TelemetryContent, TelemetrySettings
from drivetrain.telemetry.setup import install
from drivetrain.testing import ScriptedServer, http_error, reply, respond, tool_call
from drivetrain.testing.otlp import OtlpReceiver, ReceivedSpan
from drivetrain.tools import Bash

PROMPT = "find the answer SECRET-PROMPT-WORDS"
MODEL = "claude-sonnet-4-5"


@dataclass
class Decision:
    behavior: str
    reason: str = ""
    source: str = "rule:test"


class DenyDelete:
    def decide(self, tool_name, tool_input, ctx):
        if tool_name == "delete":
            return Decision("deny", "deleting is denied", "rule:deny(delete)")
        return Decision("allow", "ok", "rule:allow(lookup)")


@tool
def lookup(key: str) -> str:
    """Looks a key up."""
    return f"value-of-{key}"


@tool
def delete(key: str) -> str:
    """Deletes a key."""
    raise AssertionError("a denied call must not run")


USAGES = [
    {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 30, "cache_creation_input_tokens": 7},
    {"input_tokens": 150, "output_tokens": 10, "cache_read_input_tokens": 40, "cache_creation_input_tokens": 0},
    {"input_tokens": 170, "output_tokens": 5, "cache_read_input_tokens": 50, "cache_creation_input_tokens": 0},
]


def script() -> list:
    return [
        respond(
            [tool_call("lookup", {"key": "alpha"}, id="toolu_1"), tool_call("delete", {"key": "beta"}, id="toolu_2")],
            usage=USAGES[0],
        ),
        respond([tool_call("lookup", {"key": "gamma"}, id="toolu_3")], usage=USAGES[1]),
        reply("the answer is 42", usage=USAGES[2]),
    ]


def settings_for(receiver: OtlpReceiver, protocol: str = "http/protobuf", **extra: str) -> TelemetrySettings:
    env = {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_LOGS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.grpc_url if protocol == "grpc" else receiver.url,
        "OTEL_RESOURCE_ATTRIBUTES": "team=core,deployment.environment=test",
        "OTEL_TRACES_EXPORT_INTERVAL": "100",
        "OTEL_LOGS_EXPORT_INTERVAL": "100",
        **extra,
    }
    return TelemetrySettings.from_env(env)


async def scripted_run(tmp_path, telemetry: Telemetry, session_id: str = "sess-otel"):
    store = FileStore(tmp_path / "home")
    with ScriptedServer(script()) as server:
        model = AnthropicModel.from_env(MODEL, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"})
        agent = Agent(
            model=model, tools=[lookup, delete], cwd=tmp_path, policy=DenyDelete(), store=store, telemetry=telemetry
        )
        result = await agent.start(PROMPT, session_id=session_id).finish()
    return result, store


async def exported_run(
    tmp_path, protocol: str = "http/protobuf", content: TelemetryContent | None = None, grpc: bool = False
):
    with OtlpReceiver(grpc=grpc) as receiver:
        installed = install(settings_for(receiver, protocol))
        telemetry = Telemetry(
            installed.tracer_provider,
            installed.meter_provider,
            installed.logger_provider,
            content or TelemetryContent(),
        )
        result, store = await scripted_run(tmp_path, telemetry)
        installed.shutdown(timeout_ms=5_000)  # flushes every signal
        receiver.wait_for(lambda r: len(r.spans()) >= 6)
    return result, store, receiver


def by_name(spans: list[ReceivedSpan], prefix: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


async def test_a_run_is_a_tree_of_genai_spans_with_decisions_and_usage_matching_the_session_log(tmp_path):
    result, store, receiver = await exported_run(tmp_path)
    spans = receiver.spans()
    assert result.subtype == "success"
    [run] = by_name(spans, "invoke_agent")
    chats = by_name(spans, "chat")
    tools = by_name(spans, "execute_tool")
    assert len(spans) == 1 + 3 + 3, [s.name for s in spans]
    assert run.parent_id == "" and {s.trace_id for s in spans} == {run.trace_id}
    assert all(s.parent_id == run.span_id for s in chats + tools)
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.conversation.id"] == "sess-otel"
    assert run.attributes["drivetrain.result.subtype"] == "success"
    assert run.resource["service.name"] == "drivetrain" and run.resource["team"] == "core"

    # each request: the model, the finish reason, tokens (cache included) and cost, as the session log has them
    turns = [r for r in store.read("sess-otel") if r["kind"] == "turn"]
    assert len(chats) == len(turns) == 3
    for chat, turn in zip(chats, turns):
        usage = Usage(**turn["usage"])
        assert chat.name == f"chat {MODEL}" and chat.kind == 3  # CLIENT
        assert chat.attributes["gen_ai.request.model"] == MODEL
        assert chat.attributes["gen_ai.provider.name"] == "anthropic"
        assert chat.attributes["gen_ai.response.finish_reasons"] == [turn["stop_reason"]]
        assert chat.attributes["gen_ai.usage.output_tokens"] == usage.output_tokens
        assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == usage.cache_read_input_tokens
        assert chat.attributes["gen_ai.usage.cache_creation.input_tokens"] == usage.cache_creation_input_tokens
        assert chat.attributes["gen_ai.usage.input_tokens"] == (
            usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
        )
        assert chat.attributes["drivetrain.cost_usd"] == pytest.approx(turn["cost_usd"])
    total = sum((Usage(**u) for u in USAGES), Usage())
    assert run.attributes["gen_ai.usage.output_tokens"] == total.output_tokens == result.usage.output_tokens
    assert run.attributes["drivetrain.cost_usd"] == pytest.approx(result.total_cost_usd)

    # the calls: two ran, one was denied (a span of no length, with who denied it)
    calls = {s.attributes["gen_ai.tool.call.id"]: s for s in tools}
    assert set(calls) == {"toolu_1", "toolu_2", "toolu_3"}
    for ran in ("toolu_1", "toolu_3"):
        s = calls[ran]
        assert s.name == "execute_tool lookup" and s.status_code == 0
        assert s.attributes["drivetrain.permission.decision"] == "allow"
        assert s.attributes["drivetrain.permission.decided_by"] == "rule:allow(lookup)"
    denied = calls["toolu_2"]
    assert denied.name == "execute_tool delete" and denied.status_code == 2
    assert denied.attributes["drivetrain.permission.decision"] == "deny"
    assert denied.attributes["drivetrain.permission.decided_by"] == "rule:deny(delete)"
    assert denied.attributes["error.type"] == "permission_denied" and denied.duration_ms == 0
    # the order of things: the first request, its calls, the next request
    assert chats[0].end_ns <= calls["toolu_1"].start_ns <= calls["toolu_1"].end_ns <= chats[1].start_ns


async def test_no_prompt_or_tool_content_leaves_unless_opted_in(tmp_path):
    _, _, receiver = await exported_run(tmp_path)
    everything = json.dumps(receiver.as_json())
    assert "SECRET-PROMPT-WORDS" not in everything
    assert "value-of-alpha" not in everything and "alpha" not in everything
    [prompt] = [r for r in receiver.log_records() if r.event_name == "claude_code.user_prompt"]
    assert prompt.attributes["prompt_length"] == len(PROMPT) and "prompt" not in prompt.attributes


async def test_opted_in_content_is_sent_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-9f8e7d6c5b4a3210")
    _, _, receiver = await exported_run(
        tmp_path, content=TelemetryContent(prompts=True, tool_details=True, tool_content=True)
    )
    spans = receiver.spans()
    [run] = by_name(spans, "invoke_agent")
    messages = json.loads(str(run.attributes["gen_ai.input.messages"]))
    assert messages == [{"role": "user", "parts": [{"type": "text", "content": PROMPT}]}]
    first = next(s for s in spans if s.attributes.get("gen_ai.tool.call.id") == "toolu_1")
    assert json.loads(str(first.attributes["gen_ai.tool.call.arguments"])) == {"key": "alpha"}
    assert first.attributes["gen_ai.tool.call.result"] == "value-of-alpha"


async def test_claude_code_metrics_and_events(tmp_path):
    result, _, receiver = await exported_run(tmp_path)
    points = receiver.metric_points()

    def total(metric: str, **attrs: str) -> float:
        return sum(
            p.value for p in points if p.metric == metric and all(p.attributes.get(k) == v for k, v in attrs.items())
        )

    assert total("claude_code.session.count") == 1
    u = result.usage
    assert total("claude_code.token.usage", type="input", model=MODEL) == u.input_tokens
    assert total("claude_code.token.usage", type="output") == u.output_tokens
    assert total("claude_code.token.usage", type="cacheRead") == u.cache_read_input_tokens
    assert total("claude_code.token.usage", type="cacheCreation") == u.cache_creation_input_tokens
    assert total("claude_code.cost.usage", model=MODEL) == pytest.approx(result.total_cost_usd)
    assert total("claude_code.active_time.total", type="cli") > 0
    assert all(p.attributes["session.id"] == "sess-otel" for p in points if p.metric.startswith("claude_code"))

    events = receiver.log_records()
    [run] = [s for s in receiver.spans() if s.name.startswith("invoke_agent")]
    assert {e.trace_id for e in events} == {run.trace_id}  # each event points at the run's trace
    names = [e.event_name for e in events]
    assert names.count("claude_code.api_request") == 3
    assert names.count("claude_code.user_prompt") == 1
    decisions = {
        (e.attributes["tool_name"], e.attributes["decision"]) for e in events if e.event_name.endswith("decision")
    }
    assert decisions == {("lookup", "accept"), ("delete", "reject")}
    results = [e for e in events if e.event_name == "claude_code.tool_result"]
    assert sorted((e.attributes["tool_name"], e.attributes["success"]) for e in results) == [
        ("delete", False),
        ("lookup", True),
        ("lookup", True),
    ]


async def test_a_users_own_spans_and_drivetrains_nest(tmp_path):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mine = provider.get_tracer("the-users-app")

    @tool
    def measured(key: str) -> str:
        """A tool with a span of its own."""
        with mine.start_as_current_span("inside the tool"):
            return key

    with ScriptedServer([respond([tool_call("measured", {"key": "k"}, id="toolu_m")]), reply("ok")]) as server:
        model = AnthropicModel.from_env(MODEL, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"})
        agent = Agent(model=model, tools=[measured], cwd=tmp_path, telemetry=Telemetry(tracer_provider=provider))
        with mine.start_as_current_span("the user's request"):
            await agent.run("go")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    parent = {name: s.parent.span_id if s.parent else None for name, s in spans.items()}
    assert parent["invoke_agent drivetrain"] == spans["the user's request"].context.span_id
    assert parent["execute_tool measured"] == spans["invoke_agent drivetrain"].context.span_id
    assert parent["inside the tool"] == spans["execute_tool measured"].context.span_id


def test_without_a_provider_a_run_has_no_telemetry_and_its_model_and_tools_stay_as_given(tmp_path):
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)  # nothing set globally in this process
    agent = Agent(model=AnthropicModel.from_env(MODEL, {"ANTHROPIC_API_KEY": "k"}), tools=[lookup], cwd=tmp_path)
    run = agent.start("go")
    assert run.telemetry is None
    assert run.deps.model is agent.model and run.deps.tools["lookup"] is lookup


def test_content_is_redacted_before_it_leaves(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-9f8e7d6c5b4a3210")
    from drivetrain.telemetry import names

    assert "tok-9f8e7d6c5b4a3210" not in names.content_text("the token is tok-9f8e7d6c5b4a3210")
    assert "tok-9f8e7d6c5b4a3210" not in names.content_json({"command": "echo tok-9f8e7d6c5b4a3210"})
    assert names.content_text("x" * 20_000).endswith("…")


async def test_otlp_over_grpc_reaches_the_receiver(tmp_path):
    with OtlpReceiver(grpc=True) as receiver:
        installed = install(settings_for(receiver, "grpc"))
        await scripted_run(
            tmp_path, Telemetry(installed.tracer_provider, installed.meter_provider, installed.logger_provider)
        )
        installed.shutdown(timeout_ms=5_000)
        receiver.wait_for(lambda r: len(r.spans()) >= 7 and r.log_records() and r.metric_points())
    assert set(receiver.received.content_types) == {"grpc"}
    assert sorted({s.name.split(" ")[0] for s in receiver.spans()}) == ["chat", "execute_tool", "invoke_agent"]


async def test_a_failed_model_request_is_an_error_span_and_an_api_error_event(tmp_path):
    spans_out, logs_out = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tracer_provider, logger_provider = TracerProvider(), LoggerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans_out))
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs_out))
    with ScriptedServer([http_error(400, "invalid_request_error", "prompt is too long")]) as server:
        model = AnthropicModel.from_env(MODEL, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"})
        telemetry = Telemetry(tracer_provider, logger_provider=logger_provider)
        result = await Agent(model=model, cwd=tmp_path, telemetry=telemetry).run("go")
    assert result.subtype == "error_during_execution"
    spans = {s.name: s for s in spans_out.get_finished_spans()}
    chat, run = spans[f"chat {MODEL}"], spans["invoke_agent drivetrain"]
    assert chat.status.status_code.name == "ERROR" and chat.attributes["error.type"] == "ModelError"
    assert run.status.status_code.name == "ERROR" and run.attributes["drivetrain.result.subtype"] == result.subtype
    [error] = [r.log_record for r in logs_out.get_finished_logs() if r.log_record.event_name == "claude_code.api_error"]
    assert "prompt is too long" in str(error.attributes["error"]) and error.attributes["model"] == MODEL


def test_commits_and_pull_requests_are_read_from_the_parsed_command():
    from drivetrain.telemetry.names import commits_and_pull_requests

    assert commits_and_pull_requests('git add -A && git -C repo commit -m "fix: it" && gh pr create --fill') == (1, 1)
    assert commits_and_pull_requests("timeout 60 git commit --amend --no-edit; git log -1") == (1, 0)
    assert commits_and_pull_requests("echo 'git commit' && git status && gh pr list") == (0, 0)


async def test_a_commit_made_through_bash_counts_as_claude_codes_does(tmp_path):
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    command = "git init -q && git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m first"
    steps = [respond([tool_call("Bash", {"command": command}, id="toolu_g")]), reply("committed")]
    with ScriptedServer(steps) as server:
        model = AnthropicModel.from_env(MODEL, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"})
        agent = Agent(model=model, tools=[Bash()], cwd=tmp_path, telemetry=Telemetry(meter_provider=provider))
        result = await agent.run("commit")
    assert result.result == "committed"
    points = {
        m.name: sum(p.value for p in m.data.data_points)
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert points["claude_code.commit.count"] == 1 and "claude_code.pull_request.count" not in points


def certificates(folder) -> tuple[str, str, str]:
    """A CA, and a server certificate for 127.0.0.1 it signed (with the extensions strict verifiers ask for): the
    CA's certificate file, and the server's certificate and key files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def build(subject: str, key, issuer: str, signer, public, ca: bool):
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=ca,
                    crl_sign=ca,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
        )
        if not ca:
            b = b.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
            ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        return b.sign(signer, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = build("test CA", ca_key, "test CA", ca_key, ca_key.public_key(), ca=True)
    server = build("127.0.0.1", server_key, "test CA", ca_key, server_key.public_key(), ca=False)
    paths = folder / "ca.pem", folder / "collector.pem", folder / "collector.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return str(paths[0]), str(paths[1]), str(paths[2])


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json", "grpc"])
async def test_a_collector_behind_tls_with_its_ca_certificate(tmp_path, protocol):
    ca, cert, key = certificates(tmp_path)
    for trusted in (False, True):  # without the CA certificate the export fails: it is what makes it work
        with OtlpReceiver(tls=(cert, key), grpc=protocol == "grpc") as receiver:
            extra = {"OTEL_EXPORTER_OTLP_TIMEOUT": "1000"}
            if trusted:
                extra["OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"] = ca
            settings = settings_for(receiver, protocol, **extra)
            assert settings.traces.endpoint.startswith("https://") and settings.traces.certificate == (
                ca if trusted else ""
            )
            installed = install(settings)
            await scripted_run(tmp_path / str(trusted), Telemetry(installed.tracer_provider))
            installed.shutdown(timeout_ms=5_000)
            if trusted:
                receiver.wait_for(lambda r: len(r.spans()) >= 7)
            else:
                assert receiver.spans() == [] and installed.dropped.of("traces") >= 7

"""Telemetry against Arize Phoenix: the scripted run of ``test_telemetry.py`` (two tool calls and a denied one)
exported over OTLP to a Phoenix the test session starts (``phoenix_server.py``), then read back with Phoenix's own
client: the tree, the attributes, the usage matching the session log, no prompt text unless opted in."""

from __future__ import annotations

import json
import uuid

import pytest

from drivetrain.telemetry.run import Telemetry
from drivetrain.telemetry.settings import TelemetryContent, TelemetrySettings
from drivetrain.telemetry.setup import install

from phoenix_server import Phoenix  # isort: skip
from test_telemetry import MODEL, PROMPT, USAGES, scripted_run  # isort: skip

SPANS = 1 + 3 + 3  # the run, three model requests, three calls


async def run_into_phoenix(tmp_path, phoenix: Phoenix, protocol: str, content: TelemetryContent | None = None):
    env = {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.grpc_url if protocol == "grpc" else phoenix.url,
        "OTEL_TRACES_EXPORT_INTERVAL": "100",
    }
    installed = install(TelemetrySettings.from_env(env))
    session_id = f"phoenix-{uuid.uuid4().hex[:12]}"
    telemetry = Telemetry(installed.tracer_provider, content=content or TelemetryContent())
    result, store = await scripted_run(tmp_path, telemetry, session_id)
    installed.shutdown(timeout_ms=5_000)
    return result, store, session_id, phoenix.spans(session_id, at_least=SPANS)


def named(spans: list[dict], prefix: str) -> list[dict]:
    return sorted((s for s in spans if s["name"].startswith(prefix)), key=lambda s: s["start_time"])


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_phoenix_reads_back_the_run_as_a_tree_with_the_session_logs_usage_and_no_prompt(
    tmp_path, phoenix, protocol
):
    result, store, session_id, spans = await run_into_phoenix(tmp_path, phoenix, protocol)
    assert result.subtype == "success"
    assert len(spans) == SPANS, [s["name"] for s in spans]
    [run] = named(spans, "invoke_agent")
    chats, tools = named(spans, "chat"), named(spans, "execute_tool")

    # the tree: one root, every request and call under it, in Phoenix's kinds
    assert run["parent_id"] is None and run["span_kind"] == "AGENT"
    assert {s["context"]["trace_id"] for s in spans} == {run["context"]["trace_id"]}
    assert all(s["parent_id"] == run["context"]["span_id"] for s in chats + tools)
    assert {s["span_kind"] for s in chats} == {"LLM"} and {s["span_kind"] for s in tools} == {"TOOL"}
    assert run["attributes"]["gen_ai.conversation.id"] == session_id
    assert run["attributes"]["drivetrain.result.subtype"] == "success"

    # the usage: each request's as the session log has it, and the run's total as the result has it
    turns = [r for r in store.read(session_id) if r["kind"] == "turn"]
    assert len(chats) == len(turns) == len(USAGES)
    for chat, turn in zip(chats, turns):
        attributes, usage = chat["attributes"], turn["usage"]
        assert chat["name"] == f"chat {MODEL}" and attributes["gen_ai.request.model"] == MODEL
        assert attributes["gen_ai.usage.output_tokens"] == usage["output_tokens"]
        assert attributes["gen_ai.usage.input_tokens"] == (
            usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
        )
        assert attributes["gen_ai.usage.cache_read.input_tokens"] == usage["cache_read_input_tokens"]
        assert attributes["llm.token_count.completion"] == usage["output_tokens"]  # what Phoenix shows as usage
        assert attributes["drivetrain.cost_usd"] == pytest.approx(turn["cost_usd"])
        assert attributes["gen_ai.response.finish_reasons"] == [turn["stop_reason"]]
    assert run["attributes"]["gen_ai.usage.output_tokens"] == result.usage.output_tokens
    assert run["attributes"]["drivetrain.cost_usd"] == pytest.approx(result.total_cost_usd)

    # the calls: two ran, allowed by a rule; one denied, an error span with who denied it
    calls = {s["attributes"]["gen_ai.tool.call.id"]: s for s in tools}
    assert set(calls) == {"toolu_1", "toolu_2", "toolu_3"}
    for ran in ("toolu_1", "toolu_3"):
        assert calls[ran]["name"] == "execute_tool lookup" and calls[ran]["status_code"] != "ERROR"
        assert calls[ran]["attributes"]["drivetrain.permission.decision"] == "allow"
    denied = calls["toolu_2"]
    assert denied["name"] == "execute_tool delete" and denied["status_code"] == "ERROR"
    assert denied["attributes"]["drivetrain.permission.decision"] == "deny"
    assert denied["attributes"]["drivetrain.permission.decided_by"] == "rule:deny(delete)"
    assert denied["attributes"]["error.type"] == "permission_denied"

    # no content: not the prompt, not a call's input or output
    everything = json.dumps(spans)
    assert "SECRET-PROMPT-WORDS" not in everything and PROMPT not in everything
    assert "value-of-alpha" not in everything and "gamma" not in everything


async def test_phoenix_shows_the_prompt_and_the_calls_content_when_opted_in(tmp_path, phoenix):
    content = TelemetryContent(prompts=True, tool_details=True, tool_content=True)
    _, _, _, spans = await run_into_phoenix(tmp_path, phoenix, "http/protobuf", content)
    [run] = named(spans, "invoke_agent")
    assert PROMPT in json.dumps(run["attributes"])
    first = next(s for s in spans if s["attributes"].get("gen_ai.tool.call.id") == "toolu_1")
    assert first["attributes"]["gen_ai.tool.call.result"] == "value-of-alpha"
    assert json.loads(first["attributes"]["gen_ai.tool.call.arguments"]) == {"key": "alpha"}

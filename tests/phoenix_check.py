"""The scripted run of ``test_telemetry.py`` exported to a real Arize Phoenix and read back through Phoenix's REST
API: the tree, the attributes, the usage, no prompt text.

Phoenix is not in the test extra: it pins ``anthropic<2`` (drivetrain runs on 2.x), installs 97 packages (850 MB)
and takes about 24 s to start on the project's 2-core machine. So this file is not collected with the suite (its
name is not ``test_*``: under CI's DRIVETRAIN_NO_SKIP its skip would fail); it runs by name, against a Phoenix
already up in an environment of its own: ``pip install arize-phoenix`` in another virtualenv, ``phoenix serve``, then
``DRIVETRAIN_PHOENIX_URL=http://127.0.0.1:6006 pytest -n 0 tests/phoenix_check.py``.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
import uuid

import pytest

from drivetrain.telemetry.run import Telemetry
from drivetrain.telemetry.settings import TelemetrySettings
from drivetrain.telemetry.setup import install

from test_telemetry import PROMPT, USAGES, scripted_run  # isort: skip

PHOENIX = os.environ.get("DRIVETRAIN_PHOENIX_URL", "")
pytestmark = pytest.mark.skipif(not PHOENIX, reason="needs a running Phoenix: DRIVETRAIN_PHOENIX_URL")


def phoenix_spans(session_id: str) -> list[dict]:
    with urllib.request.urlopen(f"{PHOENIX}/v1/projects/default/spans?limit=1000", timeout=10) as r:
        data = json.load(r)["data"]
    runs = [s for s in data if s["attributes"].get("session.id") == session_id]
    if not runs:
        return []
    trace_id = runs[0]["context"]["trace_id"]
    return [s for s in data if s["context"]["trace_id"] == trace_id]


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_phoenix_shows_the_run_as_a_tree_with_usage_and_no_prompt(tmp_path, protocol):
    endpoint = PHOENIX if protocol != "grpc" else os.environ.get("DRIVETRAIN_PHOENIX_GRPC_URL", "http://127.0.0.1:4317")
    env = {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
    }
    installed = install(TelemetrySettings.from_env(env))
    session_id = f"phoenix-{uuid.uuid4().hex[:8]}"
    result, store = await scripted_run(tmp_path, Telemetry(installed.tracer_provider), session_id)
    installed.shutdown(timeout_ms=5_000)
    deadline = time.monotonic() + 15
    while len(spans := phoenix_spans(session_id)) < 7 and time.monotonic() < deadline:
        time.sleep(0.3)
    by_name = {}
    for s in spans:
        by_name.setdefault(s["name"].split(" ")[0], []).append(s)
    [run] = by_name["invoke_agent"]
    assert run["parent_id"] is None and run["span_kind"] == "AGENT"
    assert len(by_name["chat"]) == 3 and len(by_name["execute_tool"]) == 3
    assert all(s["parent_id"] == run["context"]["span_id"] for s in by_name["chat"] + by_name["execute_tool"])
    turns = [r for r in store.read(session_id) if r["kind"] == "turn"]
    chats = sorted(by_name["chat"], key=lambda s: s["start_time"])
    assert [c["attributes"]["gen_ai.usage.output_tokens"] for c in chats] == [
        t["usage"]["output_tokens"] for t in turns
    ]
    assert [c["attributes"]["gen_ai.usage.output_tokens"] for c in chats] == [u["output_tokens"] for u in USAGES]
    denied = [s for s in by_name["execute_tool"] if s["attributes"]["drivetrain.permission.decision"] == "deny"]
    assert [s["name"] for s in denied] == ["execute_tool delete"] and denied[0]["status_code"] == "ERROR"
    assert "SECRET-PROMPT-WORDS" not in json.dumps(spans) and PROMPT not in json.dumps(spans)
    assert result.subtype == "success"

"""An interrupted CLI run's telemetry is sent before the process leaves: the run's span ends as failed (the
cancellation), with its session id, within the bounded wait."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from drivetrain.testing import ScriptedServer, respond, tool_call
from drivetrain.testing.otlp import OtlpReceiver

from test_telemetry_cli import cli_env  # isort: skip


def test_an_interrupted_run_still_sends_its_spans(tmp_path):
    steps = [respond([tool_call("Bash", {"command": "sleep 30"})])]  # interrupted while it sleeps
    with OtlpReceiver() as receiver, ScriptedServer(steps) as server:
        env = cli_env(
            tmp_path,
            server.url,
            {
                "DRIVETRAIN_ENABLE_TELEMETRY": "1",
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            },
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "drivetrain", "-p", "sleep", "--allowedTools", "Bash"],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 30
            while not list((tmp_path / "home").rglob("*.jsonl")) or not any(
                "intent" in p.read_text() for p in (tmp_path / "home").rglob("*.jsonl")
            ):  # the sleep has started
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=20)
        finally:
            proc.kill()
        assert proc.returncode == 130, err
        receiver.wait_for(lambda r: any(s.name.startswith("invoke_agent") for s in r.spans()))
    spans = {s.name: s for s in receiver.spans()}
    run = spans["invoke_agent drivetrain"]
    assert run.attributes["drivetrain.run.ending"] == "failed" and run.status_code == 2
    assert run.attributes["error.type"] == "CancelledError"
    assert spans["execute_tool Bash"].parent_id == run.span_id

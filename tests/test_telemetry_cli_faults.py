"""The CLI's telemetry when things go wrong: a collector that refuses connections neither fails the session nor
holds its end (what could not be delivered is said), and an interrupted run's spans are still sent before the
process leaves."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import cli_process
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from drivetrain.testing.otlp import OtlpReceiver

from test_telemetry_cli import cli, cli_env  # isort: skip


def refused_env(receiver: OtlpReceiver, **extra: str) -> dict[str, str]:
    return {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_LOGS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        **extra,
    }


def test_a_collector_that_refuses_connections_fails_nothing_and_the_loss_is_said(tmp_path):
    with OtlpReceiver(refuse=True) as receiver, ScriptedServer([reply("Fine.")]) as server:
        # each export gives up after 0.3 s, so the loss is known by the session's end
        env = refused_env(receiver, OTEL_EXPORTER_OTLP_TIMEOUT="300", DRIVETRAIN_OTEL_SHUTDOWN_TIMEOUT_MS="1500")
        proc = cli(tmp_path, server.url, "-p", "hello", env_extra=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Fine."
    assert "telemetry: not delivered:" in proc.stderr and "traces" in proc.stderr, proc.stderr


def test_the_end_of_a_session_waits_for_a_dead_collector_no_longer_than_the_shutdown_timeout(tmp_path):
    with OtlpReceiver(refuse=True) as receiver, ScriptedServer([reply("Fine.")]) as server:
        env = refused_env(receiver, DRIVETRAIN_OTEL_SHUTDOWN_TIMEOUT_MS="500")  # the export's own timeout: 10 s
        started = time.monotonic()
        proc = cli(tmp_path, server.url, "-p", "hello", env_extra=env)
        took = time.monotonic() - started
    assert proc.returncode == 0 and proc.stdout.strip() == "Fine.", proc.stderr
    assert took < 10, took  # the start (3-4 s here), the run, 0.5 s for the last batches; unbounded: 13 s and more


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
        proc = cli_process.Popen(
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

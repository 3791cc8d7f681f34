"""Claude Code's metrics configuration: the switches for the attributes every metric point and event carries
(``OTEL_METRICS_INCLUDE_SESSION_ID``, ``OTEL_METRICS_INCLUDE_VERSION``) and the ``prometheus`` metrics exporter,
scraped over HTTP as a Prometheus would."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from drivetrain.errors import ConfigError
from drivetrain.telemetry.names import version
from drivetrain.telemetry.run import Telemetry
from drivetrain.telemetry.settings import TelemetrySettings
from drivetrain.telemetry.setup import install

from test_telemetry import MODEL, scripted_run  # isort: skip


async def common_attributes(tmp_path) -> tuple[list[dict], list[dict]]:
    """A scripted run's metric points' and events' attributes, with the switches as the environment has them."""
    reader, logs = InMemoryMetricReader(), InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    telemetry = Telemetry(meter_provider=MeterProvider(metric_readers=[reader]), logger_provider=logger_provider)
    await scripted_run(tmp_path, telemetry)
    data = reader.get_metrics_data()
    assert data is not None
    points = [
        dict(p.attributes or {})
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        for p in m.data.data_points
    ]
    events = [dict(r.log_record.attributes or {}) for r in logs.get_finished_logs()]
    assert len(points) > 5 and len(events) > 5
    return points, events


async def test_points_and_events_carry_the_session_id_and_not_the_version_by_default(tmp_path):
    points, events = await common_attributes(tmp_path)
    assert all(a["session.id"] == "sess-otel" and "app.version" not in a for a in points + events)


async def test_the_switches_take_the_session_id_off_and_put_the_version_on(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_METRICS_INCLUDE_SESSION_ID", "false")
    monkeypatch.setenv("OTEL_METRICS_INCLUDE_VERSION", "true")
    points, events = await common_attributes(tmp_path)
    assert all("session.id" not in a and a["app.version"] == version() for a in points + events)


def test_the_cli_takes_the_switches_from_a_settings_files_env(tmp_path, monkeypatch):
    from drivetrain.cli.build import _telemetry

    monkeypatch.delenv("OTEL_METRICS_INCLUDE_VERSION", raising=False)
    env = {"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_METRICS_INCLUDE_VERSION": "1"}
    telemetry = _telemetry(tmp_path, [(tmp_path / "settings.json", {"env": env})])
    assert telemetry is not None and telemetry.common is not None and telemetry.common.version


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def prometheus_settings(port: int) -> TelemetrySettings:
    pytest.importorskip("opentelemetry.exporter.prometheus", reason="pip install 'drivetrain[otel]'")
    env = {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(port),
    }
    return TelemetrySettings.from_env(env)


def scrape(port: int) -> dict[str, float]:
    """The samples a Prometheus would scrape: ``name{labels}`` → value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


async def test_prometheus_serves_the_sessions_metrics_to_scrape_until_it_ends(tmp_path):
    port = free_port()
    installed = install(prometheus_settings(port))
    try:
        result, _ = await scripted_run(tmp_path, Telemetry(meter_provider=installed.meter_provider))
        samples = scrape(port)
    finally:
        installed.shutdown(timeout_ms=5_000)
    output = [v for k, v in samples.items() if k.startswith("claude_code_token_usage") and 'type="output"' in k]
    assert output == [result.usage.output_tokens]
    [cost] = [v for k, v in samples.items() if k.startswith("claude_code_cost_usage") and f'model="{MODEL}"' in k]
    assert cost == pytest.approx(result.total_cost_usd)
    assert any(k.startswith("claude_code_session_count") and 'session_id="sess-otel"' in k for k in samples)
    with pytest.raises(urllib.error.URLError):  # ended: the port is closed
        scrape(port)


def test_a_port_in_use_is_named_and_leaves_telemetry_off(tmp_path, capsys):
    from drivetrain.cli.telemetry import start_telemetry

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = prometheus_settings(port)
        with pytest.raises(ConfigError, match=f"127.0.0.1:{port}"):
            install(settings)
        env = {
            "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
            "OTEL_METRICS_EXPORTER": "prometheus",
            "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
            "OTEL_EXPORTER_PROMETHEUS_PORT": str(port),
        }
        assert start_telemetry(tmp_path, env) is None
    assert f"127.0.0.1:{port}" in capsys.readouterr().err

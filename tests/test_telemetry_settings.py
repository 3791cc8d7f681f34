"""The telemetry variables read as Claude Code reads them: off by default, either switch, the standard OTEL_*
variables with per-signal ones over the general ones, and a settings file's "env" under the environment."""

from __future__ import annotations

import pytest

from drivetrain.errors import ConfigError
from drivetrain.telemetry.settings import CommonAttributes, TelemetryContent, TelemetrySettings, telemetry_env

ON = {"CLAUDE_CODE_ENABLE_TELEMETRY": "1"}


def test_off_by_default_and_without_a_switch_the_exporters_do_nothing():
    assert not TelemetrySettings.from_env({}).enabled
    s = TelemetrySettings.from_env({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317"})
    assert not s.enabled and not s.exporting


@pytest.mark.parametrize("switch", ["DRIVETRAIN_ENABLE_TELEMETRY", "CLAUDE_CODE_ENABLE_TELEMETRY"])
def test_either_switch_turns_it_on_but_nothing_is_exported_until_an_exporter_is_chosen(switch):
    s = TelemetrySettings.from_env({switch: "true"})
    assert s.enabled and not s.exporting
    assert TelemetrySettings.from_env({switch: "1", "OTEL_METRICS_EXPORTER": "console"}).exporting
    assert not TelemetrySettings.from_env({switch: "0", "OTEL_METRICS_EXPORTER": "console"}).enabled


def test_endpoints_by_protocol_with_the_signal_paths_for_http_and_per_signal_overrides():
    env = {**ON, "OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "otlp", "OTEL_LOGS_EXPORTER": "otlp"}
    grpc = TelemetrySettings.from_env(env)
    assert grpc.traces.protocol == "grpc" and grpc.traces.endpoint == "http://localhost:4317"
    http = TelemetrySettings.from_env(
        {
            **env,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector.example:4318/",
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "https://logs.example/ingest",
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json",
        }
    )
    assert http.traces.endpoint == "https://collector.example:4318/v1/traces"
    assert http.metrics.endpoint == "https://collector.example:4318/v1/metrics"
    assert http.metrics.protocol == "http/json" and http.traces.protocol == "http/protobuf"
    assert http.logs.endpoint == "https://logs.example/ingest"  # a signal's own endpoint is used as it is
    default_http = TelemetrySettings.from_env({**env, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    assert default_http.logs.endpoint == "http://localhost:4318/v1/logs"


def test_headers_resource_intervals_and_content_switches():
    s = TelemetrySettings.from_env(
        {
            **ON,
            "OTEL_TRACES_EXPORTER": "otlp,console",
            "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20abc, x-team=core",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-team=traces",
            "OTEL_RESOURCE_ATTRIBUTES": "service.name=my-agent,department=eng",
            "OTEL_METRIC_EXPORT_INTERVAL": "10000",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
            "OTEL_LOG_USER_PROMPTS": "1",
            "OTEL_LOG_TOOL_CONTENT": "true",
        }
    )
    assert s.traces.exporters == ("otlp", "console")
    assert s.traces.headers == {"Authorization": "Bearer abc", "x-team": "traces"}
    assert s.metrics.headers == {"Authorization": "Bearer abc", "x-team": "core"}
    assert s.service_name == "my-agent" and s.resource["department"] == "eng"
    assert s.metrics.interval_ms == 10_000 and s.logs.interval_ms == 5_000 and s.traces.timeout_s == 2.5
    assert s.content == TelemetryContent(prompts=True, tool_details=False, tool_content=True)
    assert TelemetrySettings.from_env({**ON, "OTEL_TRACES_EXPORTER": "none,otlp"}).traces.exporters == ()


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("OTEL_TRACES_EXPORTER", "zipkin", "otlp, console \\(or none\\)"),
        ("OTEL_LOGS_EXPORTER", "prometheus", "otlp, console \\(or none\\)"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http", "grpc, http/protobuf, http/json"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign", "not key=value"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "soon", "whole number"),
        ("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "lowmemory", "delta or cumulative"),
    ],
)
def test_a_value_that_cannot_be_used_is_named(name, value, said):
    with pytest.raises(ConfigError, match=said):
        TelemetrySettings.from_env({**ON, "OTEL_TRACES_EXPORTER": "otlp", name: value})


def test_a_settings_files_env_gives_the_variables_under_the_environments_own(tmp_path):
    user = (tmp_path / "user.json", {"env": {"CLAUDE_CODE_ENABLE_TELEMETRY": 1, "OTEL_METRICS_EXPORTER": "console"}})
    project = (tmp_path / "project.json", {"env": {"OTEL_METRICS_EXPORTER": "otlp", "EDITOR": "vim"}})
    env = telemetry_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://mine:4317", "HOME": "/root"}, [project, user])
    assert env == {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
        "OTEL_METRICS_EXPORTER": "otlp",  # the project's file over the user's
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://mine:4317",
    }  # only telemetry's variables: the others are not this part's to set
    over = telemetry_env({"OTEL_METRICS_EXPORTER": "none"}, [project, user])
    assert over["OTEL_METRICS_EXPORTER"] == "none"  # the environment over every file
    with pytest.raises(ConfigError, match="must be an object"):
        telemetry_env({}, [(tmp_path / "bad.json", {"env": ["OTEL_METRICS_EXPORTER=otlp"]})])


def test_the_collectors_headers_are_kept_from_tools_like_any_credential():
    from drivetrain.host.procs import child_env, withheld

    for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_LOGS_HEADERS"):
        assert withheld(name)
    assert not withheld("OTEL_EXPORTER_OTLP_ENDPOINT") and not withheld("OTEL_SERVICE_NAME")
    env = child_env(environ={"OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20t0ken", "PATH": "/bin"})
    assert env == {"PATH": "/bin"}


def test_tls_files_per_signal_over_the_general_ones():
    s = TelemetrySettings.from_env(
        {
            **ON,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_LOGS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_CERTIFICATE": "/etc/ca.pem",
            "OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE": "/etc/logs-ca.pem",
            "OTEL_EXPORTER_OTLP_CLIENT_KEY": "/etc/client.key",
            "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": "/etc/client.pem",
        }
    )
    assert (s.traces.certificate, s.traces.client_key, s.traces.client_certificate) == (
        "/etc/ca.pem",
        "/etc/client.key",
        "/etc/client.pem",
    )
    assert (s.logs.certificate, s.logs.client_certificate) == ("/etc/logs-ca.pem", "")


def test_the_common_attributes_switches_as_claude_codes_session_id_on_and_version_off_by_default():
    assert TelemetrySettings.from_env(ON).common == CommonAttributes(session_id=True, version=False)
    assert TelemetrySettings.from_env({}).common == CommonAttributes()  # read when off too, as content is
    s = TelemetrySettings.from_env(
        {**ON, "OTEL_METRICS_INCLUDE_SESSION_ID": "false", "OTEL_METRICS_INCLUDE_VERSION": "true"}
    )
    assert s.common == CommonAttributes(session_id=False, version=True)
    # as Claude Code reads them: set, a switch is on only for a truthy value
    assert not CommonAttributes.from_env({"OTEL_METRICS_INCLUDE_SESSION_ID": "no"}).session_id
    assert CommonAttributes.from_env({"OTEL_METRICS_INCLUDE_SESSION_ID": "1"}).session_id


def test_prometheus_is_a_metrics_exporter_served_where_the_opentelemetry_variables_say():
    s = TelemetrySettings.from_env({**ON, "OTEL_METRICS_EXPORTER": "otlp,prometheus"})
    assert s.metrics.exporters == ("otlp", "prometheus") and s.exporting
    assert (s.prometheus_host, s.prometheus_port) == ("localhost", 9464)  # OpenTelemetry's defaults
    s = TelemetrySettings.from_env(
        {**ON, "OTEL_EXPORTER_PROMETHEUS_HOST": "0.0.0.0", "OTEL_EXPORTER_PROMETHEUS_PORT": "9999"}
    )
    assert (s.prometheus_host, s.prometheus_port) == ("0.0.0.0", 9999)
    with pytest.raises(ConfigError, match="otlp, console, prometheus"):
        TelemetrySettings.from_env({**ON, "OTEL_METRICS_EXPORTER": "statsd"})

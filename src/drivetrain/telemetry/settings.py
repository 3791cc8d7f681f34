"""What the telemetry variables say, read as Claude Code reads them: off unless ``DRIVETRAIN_ENABLE_TELEMETRY`` (or
``CLAUDE_CODE_ENABLE_TELEMETRY``) is set; exporters, endpoints, headers, intervals from the standard ``OTEL_*``
variables; the same variables may come from the settings files' ``"env"`` (the process environment wins).

Pure data from a mapping: nothing here imports the OpenTelemetry SDK (``setup.py`` does, when telemetry is on).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args
from urllib.parse import unquote

from drivetrain.errors import ConfigError
from drivetrain.jsontypes import JsonObject

Signal = Literal["traces", "metrics", "logs"]
SIGNALS: tuple[Signal, ...] = get_args(Signal)
Protocol = Literal["grpc", "http/protobuf", "http/json"]
PROTOCOLS: tuple[Protocol, ...] = get_args(Protocol)
Exporter = Literal["otlp", "console", "prometheus"]  # prometheus: metrics only
Temporality = Literal["delta", "cumulative"]

ENABLE = ("DRIVETRAIN_ENABLE_TELEMETRY", "CLAUDE_CODE_ENABLE_TELEMETRY")
# the variables' prefixes and names a settings file's "env" may give telemetry (the others stay the process's own)
SETTINGS_NAMES = (*ENABLE, "OTEL_", "DRIVETRAIN_OTEL_", "CLAUDE_CODE_OTEL_")
# OTLP paths appended to OTEL_EXPORTER_OTLP_ENDPOINT for the HTTP protocols (a per-signal endpoint is used as is)
HTTP_PATHS: dict[Signal, str] = {"traces": "v1/traces", "metrics": "v1/metrics", "logs": "v1/logs"}
EXPORTER_VARS: dict[Signal, str] = {
    "traces": "OTEL_TRACES_EXPORTER",
    "metrics": "OTEL_METRICS_EXPORTER",
    "logs": "OTEL_LOGS_EXPORTER",
}
# how often a batch goes out (ms), and Claude Code's defaults
INTERVAL_VARS: dict[Signal, tuple[str, int]] = {
    "traces": ("OTEL_TRACES_EXPORT_INTERVAL", 5_000),
    "metrics": ("OTEL_METRIC_EXPORT_INTERVAL", 60_000),
    "logs": ("OTEL_LOGS_EXPORT_INTERVAL", 5_000),
}
INSTALL_HINT = "pip install 'drivetrain[otel]'"


@dataclass(frozen=True)
class TelemetryContent:
    """What content leaves with the telemetry, besides names, counts and times: nothing unless opted in."""

    prompts: bool = False  # OTEL_LOG_USER_PROMPTS: the user's prompt text
    tool_details: bool = False  # OTEL_LOG_TOOL_DETAILS: a tool call's input
    tool_content: bool = False  # OTEL_LOG_TOOL_CONTENT: a tool call's output

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TelemetryContent:
        return cls(
            truthy(env.get("OTEL_LOG_USER_PROMPTS")),
            truthy(env.get("OTEL_LOG_TOOL_DETAILS")),
            truthy(env.get("OTEL_LOG_TOOL_CONTENT")),
        )


@dataclass(frozen=True)
class CommonAttributes:
    """Which attributes every metric point and event carries besides its own, as Claude Code's switches for the
    metrics' cardinality say (``user.account_uuid``, its third, has no counterpart: drivetrain has no account)."""

    session_id: bool = True  # OTEL_METRICS_INCLUDE_SESSION_ID: session.id
    version: bool = False  # OTEL_METRICS_INCLUDE_VERSION: app.version

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> CommonAttributes:
        def switch(name: str, default: bool) -> bool:
            return default if env.get(name) is None else truthy(env.get(name))

        return cls(switch("OTEL_METRICS_INCLUDE_SESSION_ID", True), switch("OTEL_METRICS_INCLUDE_VERSION", False))


@dataclass(frozen=True)
class Destination:
    """Where one signal goes: its exporters, and for otlp the protocol, endpoint, headers and timeout."""

    exporters: tuple[Exporter, ...] = ()
    protocol: Protocol = "grpc"
    endpoint: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    interval_ms: int = 5_000
    # TLS: the CA certificate that signs the collector's, and for mutual TLS the client's key and certificate (paths)
    certificate: str = ""
    client_key: str = ""
    client_certificate: str = ""


@dataclass(frozen=True)
class TelemetrySettings:
    enabled: bool = False
    traces: Destination = Destination()
    metrics: Destination = Destination()
    logs: Destination = Destination()
    content: TelemetryContent = TelemetryContent()
    common: CommonAttributes = CommonAttributes()
    service_name: str = "drivetrain"
    resource: dict[str, str] = field(default_factory=dict)  # OTEL_RESOURCE_ATTRIBUTES
    max_queue_size: int = 2048  # OTEL_BSP_MAX_QUEUE_SIZE / OTEL_BLRP_MAX_QUEUE_SIZE: past it, spans are dropped
    temporality: Temporality = "delta"  # OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE, Claude Code's default
    shutdown_timeout_ms: int = 2_000  # how long the end of a session may wait for the last batches
    # where the prometheus metrics exporter serves /metrics (OpenTelemetry's variables and defaults)
    prometheus_host: str = "localhost"
    prometheus_port: int = 9464

    @property
    def exporting(self) -> bool:
        return self.enabled and any(d.exporters for d in (self.traces, self.metrics, self.logs))

    def destination(self, signal: Signal) -> Destination:
        return {"traces": self.traces, "metrics": self.metrics, "logs": self.logs}[signal]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TelemetrySettings:
        """The settings the variables in ``env`` give. Raises ``ConfigError`` for a value that cannot be used."""
        if not any(truthy(env.get(name)) for name in ENABLE):
            return cls(content=TelemetryContent.from_env(env), common=CommonAttributes.from_env(env))
        resource = parse_pairs(env.get("OTEL_RESOURCE_ATTRIBUTES", ""), "OTEL_RESOURCE_ATTRIBUTES")
        temporality = env.get("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta").strip().lower()
        if temporality not in ("delta", "cumulative"):
            raise ConfigError(
                f"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE={temporality!r}: use delta or cumulative"
            )
        return cls(
            enabled=True,
            traces=_destination(env, "traces"),
            metrics=_destination(env, "metrics"),
            logs=_destination(env, "logs"),
            content=TelemetryContent.from_env(env),
            common=CommonAttributes.from_env(env),
            service_name=env.get("OTEL_SERVICE_NAME") or resource.get("service.name") or "drivetrain",
            resource=resource,
            max_queue_size=_int(env, "OTEL_BSP_MAX_QUEUE_SIZE", 2048),
            temporality="delta" if temporality == "delta" else "cumulative",
            shutdown_timeout_ms=_int(
                env, "DRIVETRAIN_OTEL_SHUTDOWN_TIMEOUT_MS", _int(env, "CLAUDE_CODE_OTEL_SHUTDOWN_TIMEOUT_MS", 2_000)
            ),
            prometheus_host=env.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() or "localhost",
            prometheus_port=_int(env, "OTEL_EXPORTER_PROMETHEUS_PORT", 9464),
        )


def _destination(env: Mapping[str, str], signal: Signal) -> Destination:
    var = EXPORTER_VARS[signal]
    names = [n.strip().lower() for n in env.get(var, "").split(",") if n.strip()]
    exporters: list[Exporter] = []
    for name in names:
        if name == "none":
            return Destination()
        if name == "otlp":
            exporters.append("otlp")
        elif name == "console":
            exporters.append("console")
        elif name == "prometheus" and signal == "metrics":
            exporters.append("prometheus")
        else:
            also = ", prometheus" if signal == "metrics" else ""
            raise ConfigError(f"{var}={name!r}: drivetrain exports with otlp, console{also} (or none)")
    upper = signal.upper()
    protocol = (
        env.get(f"OTEL_EXPORTER_OTLP_{upper}_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    ).strip()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"OTLP protocol {protocol!r}: use one of {', '.join(PROTOCOLS)}")
    endpoint = env.get(f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT", "").strip()
    if not endpoint:
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        if protocol == "grpc":
            endpoint = base or "http://localhost:4317"
        else:
            endpoint = f"{(base or 'http://localhost:4318').rstrip('/')}/{HTTP_PATHS[signal]}"
    headers = {
        **parse_pairs(env.get("OTEL_EXPORTER_OTLP_HEADERS", ""), "OTEL_EXPORTER_OTLP_HEADERS"),
        **parse_pairs(env.get(f"OTEL_EXPORTER_OTLP_{upper}_HEADERS", ""), f"OTEL_EXPORTER_OTLP_{upper}_HEADERS"),
    }
    timeout_ms = _int(env, f"OTEL_EXPORTER_OTLP_{upper}_TIMEOUT", _int(env, "OTEL_EXPORTER_OTLP_TIMEOUT", 10_000))
    interval_var, interval_default = INTERVAL_VARS[signal]

    def tls(name: str) -> str:
        return (env.get(f"OTEL_EXPORTER_OTLP_{upper}_{name}") or env.get(f"OTEL_EXPORTER_OTLP_{name}") or "").strip()

    return Destination(
        tuple(dict.fromkeys(exporters)),
        "grpc" if protocol == "grpc" else "http/protobuf" if protocol == "http/protobuf" else "http/json",
        endpoint,
        headers,
        timeout_ms / 1000,
        _int(env, interval_var, interval_default),
        tls("CERTIFICATE"),
        tls("CLIENT_KEY"),
        tls("CLIENT_CERTIFICATE"),
    )


def telemetry_env(environ: Mapping[str, str], settings_files: Iterable[tuple[Path, JsonObject]]) -> dict[str, str]:
    """The telemetry variables: the settings files' ``"env"`` (most specific file first, as ``load_settings``
    lists them), under the process environment's own."""
    merged: dict[str, str] = {}
    for path, data in reversed(list(settings_files)):  # the user's file first: a project's file overrides it
        section = data.get("env", {})
        if not isinstance(section, dict) or not all(isinstance(v, (str, int, float, bool)) for v in section.values()):
            raise ConfigError(f'In {path}: "env" must be an object of variable names to strings')
        merged.update({k: _string(v) for k, v in section.items() if k.startswith(SETTINGS_NAMES)})
    merged.update({k: v for k, v in environ.items() if k.startswith(SETTINGS_NAMES)})
    return merged


def truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


def parse_pairs(text: str, source: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` (values percent-decoded), as OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES are."""
    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{source}: {item.strip()!r} is not key=value")
        out[unquote(key.strip())] = unquote(value.strip())
    return out


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r}: a whole number is needed") from None
    if value < 0:
        raise ConfigError(f"{name}={text!r}: a number of at least 0 is needed")
    return value


def _string(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)

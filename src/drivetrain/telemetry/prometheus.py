"""The ``prometheus`` metrics exporter (``OTEL_METRICS_EXPORTER=prometheus``), as Claude Code has it: the session's
metrics served for a Prometheus to scrape, at ``http://OTEL_EXPORTER_PROMETHEUS_HOST:OTEL_EXPORTER_PROMETHEUS_PORT
/metrics`` while the process lives. Imported only when that exporter is chosen (``export.py``)."""

from __future__ import annotations

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from prometheus_client import CollectorRegistry, start_http_server

from drivetrain.errors import ConfigError
from drivetrain.telemetry.settings import TelemetrySettings


class ServedMetricReader(PrometheusMetricReader):
    """OpenTelemetry's Prometheus reader on a registry of its own (not prometheus_client's global one, so two
    sessions in a process never mix), with the HTTP server that serves it; stopping the reader stops the server."""

    def __init__(self, host: str, port: int):
        registry = CollectorRegistry()
        super().__init__(registry=registry)
        try:
            self.server, _ = start_http_server(port, host, registry=registry)
        except OSError as e:
            super().shutdown()
            raise ConfigError(
                f"OTEL_METRICS_EXPORTER=prometheus: cannot serve the metrics on {host}:{port} ({e.strerror or e}): "
                "set OTEL_EXPORTER_PROMETHEUS_PORT (and _HOST)"
            ) from None

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        super().shutdown(timeout_millis, **kwargs)


def prometheus_reader(settings: TelemetrySettings) -> ServedMetricReader:
    return ServedMetricReader(settings.prometheus_host, settings.prometheus_port)

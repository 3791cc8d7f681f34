"""OTLP over HTTP with JSON bodies (``OTEL_EXPORTER_OTLP_PROTOCOL=http/json``), which the Python SDK has no exporter
for: the official protobuf messages, encoded by the SDK's own encoders, written as OTLP/JSON (the protobuf JSON
mapping, with trace and span ids as hex rather than base64) and posted with the standard library."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import AggregationTemporality, MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from drivetrain.jsontypes import JsonValue
from drivetrain.telemetry.settings import Destination

ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})


def otlp_json(message: Message) -> bytes:
    """An OTLP request message as OTLP/JSON."""
    data: JsonValue = MessageToDict(message, use_integers_for_enums=True)
    return json.dumps(_hex_ids(data), separators=(",", ":")).encode()


def _hex_ids(value: JsonValue) -> JsonValue:
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v).hex() if k in ID_FIELDS and isinstance(v, str) else _hex_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


class JsonPoster:
    def __init__(self, d: Destination):
        self.endpoint, self.timeout_s = d.endpoint, d.timeout_s
        self.headers = {**d.headers, "Content-Type": "application/json"}
        self.tls: ssl.SSLContext | None = None
        if d.endpoint.startswith("https://"):
            self.tls = ssl.create_default_context(cafile=d.certificate or None)
            if d.client_certificate:
                self.tls.load_cert_chain(d.client_certificate, d.client_key or None)

    def post(self, body: bytes) -> bool:
        request = urllib.request.Request(self.endpoint, body, self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self.tls) as response:
                return 200 <= int(response.status) < 300
        except (urllib.error.URLError, OSError, ValueError):
            return False  # the collector is down or refused the batch: the batch is dropped (and counted)


class JsonSpanExporter(SpanExporter):
    def __init__(self, d: Destination):
        self._poster = JsonPoster(d)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        ok = self._poster.post(otlp_json(encode_spans(spans)))
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE


class JsonMetricExporter(MetricExporter):
    def __init__(self, d: Destination, temporality: dict[type, AggregationTemporality]):
        super().__init__(preferred_temporality=temporality)
        self._poster = JsonPoster(d)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> MetricExportResult:
        ok = self._poster.post(otlp_json(encode_metrics(metrics_data)))
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        pass


class JsonLogExporter(LogRecordExporter):
    def __init__(self, d: Destination):
        self._poster = JsonPoster(d)

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        ok = self._poster.post(otlp_json(encode_logs(batch)))
        return LogRecordExportResult.SUCCESS if ok else LogRecordExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        pass

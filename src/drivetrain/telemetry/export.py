"""The OpenTelemetry SDK's providers for ``TelemetrySettings``: a tracer, a meter and a logger provider, each
exporting in the background (a batch processor or a periodic reader on a thread of its own, with a bounded queue),
so a collector that is down or slow costs a run nothing but the spans and records it drops, which are counted
(``Dropped``, exported as ``drivetrain.telemetry.dropped``). Imported only when telemetry is on (``setup.py``).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict

import requests
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    ConsoleLogRecordExporter,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    ConsoleMetricExporter,
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter, SpanExportResult

from drivetrain.errors import ConfigError
from drivetrain.telemetry.names import version
from drivetrain.telemetry.settings import INSTALL_HINT, Destination, Signal, TelemetrySettings

Reason = Literal["export_failed", "queue_full"]


class GrpcSecurity(TypedDict, total=False):
    insecure: bool
    credentials: object  # grpc.ChannelCredentials (grpc has no type information)


class HttpTls(TypedDict, total=False):
    certificate_file: str | None
    client_key_file: str | None
    client_certificate_file: str | None
    session: requests.Session


@dataclass
class Dropped:
    """What telemetry could not deliver, by signal and why: a collector that is down makes these grow, never the
    run slower."""

    counts: dict[tuple[Signal, Reason], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, signal: Signal, reason: Reason, n: int) -> None:
        with self._lock:
            self.counts[signal, reason] = self.counts.get((signal, reason), 0) + n

    def of(self, signal: Signal) -> int:
        with self._lock:
            return sum(n for (s, _), n in self.counts.items() if s == signal)

    def observe(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            items = list(self.counts.items())
        return [Observation(n, {"signal": s, "reason": r}) for (s, r), n in items]


@dataclass
class Installed:
    """The providers telemetry exports through; ``shutdown`` sends what is left, waiting at most its timeout."""

    settings: TelemetrySettings
    tracer_provider: TracerProvider | None
    meter_provider: MeterProvider | None
    logger_provider: LoggerProvider | None
    dropped: Dropped

    def shutdown(self, timeout_ms: int | None = None) -> None:
        """Flush and close every provider in a thread waited for at most ``timeout_ms``: a collector that does not
        answer never holds the process."""
        timeout = self.settings.shutdown_timeout_ms if timeout_ms is None else timeout_ms
        providers = [p for p in (self.tracer_provider, self.meter_provider, self.logger_provider) if p is not None]

        def close() -> None:
            for p in providers:
                try:
                    p.shutdown()
                except Exception:  # a failing exporter must not fail the session's end
                    pass

        closing = threading.Thread(target=close, name="drivetrain-telemetry-shutdown", daemon=True)
        closing.start()
        closing.join(timeout / 1000)


def install(settings: TelemetrySettings) -> Installed:
    # failures are counted (Dropped); the SDK's own warning on every failed batch would fill the terminal
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
    resource = Resource.create(
        {"service.name": settings.service_name, "service.version": version(), **settings.resource}
    )
    dropped = Dropped()
    meters = _meter_provider(settings, resource, dropped)
    if meters is not None:
        meters.get_meter("drivetrain").create_observable_counter(
            "drivetrain.telemetry.dropped", [dropped.observe], unit="1", description="Spans and records not delivered"
        )
    return Installed(
        settings,
        _tracer_provider(settings, resource, dropped),
        meters,
        _logger_provider(settings, resource, dropped),
        dropped,
    )


# ---------------------------------------------------------------- traces


def _tracer_provider(settings: TelemetrySettings, resource: Resource, dropped: Dropped) -> TracerProvider | None:
    d = settings.traces
    if not d.exporters:
        return None
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)  # Installed.shutdown bounds the wait
    for name in d.exporters:
        exporter = ConsoleSpanExporter(out=sys.stderr) if name == "console" else _otlp_spans(d)
        provider.add_span_processor(CountedSpanProcessor(exporter, dropped, settings.max_queue_size, d.interval_ms))
    return provider


def _otlp_spans(d: Destination) -> SpanExporter:
    if d.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        return GrpcSpans(endpoint=d.endpoint, headers=d.headers, timeout=d.timeout_s, **_grpc_security(d))
    if d.protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

        return HttpSpans(endpoint=d.endpoint, headers=d.headers, timeout=d.timeout_s, **_http_tls(d))
    from drivetrain.telemetry.otlp_json import JsonSpanExporter

    return JsonSpanExporter(d)


class Queue:
    """What a batch processor holds and has not exported: past its size, each new item pushes out the oldest (the
    SDK drops it silently), and that is counted."""

    def __init__(self, signal: Signal, dropped: Dropped, size: int):
        self.signal, self.dropped, self.size = signal, dropped, size
        self._held, self._lock = 0, threading.Lock()

    def put(self) -> None:
        with self._lock:
            if self._held >= self.size:
                self.dropped.add(self.signal, "queue_full", 1)
            else:
                self._held += 1

    def taken(self, n: int) -> None:
        """A batch of ``n`` is out of the queue, on its way to the exporter."""
        with self._lock:
            self._held = max(0, self._held - n)

    def lost(self, n: int) -> None:
        self.dropped.add(self.signal, "export_failed", n)


class CountedSpanExporter(SpanExporter):
    def __init__(self, inner: SpanExporter, queue: Queue):
        self.inner, self.queue = inner, queue

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.queue.taken(len(spans))
        try:
            result = self.inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self.queue.lost(len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


class CountedSpanProcessor(BatchSpanProcessor):
    """The SDK's batch processor, counting what its full queue drops and what its exporter could not send."""

    def __init__(self, exporter: SpanExporter, dropped: Dropped, max_queue_size: int, interval_ms: int):
        self.queue = Queue("traces", dropped, max_queue_size)
        super().__init__(
            CountedSpanExporter(exporter, self.queue),
            max_queue_size=max_queue_size,
            schedule_delay_millis=interval_ms,
            max_export_batch_size=min(512, max_queue_size),
        )

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:  # what the SDK queues
            self.queue.put()
        super().on_end(span)


# ---------------------------------------------------------------- metrics


def _temporality(settings: TelemetrySettings) -> dict[type, AggregationTemporality]:
    delta = AggregationTemporality.DELTA if settings.temporality == "delta" else AggregationTemporality.CUMULATIVE
    cumulative = AggregationTemporality.CUMULATIVE
    return {
        Counter: delta,
        Histogram: delta,
        ObservableCounter: delta,
        UpDownCounter: cumulative,
        ObservableUpDownCounter: cumulative,
        ObservableGauge: cumulative,
    }


def _meter_provider(settings: TelemetrySettings, resource: Resource, dropped: Dropped) -> MeterProvider | None:
    d = settings.metrics
    if not d.exporters:
        return None
    temporality = _temporality(settings)
    readers: list[MetricReader] = []
    for name in d.exporters:
        if name == "prometheus":  # read when scraped, not pushed
            readers.append(_prometheus_reader(settings))
            continue
        exporter = (
            ConsoleMetricExporter(out=sys.stderr, preferred_temporality=temporality)
            if name == "console"
            else _otlp_metrics(d, temporality)
        )
        readers.append(
            PeriodicExportingMetricReader(
                CountedMetricExporter(exporter, dropped), export_interval_millis=d.interval_ms
            )
        )
    return MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)


def _prometheus_reader(settings: TelemetrySettings) -> MetricReader:
    try:
        from drivetrain.telemetry.prometheus import prometheus_reader
    except ImportError as e:  # an SDK installed without it: the otel extra has it
        raise ConfigError(
            f"OTEL_METRICS_EXPORTER=prometheus needs the OpenTelemetry Prometheus exporter ({e.name}): {INSTALL_HINT}"
        ) from None
    return prometheus_reader(settings)


def _otlp_metrics(d: Destination, temporality: dict[type, AggregationTemporality]) -> MetricExporter:
    if d.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics

        return GrpcMetrics(
            endpoint=d.endpoint,
            headers=d.headers,
            timeout=d.timeout_s,
            preferred_temporality=temporality,
            **_grpc_security(d),
        )
    if d.protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics

        return HttpMetrics(
            endpoint=d.endpoint, headers=d.headers, timeout=d.timeout_s, preferred_temporality=temporality
        )
    from drivetrain.telemetry.otlp_json import JsonMetricExporter

    return JsonMetricExporter(d, temporality)


class CountedMetricExporter(MetricExporter):
    """An exporter that counts the exports that did not go out (a metric export is the whole state, not a part)."""

    def __init__(self, inner: MetricExporter, dropped: Dropped):
        super().__init__(
            preferred_temporality=inner._preferred_temporality,  # the reader reads them from its exporter
            preferred_aggregation=inner._preferred_aggregation,
        )
        self.inner, self.dropped = inner, dropped

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> MetricExportResult:
        try:
            result = self.inner.export(metrics_data, timeout_millis=timeout_millis)
        except Exception:
            result = MetricExportResult.FAILURE
        if result is not MetricExportResult.SUCCESS:
            self.dropped.add("metrics", "export_failed", 1)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis)


# ---------------------------------------------------------------- logs (Claude Code's events)


def _logger_provider(settings: TelemetrySettings, resource: Resource, dropped: Dropped) -> LoggerProvider | None:
    d = settings.logs
    if not d.exporters:
        return None
    provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    for name in d.exporters:
        exporter = ConsoleLogRecordExporter(out=sys.stderr) if name == "console" else _otlp_logs(d)
        provider.add_log_record_processor(
            CountedLogProcessor(exporter, dropped, settings.max_queue_size, d.interval_ms)
        )
    return provider


def _otlp_logs(d: Destination) -> LogRecordExporter:
    if d.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogs

        return GrpcLogs(endpoint=d.endpoint, headers=d.headers, timeout=d.timeout_s, **_grpc_security(d))
    if d.protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs

        return HttpLogs(endpoint=d.endpoint, headers=d.headers, timeout=d.timeout_s, **_http_tls(d))
    from drivetrain.telemetry.otlp_json import JsonLogExporter

    return JsonLogExporter(d)


class CountedLogExporter(LogRecordExporter):
    def __init__(self, inner: LogRecordExporter, queue: Queue):
        self.inner, self.queue = inner, queue

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        self.queue.taken(len(batch))
        try:
            result = self.inner.export(batch)
        except Exception:
            result = LogRecordExportResult.FAILURE
        if result is not LogRecordExportResult.SUCCESS:
            self.queue.lost(len(batch))
        return result

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.inner.shutdown()  # type: ignore[no-untyped-call]  # the SDK's base declares no types here


class CountedLogProcessor(BatchLogRecordProcessor):
    def __init__(self, exporter: LogRecordExporter, dropped: Dropped, max_queue_size: int, interval_ms: int):
        self.queue = Queue("logs", dropped, max_queue_size)
        super().__init__(
            CountedLogExporter(exporter, self.queue),
            max_queue_size=max_queue_size,
            schedule_delay_millis=interval_ms,
            max_export_batch_size=min(512, max_queue_size),
        )

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        self.queue.put()
        super().on_emit(log_record)


def _grpc_security(d: Destination) -> GrpcSecurity:
    """A plain channel for an ``http://`` endpoint; TLS with the given CA and client certificate otherwise."""
    if not (d.certificate or d.client_key or d.client_certificate):
        return {"insecure": d.endpoint.startswith("http://")}
    import grpc

    def read(path: str) -> bytes | None:
        return Path(path).read_bytes() if path else None

    credentials = grpc.ssl_channel_credentials(read(d.certificate), read(d.client_key), read(d.client_certificate))
    return {"insecure": False, "credentials": credentials}


def _http_tls(d: Destination) -> HttpTls:
    """The files for an HTTP exporter (None: the SDK reads the process environment's, if any)."""
    tls: HttpTls = {
        "certificate_file": d.certificate or None,
        "client_key_file": d.client_key or None,
        "client_certificate_file": d.client_certificate or None,
    }
    if d.certificate:
        tls["session"] = _TrustingSession(d.certificate)
    return tls


class _TrustingSession(requests.Session):
    """A requests session that verifies with ``ca_file``. The SDK sets the file as a session's ``verify``, but
    requests lets ``REQUESTS_CA_BUNDLE`` (or ``CURL_CA_BUNDLE``) from the environment override a session's setting,
    so with either set the collector's CA would be ignored and every export fail."""

    def __init__(self, ca_file: str):
        super().__init__()
        self.ca_file = ca_file

    def merge_environment_settings(
        self,
        url: str,
        proxies: dict[str, str] | None,
        stream: bool | None,
        verify: bool | str | None,
        cert: str | tuple[str, str] | None,
    ) -> dict[str, object]:
        merged: dict[str, object] = super().merge_environment_settings(url, proxies, stream, verify, cert)
        merged["verify"] = self.ca_file  # the proxies and the rest still come from the environment
        return merged

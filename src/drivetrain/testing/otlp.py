"""An OTLP receiver on 127.0.0.1 for tests: the official opentelemetry-proto messages, served over HTTP
(``/v1/traces``, ``/v1/metrics``, ``/v1/logs``, protobuf or JSON bodies) and, if asked, over gRPC. What it
receives is kept and read back flattened (``spans()``, ``metric_points()``, ``log_records()``)::

    with OtlpReceiver() as receiver:          # receiver.url: http://127.0.0.1:PORT
        ...                                   # OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, protocol http/protobuf
        receiver.wait_for(lambda r: len(r.spans()) >= 3)
        tree = receiver.spans()

``tls=(certificate file, key file)`` serves HTTPS (and gRPC over TLS). ``refuse=True`` makes a receiver that
answers nothing: its port is bound and closed again, so connections are refused (a collector that is down). Needs
the ``otel`` extra (``opentelemetry-proto``; ``grpcio`` for gRPC).
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from drivetrain.jsontypes import JsonValue
from drivetrain.testing.httpd import QuickHTTPServer

AttrValue = str | bool | int | float | list[str | bool | int | float] | None
KINDS: dict[str, type[Message]] = {
    "/v1/traces": ExportTraceServiceRequest,
    "/v1/metrics": ExportMetricsServiceRequest,
    "/v1/logs": ExportLogsServiceRequest,
}
ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # hex
    span_id: str
    parent_id: str  # "" for a root
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, AttrValue]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    resource: dict[str, AttrValue]

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


@dataclass(frozen=True)
class ReceivedPoint:
    metric: str
    value: float
    attributes: dict[str, AttrValue]
    unit: str


@dataclass(frozen=True)
class ReceivedLog:
    event_name: str
    body: AttrValue
    attributes: dict[str, AttrValue]
    trace_id: str


@dataclass
class Received:
    """The requests received, by path, in order (``content_types`` says how each came)."""

    requests: list[tuple[str, Message]] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)


def value_of(v: AnyValue) -> AttrValue:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [x for x in (value_of(e) for e in v.array_value.values) if isinstance(x, (str, bool, int, float))]
    if which is None or which in ("kvlist_value", "bytes_value"):
        return None
    value: str | bool | int | float = getattr(v, which)
    return value


def attributes_of(kvs: list[KeyValue]) -> dict[str, AttrValue]:
    return {kv.key: value_of(kv.value) for kv in kvs}


def _from_json(body: bytes, kind: type[Message]) -> Message:
    """An OTLP/JSON body (ids in hex) as its message."""

    def ids(value: JsonValue) -> JsonValue:
        if isinstance(value, dict):
            return {
                k: base64.b64encode(bytes.fromhex(v)).decode() if k in ID_FIELDS and isinstance(v, str) else ids(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [ids(v) for v in value]
        return value

    message = kind()
    ParseDict(ids(json.loads(body)), message)
    return message


M = TypeVar("M", bound=Message)


class OtlpReceiver:
    def __init__(
        self, *, grpc: bool = False, refuse: bool = False, delay_s: float = 0.0, tls: tuple[str, str] | None = None
    ):
        self.received = Received()
        self.delay_s = delay_s  # seconds before each answer (a slow collector)
        self._lock = threading.Condition()
        self._grpc_wanted, self.refuse = grpc, refuse
        self.tls = tls  # (certificate file, key file): HTTPS, and TLS for gRPC
        self._http: QuickHTTPServer | None = None
        self._grpc_stop: Callable[[float], object] | None = None
        self.url = ""
        self.grpc_url = ""

    # -- lifetime

    def __enter__(self) -> OtlpReceiver:
        if self.refuse:
            with socket.socket() as s:  # a port nothing listens on: every connection is refused
                s.bind(("127.0.0.1", 0))
                self.url = f"http://127.0.0.1:{s.getsockname()[1]}"
            self.grpc_url = self.url
            return self
        self._http = QuickHTTPServer(("127.0.0.1", 0), self._handler())
        scheme = "http"
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            self._http.socket = context.wrap_socket(self._http.socket, server_side=True)
            scheme = "https"
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        self.url = f"{scheme}://127.0.0.1:{self._http.server_port}"
        if self._grpc_wanted:
            self._start_grpc()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._grpc_stop is not None:
            self._grpc_stop(0)

    def _keep(self, path: str, message: Message, content_type: str) -> None:
        with self._lock:
            self.received.requests.append((path, message))
            self.received.content_types.append(content_type)
            self._lock.notify_all()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                kind = KINDS.get(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if kind is None:
                    self.send_error(404)
                    return
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                content_type = self.headers.get("Content-Type", "")
                try:
                    if content_type.startswith("application/json"):
                        message = _from_json(body, kind)
                    else:
                        message = kind()
                        message.ParseFromString(body)
                except Exception as e:  # a malformed body is the exporter's bug: answer 400, keep nothing
                    self.send_error(400, str(e))
                    return
                receiver._keep(self.path, message, content_type)
                self.send_response(200)
                self.send_header("Content-Type", content_type or "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        return Handler

    def _start_grpc(self) -> None:
        import grpc
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: ExportTraceServiceRequest, context: object) -> ExportTraceServiceResponse:
                receiver._keep("/v1/traces", request, "grpc")
                return ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: ExportMetricsServiceRequest, context: object) -> ExportMetricsServiceResponse:
                receiver._keep("/v1/metrics", request, "grpc")
                return ExportMetricsServiceResponse()

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request: ExportLogsServiceRequest, context: object) -> ExportLogsServiceResponse:
                receiver._keep("/v1/logs", request, "grpc")
                return ExportLogsServiceResponse()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)  # type: ignore[no-untyped-call]
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)  # type: ignore[no-untyped-call]
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)  # type: ignore[no-untyped-call]
        if self.tls is None:
            port, scheme = server.add_insecure_port("127.0.0.1:0"), "http"
        else:
            cert, key = (Path(path).read_bytes() for path in self.tls)
            port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key, cert)]))
            scheme = "https"
        server.start()
        self._grpc_stop, self.grpc_url = server.stop, f"{scheme}://127.0.0.1:{port}"

    # -- reading back

    def wait_for(self, ready: Callable[[OtlpReceiver], bool], timeout_s: float = 10.0) -> None:
        """Wait until ``ready(self)``; AssertionError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not ready(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"the receiver did not get what was awaited in {timeout_s} s")
                self._lock.wait(min(left, 0.05))

    def _of(self, path: str, kind: type[M]) -> list[M]:
        with self._lock:
            return [m for p, m in self.received.requests if p == path and isinstance(m, kind)]

    def spans(self) -> list[ReceivedSpan]:
        out = []
        for request in self._of("/v1/traces", ExportTraceServiceRequest):
            for rs in request.resource_spans:
                resource = attributes_of(list(rs.resource.attributes))
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        out.append(
                            ReceivedSpan(
                                s.name,
                                s.trace_id.hex(),
                                s.span_id.hex(),
                                s.parent_span_id.hex(),
                                s.kind,
                                s.start_time_unix_nano,
                                s.end_time_unix_nano,
                                attributes_of(list(s.attributes)),
                                s.status.code,
                                s.status.message,
                                resource,
                            )
                        )
        return sorted(out, key=lambda s: s.start_ns)

    def metric_points(self) -> list[ReceivedPoint]:
        out = []
        for request in self._of("/v1/metrics", ExportMetricsServiceRequest):
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        which = m.WhichOneof("data")
                        if which not in ("sum", "gauge"):
                            continue
                        for p in getattr(m, which).data_points:
                            value = p.as_double if p.WhichOneof("value") == "as_double" else float(p.as_int)
                            out.append(ReceivedPoint(m.name, value, attributes_of(list(p.attributes)), m.unit))
        return out

    def log_records(self) -> list[ReceivedLog]:
        out = []
        for request in self._of("/v1/logs", ExportLogsServiceRequest):
            for rl in request.resource_logs:
                for sl in rl.scope_logs:
                    for r in sl.log_records:
                        out.append(
                            ReceivedLog(
                                r.event_name, value_of(r.body), attributes_of(list(r.attributes)), r.trace_id.hex()
                            )
                        )
        return out

    def as_json(self) -> list[JsonValue]:
        """Every request received, as the protobuf JSON mapping (for a failing test's message)."""
        with self._lock:
            return [MessageToDict(m) for _, m in self.received.requests]

"""The pieces an API handler uses: one exchange (request in, JSON or SSE out), errors, the model call.

HTTP requests are handled on threads; the Model is async, so every call runs on the
server's one asyncio event loop in a background thread (``asyncio.run_coroutine_threadsafe``).
Streamed text travels from the model to the HTTP thread through a queue.
"""

from __future__ import annotations

import asyncio
import json
import queue
import select
import socket
import time
import traceback
from typing import TYPE_CHECKING, Any, Protocol

from drivetrain.errors import HarnessError
from drivetrain.models.base import Model, ModelRequest, ModelResponse

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler



class ModelServer(Protocol):
    """What an exchange uses of the server (``server.ModelServer``): its model, its event loop, its log."""

    model: Model
    loop: asyncio.AbstractEventLoop

    def log(self, line: str) -> None: ...


MAX_BODY = 64 * 1024 * 1024
_DONE = object()
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error"}
_OPENAI_TYPES = {429: "rate_limit_error", 401: "authentication_error", 403: "permission_error"}


class HTTPError(Exception):
    """An answer other than 200; rendered in the shape of the API the request was made to."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind
        self.headers = headers or {}


class ClientGone(Exception):
    """The client closed the connection; nothing more can be sent."""


def error_body(dialect: str, e: HTTPError) -> dict:
    if dialect == "anthropic":
        kind = e.kind or _ANTHROPIC_TYPES.get(e.status, "api_error" if e.status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": e.message}}
    kind = e.kind or _OPENAI_TYPES.get(e.status, "server_error" if e.status >= 500 else "invalid_request_error")
    return {"error": {"message": e.message, "type": kind, "param": e.param, "code": None}}


def _too_large() -> HTTPError:
    return HTTPError(413, f"request body is larger than {MAX_BODY} bytes", headers={"Connection": "close"})


def model_failure(e: BaseException) -> HTTPError:
    """The model call failed: the provider's own message (it already retried), or a bug's one line."""
    if isinstance(e, HarnessError):
        return HTTPError(502, f"the served model failed: {e}", headers={"x-should-retry": "false"})
    return HTTPError(500, f"internal error in drivetrain serve: {type(e).__name__}: {e}")


# ----------------------------------------------------------------- the model call


class Call:
    """One ``model.respond`` running on the server's event loop, watched from an HTTP thread."""

    def __init__(self, server: ModelServer, exchange: Exchange, stream: bool, **fields: Any):
        self.exchange = exchange
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        request = ModelRequest(**fields, on_text=self._events.put if stream else None)
        self.future = asyncio.run_coroutine_threadsafe(server.model.respond(request), server.loop)
        self.future.add_done_callback(lambda _: self._events.put(_DONE))

    def next(self, timeout: float) -> str | ModelResponse | None:
        """The next text piece, the finished response (raises the model's error), or None after ``timeout``.

        Raises ClientGone (and cancels the call) if the client hangs up meanwhile.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                item = self._events.get(timeout=max(0.0, min(0.25, deadline - time.monotonic())))
            except queue.Empty:
                if self.exchange.client_gone():
                    self.cancel()
                    raise ClientGone() from None
                if time.monotonic() >= deadline:
                    return None
                continue
            return self.future.result() if item is _DONE else item

    def result(self) -> ModelResponse:
        while True:
            item = self.next(3600.0)
            if isinstance(item, ModelResponse):
                return item

    def cancel(self) -> None:
        self.future.cancel()  # cancels the task on the loop; the local model stops at its next token


class StreamWriter:
    """One API's SSE dialect: what to send when the stream opens, for text, while idle, and at the end."""

    keepalive_frame = b""

    def __init__(self, exchange: Exchange):
        self.exchange = exchange

    def open(self) -> None: ...
    def text(self, piece: str) -> None: ...
    def finish(self, response: ModelResponse, streamed: str) -> None: ...
    def error(self, e: HTTPError) -> None: ...


def stream_call(call: Call, writer: StreamWriter, *, commit_after: float, keepalive_every: float) -> None:
    """Relay a call as SSE. Headers go out with the first text, or after ``commit_after`` seconds of silence,
    so a model that fails early still gets a real HTTP error status; after that, errors are sent in-band."""
    ex, streamed, committed = writer.exchange, [], False
    try:
        while True:
            try:
                item = call.next(keepalive_every if committed else commit_after)
            except ClientGone:
                raise
            except Exception as e:  # the model's failure
                failure = model_failure(e)
                ex.log_failure(e, failure)
                if not committed:
                    raise failure from None
                writer.error(failure)
                break
            if not committed:
                ex.start_events()
                writer.open()
                committed = True
                if item is None:  # open() said hello already
                    continue
            if item is None:
                ex.send_frame(writer.keepalive_frame)
            elif isinstance(item, str):
                streamed.append(item)
                writer.text(item)
            else:
                writer.finish(item, "".join(streamed))
                break
        ex.end_events()
    except ClientGone:
        call.cancel()
        ex.handler.close_connection = True


# ----------------------------------------------------------------- one HTTP exchange


class Exchange:
    """One request and its answer, with the helpers API handlers need."""

    def __init__(self, handler: BaseHTTPRequestHandler, server: ModelServer, dialect: str, path: str):
        self.handler = handler
        self.server = server
        self.dialect = dialect
        self.path = path
        self.body_read = False
        self.committed = False  # a status line went out: errors can no longer change it

    def json_body(self) -> Any:
        raw = self._read_body()
        if "json" not in (self.handler.headers.get("content-type") or "").lower():
            # also keeps web pages out: a browser cannot send application/json cross-site without asking first
            raise HTTPError(415, "Content-Type must be application/json")
        try:
            return json.loads(raw) if raw else None
        except ValueError as e:
            raise HTTPError(400, f"request body is not valid JSON: {e}") from None

    def drain(self) -> bool:
        """Read and drop an unread body, so the connection can serve the next request. False: it cannot."""
        if self.body_read:
            return True
        try:
            self._read_body()
            return True
        except (HTTPError, OSError, ValueError):
            return False

    def _read_body(self) -> bytes:
        h = self.handler
        self.body_read = True
        if "chunked" in (h.headers.get("transfer-encoding") or "").lower():
            return self._read_chunked()
        try:
            length = int(h.headers.get("content-length") or 0)
        except ValueError:
            raise HTTPError(400, "Content-Length is not a number", headers={"Connection": "close"}) from None
        if length > MAX_BODY:
            raise _too_large()
        return h.rfile.read(length) if length else b""

    def _read_chunked(self) -> bytes:
        rfile, parts, total = self.handler.rfile, [], 0
        while True:
            try:
                size = int(rfile.readline().split(b";")[0].strip() or b"0", 16)
            except ValueError:
                raise HTTPError(400, "malformed chunked request body", headers={"Connection": "close"}) from None
            if size == 0:
                while rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return b"".join(parts)
            total += size
            if total > MAX_BODY:
                raise _too_large()
            parts.append(rfile.read(size))
            rfile.readline()

    def call(self, stream: bool = False, **fields: Any) -> Call:
        return Call(self.server, self, stream, **fields)

    def respond(self, call: Call) -> ModelResponse:
        try:
            return call.result()
        except ClientGone:
            raise
        except Exception as e:
            failure = model_failure(e)
            self.log_failure(e, failure)
            raise failure from None

    def log_failure(self, e: BaseException, failure: HTTPError) -> None:
        if failure.status == 500:
            self.server.log("".join(traceback.format_exception(e)).rstrip())
        else:
            self.server.log(f"{self.path}: {failure.message}")

    def client_gone(self) -> bool:
        sock = self.handler.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    # -- answers

    def send_json(self, obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        payload = json.dumps(obj).encode()
        h = self.handler
        self.committed = True
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(payload)

    def send_error(self, e: HTTPError) -> None:
        headers = dict(e.headers)
        if not self.drain():
            headers["Connection"] = "close"
        self.send_json(error_body(self.dialect, e), e.status, headers)

    def start_events(self) -> None:
        h = self.handler
        self.committed = True
        h.send_response(200)
        for name, value in {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                            "Transfer-Encoding": "chunked"}.items():
            h.send_header(name, value)
        h.end_headers()

    def send_frame(self, frame: bytes) -> None:
        try:
            self.handler.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            self.handler.wfile.flush()
        except OSError as e:
            raise ClientGone() from e

    def send_event(self, data: Any, event: str | None = None) -> None:
        head = f"event: {event}\n" if event else ""
        self.send_frame(f"{head}data: {json.dumps(data)}\n\n".encode())

    def end_events(self) -> None:
        try:
            self.handler.wfile.write(b"0\r\n\r\n")
        except OSError as e:
            raise ClientGone() from e

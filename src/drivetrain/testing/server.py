"""ScriptedServer: the Anthropic Messages API over real HTTP on 127.0.0.1, answering from a script.

Every request is checked against the rules the real API enforces
(``drivetrain.models.anthropic_wire.validate``); a broken request is answered 400
``invalid_request_error`` and recorded, so ``assert_complete`` fails.
"""

from __future__ import annotations

import copy
import json
import socket
import struct
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import TypeVar, overload

from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.models.anthropic_wire import same_content, sse_events, validate
from drivetrain.testing.httpd import QuickHTTPServer

from .cache import MIN_CACHE_TOKENS, PromptCache, count_tokens
from .faults import ERROR_TYPES, REFUSED_S, Fault, FaultSchedule
from .script import RawResponse, Respond, Step, assign_ids

MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
T = TypeVar("T")


class Headers(dict[str, str]):
    """Request headers; keys are stored lower-case and lookups ignore case."""

    def __init__(self, items: Iterable[tuple[str, str]] = ()):
        super().__init__((k.lower(), v) for k, v in items)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())

    @overload
    def get(self, key: str, default: None = None) -> str | None: ...
    @overload
    def get(self, key: str, default: str | T) -> str | T: ...
    def get(self, key: str, default: object = None) -> object:
        return super().get(key.lower(), default)


@dataclass
class Request:
    """One request the server received."""

    method: str
    path: str  # without the query string
    query: str
    headers: Headers
    body: JsonValue  # parsed JSON, or None when the body is not JSON
    raw: bytes
    step: int | None = None  # index of the script step that answered it
    conversation: str | None = None  # the script it was routed to (a server given one script per conversation)
    # how far the answer got, for a test that acts at a moment of it (kill the client mid-stream, …):
    events_sent: int = 0  # SSE events written so far (a stall_after_events stream stays at that number)
    answered: bool = False  # the whole answer was written
    fault: str | None = None  # the fault it was answered with (``drivetrain.testing.faults``)
    usage: JsonObject | None = None  # what the answer billed (a message's usage); counts once answered


class ScriptedServer:
    """Serve ``steps`` in order, one per request, and record what came in. See ``drivetrain.testing``.

    ``usage`` counts tokens and simulates prompt caching (``drivetrain.testing.cache``); prefixes under
    ``cache_min_tokens`` are not cached, as on the real API."""

    def __init__(
        self,
        steps: Iterable[Step] | Mapping[str, Iterable[Step]],
        *,
        route: Callable[[JsonValue], str | None] | None = None,
        cache_min_tokens: int = MIN_CACHE_TOKENS,
        faults: FaultSchedule | None = None,
        port: int = 0,
    ):
        self.faults = faults  # requests faulted at a seeded rate, without using a step (``drivetrain.testing.faults``)
        self.cache = PromptCache(cache_min_tokens)
        # One script, or one per conversation (runs served concurrently): ``route(body)`` names a request's
        # conversation, by default its first user message's text, and each gets the next step of its own.
        scripts = {k: list(v) for k, v in steps.items()} if isinstance(steps, Mapping) else {None: list(steps)}
        self._route = (route or first_prompt) if isinstance(steps, Mapping) else None
        self._script = assign_ids([s for script in scripts.values() for s in script])
        numbered = iter(enumerate(self._script))
        self._queues: dict[str | None, deque[tuple[int, Step]]] = {
            k: deque(next(numbered) for _ in script) for k, script in scripts.items()
        }
        self.requests: list[Request] = []
        self.violations: list[str] = []
        self.unexpected: list[str] = []
        self._paused: list[JsonObject] | None = None  # content of a served pause_turn, until the next message is served
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._conns: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._restarting = threading.Lock()
        self._thread: threading.Thread | None = None
        self._port: int | None = port or None
        self._bind_port = port

    # -- lifecycle

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("ScriptedServer is not started; use `with ScriptedServer(steps) as server:`")
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> ScriptedServer:
        self._closing.clear()
        self._httpd = _HTTPServer(("127.0.0.1", self._bind_port), _Handler)
        self._httpd.owner = self
        self._port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="ScriptedServer", daemon=True
        )
        self._thread.start()
        return self

    def _restart(self, seconds: float) -> None:
        """Stop listening now, and for ``seconds`` (connections are refused), then listen on the same port again
        (in a thread of its own); the connections already open are served on. Called from a request's thread."""
        self._restarting.acquire()
        httpd, thread = self._httpd, self._thread
        if httpd is None or self._closing.is_set():
            self._restarting.release()
            return
        httpd.shutdown()
        httpd.socket.close()
        if thread is not None:
            thread.join(timeout=5)
        threading.Thread(target=self._listen_again, args=(seconds,), daemon=True).start()

    def _listen_again(self, seconds: float) -> None:
        try:
            if self._closing.wait(seconds):
                return
            self._httpd = _HTTPServer(("127.0.0.1", self._port or 0), _Handler)
            self._httpd.owner = self
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="ScriptedServer", daemon=True
            )
            self._thread.start()
        finally:
            self._restarting.release()

    def close(self) -> None:
        """Stop serving; open connections (a stalled stream too) are cut."""
        if self._httpd is None:
            return
        self._closing.set()
        with self._restarting:  # a restart under way ends first
            pass
        self._httpd.shutdown()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
        if exc_type is None:
            self.assert_complete()
        elif self.violations or self.unexpected:
            # the body already failed; report causes, not leftover steps
            raise AssertionError(self._report(self.violations + self.unexpected))

    # -- results

    @property
    def remaining(self) -> list[Step]:
        with self._lock:
            return [step for q in self._queues.values() for _, step in q]

    def take_remaining(self) -> list[Step]:
        """The steps left unused, taken out so that ``assert_complete`` does not report them (for a test that
        expects some conversations never to ask)."""
        with self._lock:
            left = [step for q in self._queues.values() for _, step in q]
            for q in self._queues.values():
                q.clear()
        return left

    def assert_complete(self) -> None:
        """Raise AssertionError if a request broke the API rules, no step was left for a call, or steps are left."""
        with self._lock:
            problems = self.violations + self.unexpected
            problems += [
                f"step {i} was never requested"
                + (f" (conversation {k!r})" if k is not None else "")
                + f": {_describe(step)}"
                for k, q in self._queues.items()
                for i, step in q
            ]
        if problems:
            raise AssertionError(self._report(problems))

    @staticmethod
    def _report(problems: list[str]) -> str:
        return "scripted server:\n  " + "\n  ".join(problems)

    # -- serving (handler threads)

    def _handle(self, h: _Handler) -> None:
        length = int(h.headers.get("content-length") or 0)
        raw = h.rfile.read(length) if length else b""
        if len(raw) < length:  # the client went away in the middle of its request (killed): nothing to answer
            h.close_connection = True
            return
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path, _, query = h.path.partition("?")
        with self._lock:
            req = Request(h.command, path, query, Headers(h.headers.items()), body, raw)
            self.requests.append(req)
            n = len(self.requests)
            answer = self._answer(req, n)
        if answer.delay and self._closing.wait(answer.delay):
            h.close_connection = True
            return
        while answer.hold is not None and not answer.hold.wait(0.05):
            if self._closing.is_set():
                h.close_connection = True
                return
        if isinstance(answer, Fault):
            self._send_fault(h, answer, n, req)
        elif isinstance(answer, _Stream):
            self._send_stream(h, answer, n, req)
        else:
            _send(h, answer.status, answer.payload(), answer.content_type, answer.headers, n)
            req.answered = True

    def _answer(self, req: Request, n: int) -> RawResponse | _Stream | Fault:
        """Decide the answer; called under the lock."""
        where = f"request {n} ({req.method} {req.path})"
        free = self._answer_without_step(req)
        if free is not None:
            return free
        if req.method != "POST" or req.path != self.endpoint:
            self.unexpected.append(f"{where}: no such endpoint")
            return self._error(404, "not_found_error", f"Not found: {req.method} {req.path}")
        if self._route is not None:
            req.conversation = self._route(req.body)
            where += f", conversation {req.conversation!r}"
        queue = self._queues.get(req.conversation)
        if queue is None:
            self.unexpected.append(f"{where}: no script for this conversation")
            return self._error(400, "invalid_request_error", "scripted server: no script for this conversation")
        if not queue:
            self.unexpected.append(f"{where}: unexpected call, the script is exhausted")
            return self._error(400, "invalid_request_error", "scripted server: no step left for this request")
        req.step, step = queue.popleft()
        problems = self._validate(req.body)
        if step.expect is not None and isinstance(req.body, dict):
            try:
                if step.expect(req.body) is False:  # a bare comparison in a lambda must not pass silently
                    problems.append("expect failed: returned False")
            except Exception as e:
                problems.append(f"expect failed ({type(e).__name__}): {e}")
        if problems:
            self.violations += [f"{where}, step {req.step}: {p}" for p in problems]
            return self._error(400, "invalid_request_error", "; ".join(problems))
        scheduled = self.faults.pick(n) if self.faults is not None else None
        if scheduled is not None:  # the step stays for the retry
            queue.appendleft((req.step, step))
            req.step, step = None, scheduled
        if isinstance(step, Fault):
            req.fault = step.kind
            return step
        if isinstance(step, RawResponse):
            req.usage = _usage_in(step.body)
            return step
        assert isinstance(step, Respond)  # the only other kind of step
        answer = self._reply(step, req.body, n)
        req.usage = answer.usage if isinstance(answer, _Stream) else _usage_in(answer.body)
        return answer

    # -- the Messages API dialect (ScriptedOpenAIServer overrides these)

    endpoint = MESSAGES_PATH

    def _answer_without_step(self, req: Request) -> RawResponse | None:
        if req.method == "POST" and req.path == COUNT_TOKENS_PATH:
            return RawResponse(status=200, body={"input_tokens": count_tokens(req.body)})
        return None

    def _validate(self, body: JsonValue) -> list[str]:
        problems = validate(body)
        if self._paused is not None:
            messages = body.get("messages") if isinstance(body, dict) else None
            last = messages[-1] if isinstance(messages, list) and messages else None
            if not (
                isinstance(last, dict)
                and last.get("role") == "assistant"
                and same_content(last.get("content"), self._paused)
            ):
                problems.append(
                    "after a pause_turn response the request must end with that assistant message, "
                    "unchanged (no user message after it)"
                )
        return problems

    def _reply(self, step: Respond, body: JsonObject, n: int) -> RawResponse | _Stream:
        message = build_message(step, body, f"msg_scripted_{n:04d}", self.cache)
        self._paused = message["content"] if step.stop_reason == "pause_turn" else None
        if body.get("stream"):
            return _Stream(_sse_chunks(message), step, message["usage"])
        return RawResponse(status=200, body=message, delay=step.delay, hold=step.hold)

    def _error(self, status: int, error_type: str, message: str) -> RawResponse:
        return RawResponse(status=status, body={"type": "error", "error": {"type": error_type, "message": message}})

    def _error_event(self, step: Respond) -> bytes:
        data = {"type": "error", "error": {"type": step.error_type, "message": "scripted mid-stream error"}}
        return f"event: error\ndata: {json.dumps(data)}\n\n".encode()

    def _fault_message(self, body: JsonValue, n: int) -> JsonObject:
        """A placeholder answer, for a fault to cut, break or stop short."""
        return {
            "id": f"msg_fault_{n:04d}",
            "type": "message",
            "role": "assistant",
            "model": (body.get("model") if isinstance(body, dict) else None) or "scripted-model",
            "content": [{"type": "text", "text": "This answer never arrives whole: a scripted fault."}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }

    def _fault_chunks(self, body: JsonValue, n: int) -> list[bytes]:
        return _sse_chunks(self._fault_message(body, n))

    def _fault_whole(self, body: JsonValue, n: int) -> bytes:
        return json.dumps(self._fault_message(body, n)).encode()

    def _unfinished(self, chunks: list[bytes]) -> list[bytes]:
        """The stream without its end (``message_stop``)."""
        return chunks[:-1]

    # -- sending

    def _send_fault(self, h: _Handler, f: Fault, n: int, req: Request) -> None:
        streamed = isinstance(req.body, dict) and bool(req.body.get("stream"))
        if not streamed:
            f = f.as_whole()
        if f.status is not None:
            headers = {k: v for k, v in (("retry-after", f.retry_after), ("retry-after-ms", f.retry_after_ms)) if v}
            error = self._error(f.status, ERROR_TYPES[f.status], f"scripted fault: {f.status}")
            _send(h, f.status, error.payload(), "application/json", headers, n)
        elif f.kind == "reset":  # RST, not FIN: a linger of 0, then close
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()
        elif f.kind == "refused":  # a restart: new connections refused for a moment, this one reset
            self._restart(REFUSED_S)
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()
        elif f.kind == "hang" or (f.kind == "stall" and not streamed):
            self._closing.wait(f.seconds)
        elif f.kind == "not_json":
            page = b"<html><body><h1>502 Bad Gateway</h1>upstream connect error</body></html>"
            _send(h, 200, page, "text/html", {}, n)
        elif not streamed:  # cut or broken_json, of a whole answer
            payload = self._fault_whole(req.body, n)
            if f.kind == "cut":
                _send(h, 200, payload, "application/json", {}, n, cut=len(payload) // 2)
            else:
                _send(h, 200, payload[: len(payload) // 2], "application/json", {}, n)
        else:
            self._send_stream_fault(h, f, n, req)
        if f.kind in (
            "reset",
            "refused",
            "cut",
            "hang",
            "stall",
        ):  # the others leave the connection fit for the next request
            h.close_connection = True

    def _send_stream_fault(self, h: _Handler, f: Fault, n: int, req: Request) -> None:
        chunks = self._fault_chunks(req.body, n)
        step = Respond(content=[], stop_reason="end_turn")
        if f.kind == "overloaded_in_stream":
            step = Respond(content=[], stop_reason="end_turn", error_after_events=3, error_type="overloaded_error")
        elif f.kind == "stall":
            step = Respond(content=[], stop_reason="end_turn", stall_after_events=3, stall_seconds=f.seconds)
        elif f.kind == "broken_json":
            chunks = [*chunks[:3], b'event: content_block_delta\ndata: {"type": "content_block_del\n\n', *chunks[3:]]
        elif f.kind == "no_message_stop":
            chunks = self._unfinished(chunks)
        elif f.kind == "cut":
            chunks = chunks[:3]  # and no end: the connection is closed
        self._send_stream(h, _Stream(chunks, step), n, req, end=f.kind != "cut")
        req.answered = False

    def _send_stream(self, h: _Handler, answer: _Stream, n: int, req: Request, end: bool = True) -> None:
        h.send_response(200)
        for name, value in {
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "Transfer-Encoding": "chunked",
            "request-id": f"req_scripted_{n:04d}",
        }.items():
            h.send_header(name, value)
        h.end_headers()
        step = answer.step
        for k, chunk in enumerate(answer.chunks):
            if k == step.stall_after_events and self._closing.wait(step.stall_seconds):
                h.close_connection = True
                return
            if k == step.error_after_events:
                chunk = self._error_event(step)
            h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            req.events_sent = k + 1
            if k == step.error_after_events:
                break
        if end:
            h.wfile.write(b"0\r\n\r\n")
        req.answered = True


def first_prompt(body: JsonValue) -> str | None:
    """The text of the first user message (Messages API or chat completions): which run a request belongs to."""
    messages = body.get("messages") if isinstance(body, dict) else None
    for m in messages if isinstance(messages, list) else ():
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, str):
                return content
            texts = [b.get("text") for b in content or () if isinstance(b, dict) and b.get("type") == "text"]
            return texts[0] if texts else None
    return None


def build_message(step: Respond, body: JsonValue, msg_id: str, cache: PromptCache | None = None) -> JsonObject:
    """The Messages API response for a ``respond`` step; ``cache`` bills the request's prompt caching."""
    model = step.model or (body.get("model") if isinstance(body, dict) else None) or "scripted-model"
    billed = (cache if cache is not None else PromptCache()).use(body)
    usage = {
        "input_tokens": billed.input_tokens,
        "output_tokens": max(1, len(json.dumps(step.content)) // 4),
        "cache_creation_input_tokens": billed.cache_creation_input_tokens,
        "cache_read_input_tokens": billed.cache_read_input_tokens,
    }
    usage.update(step.usage or {})
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": copy.deepcopy(step.content),
        "stop_reason": step.stop_reason,
        "stop_sequence": step.stop_sequence,
        "usage": usage,
    }


@dataclass
class _Stream:
    chunks: list[bytes]  # the SSE events, encoded
    step: Respond
    usage: JsonObject | None = None  # what the whole stream bills

    @property
    def delay(self) -> float:
        return self.step.delay

    @property
    def hold(self) -> threading.Event | None:
        return self.step.hold


def _send(
    h: _Handler, status: int, payload: bytes, content_type: str, headers: dict[str, str], n: int, cut: int | None = None
) -> None:
    """``cut``: send only that many bytes of the payload (its whole length announced), then close."""
    h.send_response(status)
    h.send_header("Content-Type", content_type)
    h.send_header("Content-Length", str(len(payload)))
    h.send_header("request-id", f"req_scripted_{n:04d}")
    for name, value in headers.items():
        h.send_header(name, str(value))
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(payload if cut is None else payload[:cut])
    if cut is not None:
        h.close_connection = True


def _sse_chunks(message: JsonObject) -> list[bytes]:
    return [f"event: {e}\ndata: {json.dumps(d)}\n\n".encode() for e, d in sse_events(message)]


def _usage_in(body: JsonValue | bytes) -> JsonObject | None:
    usage = body.get("usage") if isinstance(body, dict) else None
    return usage if isinstance(usage, dict) else None


def _describe(step: Step) -> str:
    if isinstance(step, Respond):
        kinds = ", ".join(b.get("type", "?") for b in step.content)
        return f"respond([{kinds}], stop_reason={step.stop_reason!r})"
    if isinstance(step, Fault):
        return f"fault {step.kind}"
    assert isinstance(step, RawResponse)
    return f"response {step.status} {str(step.body)[:80]}"


class _HTTPServer(QuickHTTPServer):
    owner: ScriptedServer

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket], client_address: object) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # a client gone (killed, timed out): no traceback on stderr
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection pool expects
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        # SSE goes out in many small writes: without this, Nagle plus delayed ACKs add ~40 ms per request
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.owner._lock:
            self.server.owner._conns.add(self.connection)

    def finish(self) -> None:
        with self.server.owner._lock:
            self.server.owner._conns.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def _dispatch(self) -> None:
        owner = self.server.owner
        try:
            owner._handle(self)
        except OSError:  # the client went away (timed out, cancelled): nothing to answer
            self.close_connection = True
        except Exception as e:  # a bug here must surface in assert_complete, not vanish in a thread
            with owner._lock:
                owner.unexpected.append(f"scripted server error: {type(e).__name__}: {e}")
            self.close_connection = True

    do_POST = do_GET = do_HEAD = do_PUT = do_PATCH = do_DELETE = _dispatch

    def log_message(self, format: str, *args: object) -> None:  # quiet: tests read server.requests instead
        pass

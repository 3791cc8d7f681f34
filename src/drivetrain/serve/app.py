"""The ASGI application: routes, and the guard every request passes (draining, Host, API key, size),
which also writes the access log and keeps the metrics."""

from __future__ import annotations

import functools
import hmac
import ipaddress
import time
import traceback
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from drivetrain.serve import anthropic_api, openai_api
from drivetrain.serve.answer import Answer, json_response
from drivetrain.serve.calls import ClientGone
from drivetrain.serve.errors import Dialect, HTTPError, dialect_of, error_bytes, unauthorized
from drivetrain.serve.observe import Usage, access_line
from drivetrain.serve.state import ServeState

if TYPE_CHECKING:
    from opentelemetry.trace import Span

Handler = Callable[[Request, ServeState], Awaitable[Answer]]
ROUTES: dict[tuple[str, str], Handler] = {
    ("POST", "/v1/messages"): anthropic_api.messages,
    ("POST", "/v1/messages/count_tokens"): anthropic_api.count_tokens,
    ("POST", "/v1/chat/completions"): openai_api.chat_completions,
    ("POST", "/chat/completions"): openai_api.chat_completions,  # an OpenAI base URL set without /v1
}
INFO_PATHS = ("/health", "/metrics", "/v1/models", "/models")


@functools.lru_cache(maxsize=256)  # asked on every request, of the same few Host names
def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def build_app(state: ServeState) -> ASGIApp:
    """The ASGI callable: the guard around the routes."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await _lifespan(state, receive, send)
        if scope["type"] != "http":
            return None
        await _guarded(state, scope, receive, send)

    return app


async def _lifespan(state: ServeState, receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if state.upstream is not None:
                state.upstream.warm()  # an httpx client's TLS context takes a while to build: not on the first request
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if state.upstream is not None:
                await state.upstream.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _guarded(state: ServeState, scope: Scope, receive: Receive, send: Send) -> None:
    started = time.perf_counter()
    path = scope["path"].rstrip("/") or "/"
    headers = scope["drivetrain.headers"] = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    dialect = dialect_of(path, headers)
    usage = scope["drivetrain.usage"] = Usage()
    status = 499  # logged when the client leaves before any answer

    async def sending(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    method = scope["method"]
    route = path if (method, path) in ROUTES or path in INFO_PATHS else "other"
    state.metrics.in_flight += 1
    with _span(state, method, route, path, headers) as span:
        try:
            refusal = _refusal(state, method, path, headers)
            if refusal is not None:
                await _send_error(sending, dialect, refusal)
            else:
                await _dispatch(state, scope, receive, sending, path, dialect)
        finally:
            state.metrics.in_flight -= 1
            seconds = time.perf_counter() - started
            state.metrics.record(method, route, status, seconds, usage)
            if state.settings.log is not None and path != "/metrics":
                client = scope.get("client") or ("-", 0)
                state.log(access_line(client[0], method, path, status, seconds, usage))
            if span is not None:
                from drivetrain.serve.tracing import answered

                answered(span, status, usage)


def _span(
    state: ServeState, method: str, route: str, path: str, headers: dict[str, str]
) -> AbstractContextManager[Span | None]:
    """The request's span when the server traces (telemetry on); the OpenTelemetry propagators are loaded then."""
    if state.tracer is None:
        return nullcontext()
    from drivetrain.serve.tracing import request_span

    return request_span(state.tracer, method, route, path, headers, state.model.name)


def _refusal(state: ServeState, method: str, path: str, headers: dict[str, str]) -> HTTPError | None:
    if state.draining:
        return HTTPError(
            503,
            "drivetrain serve is shutting down; retry on another instance",
            headers={"connection": "close", "retry-after": "1"},
        )
    if is_loopback(state.settings.host):
        # On a loopback address, answer only requests addressed to a loopback name (DNS-rebinding guard).
        host = (headers.get("host") or "localhost").strip()
        name = host[1:].partition("]")[0] if host.startswith("[") else host.rpartition(":")[0] or host
        if not is_loopback(name) and name != state.settings.host:
            return HTTPError(
                403,
                f"Host {host!r} is not a loopback name; this server only answers requests "
                "addressed to 127.0.0.1 or localhost.",
            )
    key = state.settings.api_key
    if key is not None:
        given = [headers.get("x-api-key", "")]
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            given.append(token.strip())
        # compare_digest on every candidate (no short-circuit), so the time taken says nothing about the key
        matches = [hmac.compare_digest(g.encode(), key.encode()) for g in given]
        if not any(matches):
            return unauthorized(any(given))
    return None


async def _dispatch(state: ServeState, scope: Scope, receive: Receive, send: Send, path: str, dialect: Dialect) -> None:
    request = Request(scope, receive)
    method = scope["method"]
    response: Answer
    try:
        handler = ROUTES.get((method, path))
        if handler is not None:
            response = await handler(request, state)
        elif method in ("GET", "HEAD") and (path in INFO_PATHS or path.startswith(("/v1/models/", "/models/"))):
            response = _info(state, path)
        elif any(p == path for _, p in ROUTES):
            raise HTTPError(405, f"{method} {path} is not allowed; use POST")
        else:
            raise HTTPError(
                404,
                f"Not found: {method} {path}. This server answers POST /v1/messages, "
                "POST /v1/chat/completions, GET /v1/models, GET /health and GET /metrics.",
            )
    except ClientGone:
        return
    except HTTPError as e:
        response = _error_response(dialect, e)
    except Exception as e:  # a bug: a one-line answer for the client, the traceback in the server's log
        state.log("".join(traceback.format_exception(e)).rstrip())
        response = _error_response(
            dialect, HTTPError(500, f"internal error in drivetrain serve: {type(e).__name__}: {e}")
        )
    await response(scope, receive, send)


def _error_response(dialect: Dialect, e: HTTPError) -> Response:
    return Response(error_bytes(dialect, e), e.status, e.headers, media_type="application/json")


async def _send_error(send: Send, dialect: Dialect, e: HTTPError) -> None:
    body = error_bytes(dialect, e)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in e.headers.items()]
    await send({"type": "http.response.start", "status": e.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _info(state: ServeState, path: str) -> Response:
    name = state.model.name
    if path == "/health":
        return json_response({"status": "ok", "model": name})
    if path == "/metrics":
        return Response(state.metrics.render(name), media_type="text/plain; version=0.0.4")
    entry = {
        "id": name,
        "object": "model",
        "created": state.created,
        "owned_by": "drivetrain",
        "type": "model",
        "display_name": name,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(state.created)),
    }
    if path in ("/v1/models", "/models"):
        # both APIs' list shapes at once: OpenAI reads object/data, Anthropic data/has_more/first_id/last_id
        return json_response({"object": "list", "data": [entry], "has_more": False, "first_id": name, "last_id": name})
    asked = unquote(path.partition("/models/")[2])
    if asked == name:
        return json_response(entry)
    raise HTTPError(404, f"model {asked!r} not found; this server serves {name!r}", param="model")

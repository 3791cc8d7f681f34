"""What both API handlers do: read the request, and answer it from the upstream as is or through the Model.

A streamed answer's status goes out with its first output, or after ``commit_after`` seconds of
silence (then keep-alive frames hold the client's idle timer off), so a model that fails early still
gets a real HTTP error status; after that, errors are sent in-band, as each API does.
"""

from __future__ import annotations

import asyncio
import json
import traceback
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import TYPE_CHECKING, TypeAlias

from starlette.requests import Request
from starlette.responses import Response

from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.models.base import ModelResponse
from drivetrain.models.http import httpx, root_cause
from drivetrain.serve.calls import (
    ClientGone,
    EventStream,
    ModelCall,
    RequestFields,
    first_item,
    unless_disconnected,
    until_disconnect,
)
from drivetrain.serve.errors import HTTPError, model_failure
from drivetrain.serve.observe import Usage
from drivetrain.serve.passthrough import Upstream, UpstreamResponse, post_and_read, relay

if TYPE_CHECKING:
    from drivetrain.serve.state import ServeState

Answer: TypeAlias = "Response | EventStream"  # what a route returns: an ASGI app that sends the answer


class StreamWriter(ABC):
    """One API's SSE dialect: the frames that open the stream, carry text, keep it alive, end it, or fail it."""

    keepalive_frame = b""
    upstream_start = b""  # the upstream's opening frame, dropped when open() already sent one of ours

    @abstractmethod
    def open(self) -> bytes: ...
    @abstractmethod
    def text(self, piece: str) -> bytes: ...
    @abstractmethod
    def finish(self, response: ModelResponse, streamed: str) -> bytes: ...
    @abstractmethod
    def error(self, e: HTTPError) -> bytes: ...


def headers_of(request: Request) -> Mapping[str, str]:
    """The request's headers, names in lower case: the dict the app's guard made of them once (starlette's
    ``request.headers`` decodes and searches the raw list on every look-up)."""
    headers: dict[str, str] | None = request.scope.get("drivetrain.headers")
    return headers if headers is not None else request.headers


async def read_json(request: Request, max_body: int) -> JsonValue:
    headers = headers_of(request)
    if "json" not in (headers.get("content-type") or "").lower():
        # also keeps web pages out: a browser cannot send application/json cross-site without asking first
        raise HTTPError(415, "Content-Type must be application/json")
    declared = headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_body:
        raise _too_large(max_body)
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body:
            raise _too_large(max_body)
        parts.append(chunk)
    raw = b"".join(parts)
    try:
        return json.loads(raw) if raw else None
    except ValueError as e:
        raise HTTPError(400, f"request body is not valid JSON: {e}") from None


def _too_large(max_body: int) -> HTTPError:
    return HTTPError(413, f"request body is larger than {max_body} bytes", headers={"connection": "close"})


def json_response(obj: JsonValue, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(obj).encode(), status, headers, media_type="application/json")


# ----------------------------------------------------------------- through the Model seam


async def from_model(
    request: Request,
    state: ServeState,
    fields: RequestFields,
    stream: bool,
    writer: StreamWriter,
    to_json: Callable[[ModelResponse], JsonObject],
) -> Answer:
    if not state.admission.try_acquire():
        await unless_disconnected(request.receive, state.admission.acquire())
    call = ModelCall(state.model, state.admission, fields, stream)
    usage: Usage = request.scope["drivetrain.usage"]
    if not stream:
        try:
            response = await unless_disconnected(request.receive, call.task)
        except (HTTPError, ClientGone):
            raise
        except Exception as e:
            raise _failed(state, e) from None
        usage.add(response.usage.to_wire())
        return json_response(to_json(response))
    try:
        first = await first_item(request.receive, call, state.settings.commit_after)
    except (HTTPError, ClientGone):
        raise
    except Exception as e:
        raise _failed(state, e) from None
    return EventStream(_relay_call(state, call, writer, first, usage))


async def _relay_call(
    state: ServeState, call: ModelCall, writer: StreamWriter, first: str | ModelResponse | None, usage: Usage
) -> AsyncGenerator[bytes, None]:
    streamed: list[str] = []
    item = first
    try:
        yield writer.open()
        while True:
            if item is None:
                yield writer.keepalive_frame
            elif isinstance(item, str):
                streamed.append(item)
                yield writer.text(item)
            else:
                usage.add(item.usage.to_wire())
                yield writer.finish(item, "".join(streamed))
                return
            try:
                item = await call.next(state.settings.keepalive_every)
            except Exception as e:
                yield writer.error(_failed(state, e))
                return
    finally:
        call.cancel()  # a no-op once the call is done; else the client left and the model must stop


def _failed(state: ServeState, e: BaseException) -> HTTPError:
    failure = model_failure(e)
    if failure.status == 500:
        state.log("".join(traceback.format_exception(e)).rstrip())
    elif not isinstance(e, HTTPError):
        state.log(f"model failure: {failure.message}")
    return failure


# ----------------------------------------------------------------- straight to the upstream


async def forwarded(
    request: Request,
    state: ServeState,
    upstream: Upstream,
    body: JsonObject,
    writer: StreamWriter | None,
    path_suffix: str = "",
) -> Answer:
    """``body`` sent to ``upstream``; the answer streamed in ``writer``'s dialect, or in one piece if None."""
    usage: Usage = request.scope["drivetrain.usage"]
    if not state.admission.try_acquire():
        await unless_disconnected(request.receive, state.admission.acquire())
    if writer is None:
        work = asyncio.ensure_future(post_and_read(upstream, body, headers_of(request), usage, path_suffix))
        state.admission.release_when_done(work)
        status, ctype, raw = await unless_disconnected(request.receive, work)
        return Response(raw, status, media_type=ctype)
    sending = asyncio.ensure_future(upstream.post(body, headers_of(request), path_suffix))
    # the slot is held until the stream ends, however it ends
    ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    state.admission.release_when_done(ended)
    # one watcher for the whole exchange, handed on to the stream (a task less a request than a new one each)
    watch = asyncio.ensure_future(until_disconnect(request.receive))
    try:
        await asyncio.wait((sending, watch), timeout=state.settings.commit_after, return_when=asyncio.FIRST_COMPLETED)
        if watch.done():
            raise ClientGone()
        frames = relay(sending.result(), usage) if sending.done() else _late(state, sending, writer, usage)
    except BaseException:
        watch.cancel()
        sending.cancel()
        ended.set_result(None)
        raise
    return EventStream(_ending(frames, writer, ended), watch=watch)


async def _late(
    state: ServeState, sending: asyncio.Future[UpstreamResponse], writer: StreamWriter, usage: Usage
) -> AsyncGenerator[bytes, None]:
    """An upstream slow to answer: the stream opens now with our own opening frame, and keep-alives
    until the upstream's events take over (its own opening frame dropped)."""
    try:
        yield writer.open()
        while not sending.done():
            await asyncio.wait({sending}, timeout=state.settings.keepalive_every)
            if not sending.done():
                yield writer.keepalive_frame
        try:
            response = sending.result()
        except Exception as e:
            yield writer.error(model_failure(e))
            return
        async for frames in relay(response, usage, skip_first=writer.upstream_start):
            yield frames
    finally:
        sending.cancel()


async def _ending(
    frames: AsyncGenerator[bytes, None], writer: StreamWriter, ended: asyncio.Future[None]
) -> AsyncGenerator[bytes, None]:
    """``frames``, then the slot given back; an upstream that breaks off mid-stream ends in an error event."""
    try:
        async for chunk in frames:
            yield chunk
    except (httpx.HTTPError, OSError, EOFError) as e:
        yield writer.error(HTTPError(502, f"the served model's stream broke off: {root_cause(e)}"))
    finally:
        await frames.aclose()
        if not ended.done():
            ended.set_result(None)

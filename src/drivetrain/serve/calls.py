"""Model calls under serve: admission to the model, cancelling what a departed client asked for, and
streaming an answer out as it is made.

Everything here runs on the server's one event loop. A client that hangs up is noticed by waiting on
the ASGI ``receive`` channel for ``http.disconnect`` beside the work, not by a failed write, so a model
that is silent (a long prompt being read, a stalled upstream) is still stopped at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable
from typing import NotRequired, TypedDict, TypeVar

from starlette.types import Receive, Scope, Send

from drivetrain.jsontypes import JsonObject
from drivetrain.messages import Message
from drivetrain.models.base import Model, ModelRequest, ModelResponse, ToolChoice
from drivetrain.serve.errors import overloaded
from drivetrain.serve.observe import Metrics

T = TypeVar("T")


class RequestFields(TypedDict):
    """The ModelRequest fields read from a request body, either API's (``on_text`` is the call's own)."""

    messages: list[Message]
    system: str
    tools: list[JsonObject]
    max_tokens: NotRequired[int]
    stop_sequences: NotRequired[list[str]]
    temperature: NotRequired[float]
    tool_choice: NotRequired[ToolChoice]


class ClientGone(Exception):
    """The client closed the connection; nothing more can be sent."""


class Admission:
    """At most ``limit`` model calls at once and ``queue`` more waiting, first come first served; beyond that 429.

    The local model is one llama.cpp context per process (limit 1): requests take turns at it, and since
    they share it, the KV cache of one request's prompt serves the next one's common prefix.
    """

    def __init__(self, limit: int, queue: int, metrics: Metrics):
        self.limit, self.queue, self.metrics = limit, queue, metrics
        self.running = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._mean_seconds = 1.0  # a call's recent duration, for the retry-after estimate

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def try_acquire(self) -> bool:
        """Take a free slot if there is one, without waiting (no task to watch the client needed)."""
        if self.running < self.limit and not self._waiting:
            self.running += 1
            return True
        return False

    async def acquire(self) -> None:
        if self.try_acquire():
            return
        if len(self._waiting) >= self.queue:
            self.metrics.rejected += 1
            wait = self.retry_after()
            raise overloaded(
                wait,
                f"the model is busy: {self.running} request(s) running and {len(self._waiting)} "
                f"waiting, which is all the queue holds; retry in about {wait} s",
            )
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        self.metrics.queued += 1
        try:
            await turn  # release() hands its slot over: ``running`` stays as it is
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.release()  # the slot came just as the client left: pass it on
            else:
                try:
                    self._waiting.remove(turn)
                except ValueError:
                    pass
            raise
        finally:
            self.metrics.queued -= 1

    def release(self, seconds: float | None = None) -> None:
        if seconds is not None:
            self._mean_seconds = 0.8 * self._mean_seconds + 0.2 * seconds
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.running -= 1

    def retry_after(self) -> int:
        return max(1, round(self._mean_seconds * (len(self._waiting) + 1) / self.limit))

    def release_when_done(self, task: asyncio.Future[T]) -> None:
        """Give the slot back when ``task`` ends, however it ends (a done callback also runs for a task
        cancelled before it started, which a ``finally`` inside it would not)."""
        started = time.monotonic()
        task.add_done_callback(lambda _: self.release(time.monotonic() - started))


async def until_disconnect(receive: Receive) -> None:
    """Return when the client hangs up. Call only after the request body was read."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(receive: Receive, work: Awaitable[T], watch: asyncio.Future[None] | None = None) -> T:
    """``work``'s result, or ClientGone (with ``work`` cancelled) if the client hangs up first.

    ``watch``: a running ``until_disconnect`` task to share (its owner cancels it); else one is made here."""
    task = asyncio.ensure_future(work)
    own = watch is None
    if watch is None:
        watch = asyncio.ensure_future(until_disconnect(receive))
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if own:
            watch.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise ClientGone()
    return task.result()


class ModelCall:
    """One ``model.respond`` running as a task in an admission slot the caller took; streamed text arrives
    on a queue."""

    def __init__(self, model: Model, admission: Admission, fields: RequestFields, stream: bool):
        self._events: asyncio.Queue[str | None] = asyncio.Queue()  # text pieces, then None: the call ended
        request = ModelRequest(**fields, on_text=self._events.put_nowait if stream else None)
        self.task = asyncio.ensure_future(model.respond(request))
        admission.release_when_done(self.task)
        self.task.add_done_callback(lambda _: self._events.put_nowait(None))

    async def next(self, timeout: float) -> str | ModelResponse | None:
        """The next text piece, the finished response (raises the model's error), or None after ``timeout``."""
        try:
            item = await asyncio.wait_for(self._events.get(), timeout)
        except TimeoutError:
            return None
        return self.task.result() if item is None else item

    def cancel(self) -> None:
        self.task.cancel()  # the local model stops at its next token; an HTTP provider closes its stream


class EventStream:
    """An ASGI ``text/event-stream`` answer: each frame of ``frames`` is sent as soon as it is made,
    and the stream is cancelled (its ``finally`` runs) the moment the client hangs up."""

    def __init__(
        self,
        frames: AsyncGenerator[bytes, None],
        headers: dict[str, str] | None = None,
        watch: asyncio.Future[None] | None = None,
    ):
        self.frames, self.watch = frames, watch  # watch: the request's until_disconnect task, if it has one
        self.headers = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]  # a proxy in front must not hold the events back
        self.headers += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        try:
            await unless_disconnected(receive, self._pump(send), self.watch)
        except (ClientGone, OSError):
            pass
        finally:
            if self.watch is not None:
                self.watch.cancel()

    async def _pump(self, send: Send) -> None:
        try:
            async for frame in self.frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self.frames.aclose()


async def first_item(receive: Receive, call: ModelCall, commit_after: float) -> str | ModelResponse | None:
    """The call's first text (or its whole answer, or None after ``commit_after`` s): until then no status
    has gone out, so a model that fails early still gets a real HTTP error status."""
    try:
        return await unless_disconnected(receive, call.next(commit_after))
    except ClientGone:
        call.cancel()
        raise

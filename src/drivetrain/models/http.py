"""What the HTTP providers share: one SDK client per event loop, retry timing, and error text a person can
act on."""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import time
from collections.abc import Callable, Mapping
from typing import Generic, Protocol, TypeVar, runtime_checkable

try:  # the transport the SDKs are built on: raised as is when a stream breaks after it started
    import httpx2 as httpx
except ImportError:  # older SDKs
    import httpx  # type: ignore[no-redef,import-not-found]  # the older SDKs' transport, not installed with httpx2

__all__ = [
    "PROXY_VARS",
    "APIErrorLike",
    "HasResponse",
    "PerLoop",
    "api_message",
    "httpx",
    "retry_after",
    "retry_delay",
    "root_cause",
    "unreachable_message",
]

PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
MAX_DELAY = 60.0

T = TypeVar("T")


@runtime_checkable
class HasResponse(Protocol):
    """An error that carries the HTTP response it came with (the SDKs' status errors)."""

    @property
    def response(self) -> httpx.Response | None: ...


class APIErrorLike(Protocol):
    """What the anthropic and openai SDKs' ``APIError`` both carry."""

    @property
    def message(self) -> str: ...

    @property
    def body(self) -> object: ...


class PerLoop(Generic[T]):
    """One object per event loop, made on first use in that loop.

    An SDK client's connection pool belongs to the loop that opened its connections: used from another loop
    (a second ``asyncio.run``), a request can go out on an old connection and its answer be lost, and a retry
    then sends it again. So each loop gets its own client, and those of loops that have closed are dropped.
    """

    def __init__(self, make: Callable[[], T]):
        self._make = make
        self._by_loop: dict[asyncio.AbstractEventLoop, T] = {}

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        made = self._by_loop.get(loop)
        if made is None:
            for old in [lp for lp in self._by_loop if lp.is_closed()]:
                del self._by_loop[old]
            made = self._by_loop[loop] = self._make()
        return made

    def take(self) -> T | None:
        """This loop's object, no longer kept (None if it made none)."""
        return self._by_loop.pop(asyncio.get_running_loop(), None)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms``, ``retry-after`` seconds or HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, parsed.timestamp() - time.time())


def retry_delay(e: Exception, attempt: int, backoff: float) -> float:
    """The server's retry-after if it gave one, else jittered exponential backoff; never over a minute."""
    response = e.response if isinstance(e, HasResponse) else None
    wait = retry_after(response.headers if response is not None else {})
    if wait is None:
        wait = backoff * (2**attempt) * (0.75 + random.random() / 2)
    return min(wait, MAX_DELAY)


def api_message(e: APIErrorLike) -> str:
    """The server's own words from an SDK status error (``{"error": {"message": …}}`` in either API's shape)."""
    if isinstance(e.body, dict):
        err = e.body.get("error", e.body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return str(e.message)


def root_cause(e: BaseException) -> str:
    while (earlier := e.__cause__ or e.__context__) is not None:
        e = earlier
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def unreachable_message(url: str, e: BaseException, *, timed_out: bool, idle_timeout: float, origin: str) -> str:
    """``url`` could not be reached or went quiet: say so, with the proxy in the way and where the URL came from."""
    proxies = [f"{v}={os.environ[v]}" for v in PROXY_VARS if os.environ.get(v)]
    via = f" through the proxy {', '.join(proxies)}" if proxies else ""
    kind = f"timed out (no data for {idle_timeout:g} s)" if timed_out else "could not be reached"
    return (
        f"{url} {kind}{via} ({root_cause(e)}). The URL came from {origin}; "
        f"check it{' and the proxy setting' if proxies else ''}."
    )

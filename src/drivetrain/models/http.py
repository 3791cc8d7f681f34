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

from drivetrain.errors import ConfigError

try:  # the transport the SDKs are built on: raised as is when a stream breaks after it started
    import httpx2 as httpx
except ImportError:  # older SDKs
    import httpx  # type: ignore[no-redef,import-not-found]  # the older SDKs' transport, not installed with httpx2

__all__ = [
    "PROXY_VARS",
    "APIErrorLike",
    "BadAnswer",
    "HasResponse",
    "PerLoop",
    "api_message",
    "attempts_note",
    "broken_connection",
    "connection_fault",
    "httpx",
    "retry_after",
    "retry_delay",
    "root_cause",
    "sentence",
    "timeout_setting",
    "unfinished_stream",
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


class BadAnswer(Exception):
    """A 200 answer that cannot be used: not the API's JSON, JSON cut or broken, a stream that stopped before its
    end. Nothing has run on it, so the request is made again like any passing fault."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind  # a row of docs/faults.md: not_json, broken_json, no_message_stop


# how a broken connection shows, by the exception types in its chain (httpx's, aiohttp's, the OS's)
_CUT = {"RemoteProtocolError", "ContentLengthError", "ClientPayloadError", "TransferEncodingError", "IncompleteRead"}


def connection_fault(e: BaseException) -> str:
    """What went wrong on the wire: ``timeout``, ``refused``, ``reset`` (closed before an answer), ``cut``
    (closed in the middle of one), or ``connection``."""
    chain = [e]
    while (earlier := chain[-1].__cause__ or chain[-1].__context__) is not None and len(chain) < 20:
        chain.append(earlier)
    names = {type(x).__name__ for x in chain}
    if any(isinstance(x, (TimeoutError, httpx.TimeoutException)) for x in chain) or "APITimeoutError" in names:
        return "timeout"
    if any(isinstance(x, ConnectionResetError) for x in chain) or "without sending a response" in str(chain[-1]):
        return "reset"
    if any(isinstance(x, ConnectionRefusedError) for x in chain) or "ConnectError" in names:
        return "refused"
    if names & _CUT:
        return "cut"
    return "connection"


def timeout_setting(env: Mapping[str, str], name: str) -> float | None:
    """A timeout given in milliseconds (``API_TIMEOUT_MS``, ``CLAUDE_STREAM_IDLE_TIMEOUT_MS``), in seconds."""
    value = env.get(name, "").strip()
    if not value:
        return None
    try:
        ms = float(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not a number of milliseconds (e.g. {name}=600000).") from None
    if ms <= 0:
        raise ConfigError(f"{name}={value!r}: a timeout must be more than 0 ms.")
    return ms / 1000


def attempts_note(attempts: int) -> str:
    """Said after an error that persisted past the retries."""
    if attempts <= 1:
        return ""
    return f" It was tried {attempts} times (DRIVETRAIN_MAX_RETRIES={attempts - 1}); this is how the last try ended."


def sentence(text: str) -> str:
    """``text`` ending as a sentence does, so that another can follow it."""
    text = text.rstrip()
    return text if not text or text.endswith((".", "!", "?")) else text + "."


def broken_connection(url: str, e: BaseException, fault: str) -> str:
    """The connection to ``url`` was made and then broke: the upstream's fault, not the URL's."""
    how = "in the middle of the answer, which was cut short" if fault == "cut" else "before any answer came"
    return (
        f"The connection to {url} was closed {how} ({root_cause(e)}). It was reached, so this is the upstream's "
        "fault (or a proxy's), not your configuration."
    )


def unfinished_stream(url: str, e: BaseException) -> str:
    return (
        f"The stream from {url} ended before the answer was finished ({e}): the upstream may have crashed or cut "
        "the connection; its fault, not your configuration."
    )


def root_cause(e: BaseException) -> str:
    while (earlier := e.__cause__ or e.__context__) is not None:
        e = earlier
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def unreachable_message(
    url: str, e: BaseException, *, timed_out: bool, idle_timeout: float, origin: str, setting: str = ""
) -> str:
    """``url`` could not be reached or went quiet: say so, with the proxy in the way and where the URL came from.
    ``setting``: the one that sets ``idle_timeout``."""
    proxies = [f"{v}={os.environ[v]}" for v in PROXY_VARS if os.environ.get(v)]
    via = f" through the proxy {', '.join(proxies)}" if proxies else ""
    named = f", {setting}" if setting else ""
    kind = f"timed out (no data for {idle_timeout:g} s{named})" if timed_out else "could not be reached"
    return (
        f"{url} {kind}{via} ({root_cause(e)}). The URL came from {origin}; "
        f"check it{' and the proxy setting' if proxies else ''}."
    )

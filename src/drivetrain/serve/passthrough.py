"""Same API in and out: a request to the API the provider itself speaks goes upstream as the client wrote it.

An Anthropic client in front of the Anthropic provider (or an OpenAI client in front of an
OpenAI-compatible one) needs no translation: the request is checked, given the served model's name
and the provider's credentials, and sent on; the answer's bytes come back as they arrive, events
unparsed. So every field the client sends (tool_choice, temperature, thinking, metadata, cache_control,
images, …) reaches the provider, and a request costs one pooled HTTP exchange, not an SDK round trip.
Requests in the other API go through the Model seam instead (``anthropic_api`` / ``openai_api``).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Protocol

from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.models.http import (
    PROXY_VARS,
    BadAnswer,
    broken_connection,
    connection_fault,
    httpx,
    retry_delay,
    unreachable_message,
)
from drivetrain.serve.errors import Dialect, HTTPError
from drivetrain.serve.lean_http import LeanPool
from drivetrain.serve.observe import Usage

RETRYABLE = {408, 409, 500, 502, 503, 504}  # 429 and 529 go back to the client, who owns the backoff
FORWARDED = ("anthropic-version", "anthropic-beta")


class UpstreamResponse(Protocol):
    """An answer whose body is still unread: an ``httpx.Response`` (through a proxy) or a ``LeanResponse``."""

    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    def aiter_raw(self) -> AsyncIterator[bytes]: ...
    async def aread(self) -> bytes: ...
    async def aclose(self) -> None: ...


class Upstream:
    def __init__(
        self,
        dialect: Dialect,
        url: str,
        auth: dict[str, str],
        *,
        max_retries: int,
        backoff: float,
        connect_timeout: float = 15.0,
        idle_timeout: float = 300.0,
        origin: str = "the provider",
    ):
        self.dialect, self.url, self.auth = dialect, url, auth
        self.max_retries, self.backoff, self.origin = max_retries, backoff, origin
        self.timeout = httpx.Timeout(connect=connect_timeout, read=idle_timeout, write=60.0, pool=60.0)
        self._client: httpx.AsyncClient | None = None
        # httpx knows proxies; the lean client costs a tenth of its CPU a request (see lean_http)
        self._lean = (
            None
            if any(os.environ.get(v) for v in PROXY_VARS)
            else LeanPool(url, connect_timeout=connect_timeout, idle_timeout=idle_timeout)
        )

    @classmethod
    def for_model(cls, model: object) -> Upstream | None:
        """The upstream of an HTTP provider; None for one that is not (the local model, a test double)."""
        from drivetrain.models.anthropic import AnthropicModel
        from drivetrain.models.openai import NO_KEY, OpenAIModel

        if type(model) is AnthropicModel:
            creds = model.credentials
            auth = {"x-api-key": creds.api_key} if creds.api_key else {"authorization": f"Bearer {creds.auth_token}"}
            return cls(
                "anthropic",
                model.messages_url,
                auth,
                max_retries=model.max_retries,
                backoff=model.backoff,
                idle_timeout=model.idle_timeout,
                origin=model.base_url_source,
            )
        if type(model) is OpenAIModel:
            return cls(
                "openai",
                model.base_url + "/chat/completions",
                {"authorization": f"Bearer {model.api_key or NO_KEY}"},
                max_retries=model.max_retries,
                backoff=model.backoff,
                idle_timeout=model.idle_timeout,
                origin=model.base_url_source,
            )
        return None

    def warm(self) -> None:
        if self._lean is None:
            self.client()

    def client(self) -> httpx.AsyncClient:
        # Made on first use, inside the serving event loop its connections will belong to; kept for the
        # process's life, so requests reuse warm keep-alive connections instead of opening one each.
        if self._client is None:
            limits = httpx.Limits(max_connections=512, max_keepalive_connections=128, keepalive_expiry=30.0)
            self._client = httpx.AsyncClient(timeout=self.timeout, limits=limits, trust_env=True)
        return self._client

    async def aclose(self) -> None:
        if self._lean is not None:
            await self._lean.aclose()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def post(
        self, body: JsonObject, client_headers: Mapping[str, str], path_suffix: str = ""
    ) -> UpstreamResponse:
        """Send ``body``; the response (an httpx.Response or a LeanResponse) with its body still unread.
        HTTPError for an answer that failed."""
        headers = {"content-type": "application/json", "accept-encoding": "identity", **self.auth}
        headers.update((k, client_headers[k]) for k in FORWARDED if k in client_headers)
        content, url = json.dumps(body).encode(), self.url + path_suffix
        attempt = 0
        while True:
            response: UpstreamResponse
            try:
                if self._lean is not None:
                    response = await self._lean.post(self._lean.path + path_suffix, content, headers)
                else:
                    response = await self.client().send(
                        self.client().build_request("POST", url, content=content, headers=headers), stream=True
                    )
            except (httpx.TransportError, OSError, EOFError) as e:
                if attempt >= self.max_retries:
                    fault = connection_fault(e)
                    message = (
                        broken_connection(url, e, fault)
                        if fault in ("cut", "reset")
                        else unreachable_message(
                            url,
                            e,
                            timed_out=fault == "timeout",
                            idle_timeout=self.timeout.read or 0,
                            origin=self.origin,
                        )
                    )
                    raise HTTPError(
                        502, f"the served model failed: {message}", headers={"x-should-retry": "false"}
                    ) from None
                await asyncio.sleep(retry_delay(e, attempt, self.backoff))
            else:
                if response.status_code < 400:
                    return response
                raw = await response.aread()
                await response.aclose()
                if response.status_code not in RETRYABLE or attempt >= self.max_retries:
                    raise self._failure(url, response, raw)
                await asyncio.sleep(retry_delay(_StatusError(response), attempt, self.backoff))
            attempt += 1

    def _failure(self, url: str, response: UpstreamResponse, raw: bytes) -> HTTPError:
        err: JsonValue
        try:
            err = json.loads(raw)
            err = err.get("error", err) if isinstance(err, dict) else {}
        except ValueError:
            err = {}
        said = err.get("message") if isinstance(err, dict) else None
        said = said or raw[:200].decode("utf-8", "replace")
        status = response.status_code
        if status in (429, 529):  # the provider is busy: say so in kind, with its retry-after, so clients back off
            keep = {k: v for k, v in response.headers.items() if k.startswith("retry-after")}
            return HTTPError(
                status,
                f"{url} answered {status}: {said}",
                kind=err.get("type") or None,
                code="rate_limit_exceeded",
                headers=keep,
            )
        return HTTPError(
            502, f"the served model failed: {url} answered {status}: {said}", headers={"x-should-retry": "false"}
        )


class _StatusError(Exception):
    """What ``retry_delay`` reads a retry-after from."""

    def __init__(self, response: UpstreamResponse):
        self.response = response


async def post_and_read(
    upstream: Upstream, body: JsonObject, headers: Mapping[str, str], usage: Usage, path_suffix: str = ""
) -> tuple[int, str, bytes]:
    """A whole answer from ``upstream``: (status, content type, body), its usage counted. Nothing has reached
    the client yet, so an answer cut short or whose 200 body is not the API's JSON is asked for again, as the
    providers do (docs/faults.md); one that persists is a 502 naming the upstream's fault."""
    attempt = 0
    while True:
        response = await upstream.post(body, headers, path_suffix)
        fault: Exception
        try:
            raw = await response.aread()
        except (httpx.TransportError, OSError, EOFError) as e:
            fault = e
        else:
            ctype = response.headers.get("content-type", "application/json")
            data = _json(raw)
            if response.status_code >= 400 or _an_answer(data, upstream.dialect, path_suffix):
                usage.add(data.get("usage") if isinstance(data, dict) else None)
                return response.status_code, ctype, raw
            kind = "broken_json" if data is None and "json" in ctype else "not_json"
            fault = BadAnswer(kind, f"content-type {ctype}: {raw[:200]!r}")
        finally:
            await response.aclose()
        if attempt >= upstream.max_retries:
            what = (
                f"answered 200 with a broken answer ({fault.kind}: {fault})"
                if isinstance(fault, BadAnswer)
                else f"cut the answer short ({type(fault).__name__}: {fault})"
            )
            raise HTTPError(
                502,
                f"the served model failed: {upstream.url} {what}, {attempt + 1} times; the upstream's fault",
                headers={"x-should-retry": "false"},
            )
        await asyncio.sleep(retry_delay(fault, attempt, upstream.backoff))
        attempt += 1


def _json(raw: bytes) -> JsonValue:
    try:
        data: JsonValue = json.loads(raw)
    except ValueError:
        return None
    return data


def _an_answer(data: JsonValue, dialect: Dialect, path_suffix: str) -> bool:
    """``data`` is an answer of the API (a Messages message, a chat completion, a token count)."""
    if path_suffix == "/count_tokens":
        return isinstance(data, dict) and isinstance(data.get("input_tokens"), int)
    key = "content" if dialect == "anthropic" else "choices"
    return isinstance(data, dict) and isinstance(data.get(key), list)


async def relay(response: UpstreamResponse, usage: Usage, skip_first: bytes = b"") -> AsyncGenerator[bytes, None]:
    """The upstream's SSE bytes, as they arrive, whole frames at a time (so a frame can be looked at: the
    usage is read from those that carry one). ``skip_first``: drop the first frame if it starts so."""
    pending = b""
    try:
        async for chunk in response.aiter_raw():
            pending += chunk
            cut = pending.rfind(b"\n\n")
            if cut < 0:
                continue
            frames, pending = pending[: cut + 2], pending[cut + 2 :]
            if skip_first:
                if frames.startswith(skip_first):
                    frames = frames[frames.find(b"\n\n") + 2 :]
                skip_first = b""
            if b'"usage"' in frames:
                _frame_usage(frames, usage)
            if frames:
                yield frames
        if pending:
            yield pending
    finally:
        await response.aclose()  # on a client's hang-up too: the upstream stops generating


def _frame_usage(frames: bytes, usage: Usage) -> None:
    for frame in frames.split(b"\n\n"):
        for line in frame.split(b"\n"):
            if line.startswith(b"data:") and b'"usage"' in line:
                try:
                    data = json.loads(line[5:])
                except ValueError:
                    continue
                if isinstance(data, dict):
                    usage.add(data.get("usage") or (data.get("message") or {}).get("usage"))

"""The Anthropic Messages provider, on the official ``anthropic`` SDK, streaming.

Retries are ours (not the SDK's) so that a failure in the middle of a stream is
retried the same way as one at the start, and every error that ends a run says
which URL and which setting produced it.

``stream=False`` asks for whole answers (``messages.create``) when nobody watches the text as it comes: the
same request and answer on the wire, without the SSE events to parse. ``aiohttp=True`` sends the requests
through the SDK's aiohttp transport (``anthropic[aiohttp]``), which costs less per request than httpx's
connection pool when many are in flight. A batch sweep turns both on.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict, Unpack

import anthropic

from drivetrain.errors import ConfigError, ModelError
from drivetrain.jsontypes import JsonObject
from drivetrain.messages import Usage, block_from_wire
from drivetrain.models.anthropic_wire import with_cache_breakpoints
from drivetrain.models.base import ModelRequest, ModelResponse
from drivetrain.models.http import (
    BadAnswer,
    HasResponse,
    PerLoop,
    api_message,
    attempts_note,
    broken_connection,
    connection_fault,
    httpx,
    retry_delay,
    sentence,
    timeout_setting,
    unfinished_stream,
    unreachable_message,
)
from drivetrain.pricing import known_window

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MODEL = "claude-sonnet-4-6"
RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}
RETRYABLE_ERROR_TYPES = {"overloaded_error", "api_error", "rate_limit_error"}
# The SDK refuses a request without streaming that may take over ten minutes: max_tokens over 21,333, or over
# 8,192 for some models. A longer answer is streamed whatever ``stream`` says.
NONSTREAMING_MAX_TOKENS = 8192


def normalize_base_url(url: str) -> str:
    """``https://host/``, ``https://host/v1`` and ``https://host/v1/messages`` all mean ``https://host``.

    The SDK appends ``/v1/messages`` itself; a base URL that already ends in it
    would otherwise produce ``/v1/v1/messages``.
    """
    url = url.strip().rstrip("/")
    for suffix in ("/v1/messages", "/v1"):
        if url.endswith(suffix):
            url = url[: -len(suffix)].rstrip("/")
    return url


class AnthropicOptions(TypedDict, total=False):
    """The constructor's settings that ``from_env`` passes through."""

    max_retries: int
    idle_timeout: float
    connect_timeout: float
    backoff: float
    prompt_caching: bool
    context_window: int | None
    stream: bool
    aiohttp: bool
    answer_timeout: float


@dataclass
class Credentials:
    api_key: str | None = None
    auth_token: str | None = None
    source: str = "ANTHROPIC_API_KEY"  # the setting the credential came from, named in errors


class AnthropicModel:
    def __init__(
        self,
        name: str = DEFAULT_MODEL,
        *,
        base_url: str = DEFAULT_BASE_URL,
        credentials: Credentials | None = None,
        base_url_source: str = "the default",
        max_retries: int = 4,
        idle_timeout: float = 120.0,
        connect_timeout: float = 15.0,
        backoff: float = 0.5,
        prompt_caching: bool = True,
        context_window: int | None = None,
        stream: bool = True,
        aiohttp: bool = False,
        answer_timeout: float = 600.0,
    ):
        creds = credentials or Credentials()
        if not creds.api_key and not creds.auth_token:
            raise ConfigError(
                "No Anthropic credential: set ANTHROPIC_API_KEY (sent as x-api-key) "
                "or ANTHROPIC_AUTH_TOKEN (sent as a bearer token)."
            )
        self.name = name
        self.context_window = context_window or known_window(name, "anthropic")
        self.prompt_caching = prompt_caching  # cache_control breakpoints on every request (anthropic_wire)
        self.base_url = normalize_base_url(base_url)
        self.base_url_source = base_url_source
        self.credentials = creds
        self.max_retries = max_retries
        self.backoff = backoff
        self.idle_timeout = idle_timeout
        self.stream = stream
        # A whole answer comes at once, so the idle timeout of a stream cannot apply: this is how long it may take,
        # in all (API_TIMEOUT_MS), however slowly its bytes come.
        self.api_timeout = answer_timeout
        self.answer_timeout = anthropic.Timeout(connect=connect_timeout, read=answer_timeout, write=60.0, pool=60.0)
        self.retries: Counter[str] = Counter()  # retries so far, by fault (a row of docs/faults.md)
        self.on_retry: Callable[[str, int, float], None] | None = None  # (fault, attempt, delay) before each retry
        self.answered = False  # an answer came: a broken one later is the upstream's fault, not a wrong URL
        self.aiohttp = aiohttp and has_aiohttp()  # without the extra installed, httpx: slower, the same requests
        # An API key goes in x-api-key, as Claude Code sends it (this SDK would send it as a bearer
        # token, which some gateways reject); ANTHROPIC_AUTH_TOKEN is the bearer token.
        headers: dict[str, str | anthropic.Omit] = (
            {"x-api-key": creds.api_key, "Authorization": anthropic.Omit()} if creds.api_key else {}
        )
        # httpx's read timeout is per read, so on a stream it is an idle timeout.
        self._clients = PerLoop(
            lambda: anthropic.AsyncAnthropic(
                api_key=creds.api_key,
                auth_token=creds.auth_token,
                base_url=self.base_url,
                max_retries=0,
                # The SDK drops a header whose value is Omit(), but types default_headers as str values only.
                default_headers=headers,  # type: ignore[arg-type]
                timeout=anthropic.Timeout(connect=connect_timeout, read=idle_timeout, write=60.0, pool=60.0),
                http_client=anthropic.DefaultAioHttpClient() if self.aiohttp else None,
            )
        )

    @classmethod
    def from_env(
        cls, model: str | None = None, env: dict[str, str] | None = None, **kw: Unpack[AnthropicOptions]
    ) -> AnthropicModel:
        env = dict(os.environ) if env is None else env
        if env.get("ANTHROPIC_API_KEY"):
            creds = Credentials(api_key=env["ANTHROPIC_API_KEY"], source="ANTHROPIC_API_KEY")
        elif env.get("ANTHROPIC_AUTH_TOKEN"):
            creds = Credentials(auth_token=env["ANTHROPIC_AUTH_TOKEN"], source="ANTHROPIC_AUTH_TOKEN")
        else:
            creds = Credentials()
        base_url = env.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
        source = "ANTHROPIC_BASE_URL" if env.get("ANTHROPIC_BASE_URL") else "the default"
        name = model or env.get("ANTHROPIC_MODEL") or DEFAULT_MODEL
        if env.get("DISABLE_PROMPT_CACHING", "").lower() in ("1", "true", "yes"):
            kw.setdefault("prompt_caching", False)
        if env.get("DRIVETRAIN_MAX_RETRIES"):
            kw.setdefault("max_retries", int(env["DRIVETRAIN_MAX_RETRIES"]))
        if timeout := timeout_setting(env, "API_TIMEOUT_MS"):
            kw.setdefault("answer_timeout", timeout)
        if timeout := timeout_setting(env, "CLAUDE_STREAM_IDLE_TIMEOUT_MS"):
            kw.setdefault("idle_timeout", timeout)
        return cls(name, base_url=base_url, credentials=creds, base_url_source=source, **kw)

    @property
    def messages_url(self) -> str:
        return f"{self.base_url}/v1/messages"

    async def respond(self, request: ModelRequest) -> ModelResponse:
        params = self._params(request)
        streamed = self.stream or request.on_text is not None or request.max_tokens > NONSTREAMING_MAX_TOKENS
        attempt = 0
        while True:
            try:
                if streamed:
                    response = await self._stream_once(params, request.on_text)
                else:
                    response = await self._create_once(params)
            except (anthropic.APIError, httpx.TransportError, BadAnswer, TimeoutError) as e:
                if attempt >= self.max_retries or not _retryable(e):
                    raise self._explain(e, streamed, attempt + 1) from e
                kind = _fault(e)
                self.retries[kind] += 1
                delay = retry_delay(e, attempt, self.backoff)
                if self.on_retry is not None:
                    self.on_retry(kind, attempt + 1, delay)
                await asyncio.sleep(delay)
                attempt += 1
            else:
                self.answered = True
                return response

    async def aclose(self) -> None:
        """Close this event loop's client (its connections); the next request opens another."""
        client = self._clients.take()
        if client is not None:
            await client.close()

    def _params(self, request: ModelRequest) -> JsonObject:
        params: JsonObject = {
            "model": self.name,
            "max_tokens": request.max_tokens,
            "messages": [m.to_wire() for m in request.messages],
        }
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = request.tools
            if request.tool_choice:
                params["tool_choice"] = {"type": request.tool_choice}
        if request.stop_sequences:
            params["stop_sequences"] = request.stop_sequences
        if self.prompt_caching:
            params = with_cache_breakpoints(params, request.messages)
        if request.temperature is not None:  # this SDK's stream() no longer takes it as an argument
            params["extra_body"] = {"temperature": min(request.temperature, 1.0)}
        return params

    async def _stream_once(self, params: JsonObject, on_text: Callable[[str], None] | None) -> ModelResponse:
        async with self._clients.get().messages.stream(**params) as stream:
            ctype = stream.response.headers.get("content-type", "")
            if "text/event-stream" not in ctype:
                raise self._not_messages(ctype, await stream.response.aread())
            ended = False
            try:
                async for event in stream:
                    ended = event.type == "message_stop"
                    if on_text and event.type == "content_block_delta" and event.delta.type == "text_delta":
                        on_text(event.delta.text)
            except ValueError as e:  # a data: line that is not JSON
                raise BadAnswer("broken_json", f"an event of the stream is not JSON ({e})") from e
            if not ended:
                raise BadAnswer("no_message_stop", "the stream ended without message_stop")
            final = await stream.get_final_message()
        # The SDK folds message_delta's cumulative usage into the final message:
        # usage comes from the last event, not from message_start.
        return _from_wire(final.to_dict())

    async def _create_once(self, params: JsonObject) -> ModelResponse:
        async with asyncio.timeout(self.api_timeout):  # the whole answer, however slowly its bytes come
            raw = await self._clients.get().messages.with_raw_response.create(**params, timeout=self.answer_timeout)
            # The answer read as the JSON it is: the SDK's parse() would build its models, only for us to take them
            # apart.
            body = await raw.read()
        try:
            message = json.loads(body)
        except ValueError:
            message = None
        if not (isinstance(message, dict) and isinstance(message.get("content"), list)):
            raise self._not_messages(raw.headers.get("content-type", ""), body)
        return _from_wire(message)

    def _not_messages(self, ctype: str, body: bytes) -> BadAnswer | ModelError:
        """A 200 answer that is not a message: an OpenAI endpoint (a setting to change, not retried), else an
        answer to make again (a gateway's error page, JSON cut or broken) that ``_explain`` words."""
        text = body.decode("utf-8", "replace")
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict) and "choices" in data:
            return ModelError(
                f"{self.messages_url} answered in the OpenAI chat-completions shape (`choices`), not as an "
                f"Anthropic Messages endpoint. Point {self._url_setting()} at an Anthropic-compatible server, "
                "or use the OpenAI-compatible provider (--provider openai with OPENAI_BASE_URL)."
            )
        kind = "broken_json" if data is None and "json" in ctype else "not_json"
        return BadAnswer(kind, f"content-type {ctype or 'none'}: {text[:200]!r}")

    def _url_setting(self) -> str:
        return "ANTHROPIC_BASE_URL" if self.base_url_source == "ANTHROPIC_BASE_URL" else "ANTHROPIC_BASE_URL (unset)"

    def _explain(self, e: Exception, streamed: bool, attempts: int) -> ModelError:
        note = attempts_note(attempts)
        if isinstance(e, (anthropic.AuthenticationError, anthropic.PermissionDeniedError)):
            return ModelError(
                f"The API key was rejected ({e.status_code}) by {self.base_url}. It came from "
                f"{self.credentials.source}; the base URL came from {self._base_url_origin()}. "
                f"Check the key, or that it belongs to this server. Server said: {api_message(e)}"
            )
        if isinstance(e, anthropic.NotFoundError):
            return ModelError(
                f"404 Not Found from {e.response.request.url} (base URL {self.base_url} from "
                f"{self._base_url_origin()}). Check the base URL and the model name "
                f"'{self.name}'. Server said: {api_message(e)}"
            )
        fault = _fault(e) if _retryable(e) else None
        if isinstance(e, BadAnswer):
            if e.kind == "no_message_stop":
                return ModelError(unfinished_stream(self.messages_url, e) + note, fault)
            if not self.answered:  # it never answered as a Messages endpoint: most likely the wrong URL
                return ModelError(
                    f"{self.messages_url} did not answer as an Anthropic Messages endpoint ({e}). "
                    f"Check {self._url_setting()}.{note}"
                )
            return ModelError(
                f"{self.messages_url} answered 200 with a broken answer ({e.kind}: {e}). It answered well "
                f"before, so this is the upstream's fault, not your configuration.{note}",
                fault,
            )
        if isinstance(e, TimeoutError):
            return ModelError(
                f"{self.messages_url} sent no whole answer within {self.api_timeout:g} s (API_TIMEOUT_MS).{note}",
                fault,
            )
        if isinstance(e, (anthropic.APIConnectionError, httpx.TransportError)):
            timed_out = isinstance(e, (anthropic.APITimeoutError, httpx.TimeoutException))
            read_timeout = self.idle_timeout if streamed else self.answer_timeout.read or 0.0
            if fault in ("cut", "reset"):
                return ModelError(broken_connection(self.messages_url, e, fault) + note, fault)
            return ModelError(
                unreachable_message(
                    self.messages_url,
                    e,
                    timed_out=timed_out,
                    idle_timeout=read_timeout,
                    origin=self._base_url_origin(),
                    setting="CLAUDE_STREAM_IDLE_TIMEOUT_MS" if streamed else "API_TIMEOUT_MS",
                )
                + note,
                fault,
            )
        if isinstance(e, anthropic.APIStatusError):
            return ModelError(f"{self.messages_url} answered {e.status_code}: {sentence(api_message(e))}{note}", fault)
        return ModelError(f"{self.messages_url}: {e}{note}", fault)

    def _base_url_origin(self) -> str:
        if self.base_url_source == "ANTHROPIC_BASE_URL":
            return "ANTHROPIC_BASE_URL"
        return f"the default ({DEFAULT_BASE_URL}; set ANTHROPIC_BASE_URL to change it)"


def has_aiohttp() -> bool:
    """The SDK's aiohttp transport can be used (``anthropic[aiohttp]``: aiohttp, and an SDK that has it)."""
    return hasattr(anthropic, "DefaultAioHttpClient") and importlib.util.find_spec("aiohttp") is not None


def _from_wire(message: JsonObject) -> ModelResponse:
    u = message.get("usage") or {}
    usage = Usage(
        u.get("input_tokens") or 0,
        u.get("output_tokens") or 0,
        u.get("cache_creation_input_tokens") or 0,
        u.get("cache_read_input_tokens") or 0,
    )
    content = tuple(block_from_wire(b) for b in message["content"])
    return ModelResponse(
        content, message.get("stop_reason") or "end_turn", usage, message.get("model") or "", message.get("id") or ""
    )


def _retryable(e: Exception) -> bool:
    if isinstance(e, ModelError):  # an answer in another API's shape: a setting to change
        return False
    if isinstance(e, (anthropic.APIConnectionError, httpx.TransportError, BadAnswer, TimeoutError)):
        return True
    if not isinstance(e, anthropic.APIError):
        return False
    response = e.response if isinstance(e, HasResponse) else None
    if response is not None and response.headers.get("x-should-retry") == "false":
        return False  # the server (e.g. `drivetrain serve`, whose own backend already retried) says don't
    if isinstance(e, anthropic.APIStatusError) and e.status_code in RETRYABLE_STATUS:
        return True
    return _stream_error(e) in RETRYABLE_ERROR_TYPES


def _stream_error(e: anthropic.APIError) -> str | None:
    """The type of an ``error`` event in the middle of a stream (it arrives with the stream's 200 status)."""
    err = e.body.get("error", e.body) if isinstance(e.body, dict) else None
    return str(err.get("type")) if isinstance(err, dict) else None


def _fault(e: Exception) -> str:
    """The row of docs/faults.md that ``e`` is."""
    if isinstance(e, BadAnswer):
        return e.kind
    if isinstance(e, anthropic.APIStatusError) and e.status_code != 200:
        return f"http_{e.status_code}"
    if isinstance(e, anthropic.APIError) and not isinstance(e, anthropic.APIConnectionError):
        return "overloaded_in_stream" if _stream_error(e) == "overloaded_error" else "error_in_stream"
    return connection_fault(e)

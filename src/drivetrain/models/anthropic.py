"""The Anthropic Messages provider, on the official ``anthropic`` SDK, streaming.

Retries are ours (not the SDK's) so that a failure in the middle of a stream is
retried the same way as one at the start, and every error that ends a run says
which URL and which setting produced it.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass

import anthropic

from drivetrain.pricing import known_window
from drivetrain.errors import ConfigError, ModelError
from drivetrain.messages import Usage, block_from_wire
from drivetrain.models.anthropic_wire import with_cache_breakpoints
from drivetrain.models.base import ModelRequest, ModelResponse
from drivetrain.models.http import PerLoop, api_message, httpx, retry_delay, unreachable_message

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MODEL = "claude-sonnet-4-6"
RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}
RETRYABLE_ERROR_TYPES = {"overloaded_error", "api_error", "rate_limit_error"}


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


@dataclass
class Credentials:
    api_key: str | None = None
    auth_token: str | None = None
    source: str = "ANTHROPIC_API_KEY"  # the setting the credential came from, named in errors


class AnthropicModel:
    def __init__(self, name: str = DEFAULT_MODEL, *, base_url: str = DEFAULT_BASE_URL,
                 credentials: Credentials | None = None, base_url_source: str = "the default",
                 max_retries: int = 4, idle_timeout: float = 120.0, connect_timeout: float = 15.0,
                 backoff: float = 0.5, prompt_caching: bool = True, context_window: int | None = None):
        creds = credentials or Credentials()
        if not creds.api_key and not creds.auth_token:
            raise ConfigError("No Anthropic credential: set ANTHROPIC_API_KEY (sent as x-api-key) "
                              "or ANTHROPIC_AUTH_TOKEN (sent as a bearer token).")
        self.name = name
        self.context_window = context_window or known_window(name, "anthropic")
        self.prompt_caching = prompt_caching  # cache_control breakpoints on every request (anthropic_wire)
        self.base_url = normalize_base_url(base_url)
        self.base_url_source = base_url_source
        self.credentials = creds
        self.max_retries = max_retries
        self.backoff = backoff
        self.idle_timeout = idle_timeout
        # An API key goes in x-api-key, as Claude Code sends it (this SDK would send it as a bearer
        # token, which some gateways reject); ANTHROPIC_AUTH_TOKEN is the bearer token.
        headers = {"x-api-key": creds.api_key, "Authorization": anthropic.Omit()} if creds.api_key else {}
        # httpx's read timeout is per read, so on a stream it is an idle timeout.
        self._clients = PerLoop(lambda: anthropic.AsyncAnthropic(
            api_key=creds.api_key, auth_token=creds.auth_token, base_url=self.base_url, max_retries=0,
            default_headers=headers,
            timeout=anthropic.Timeout(connect=connect_timeout, read=idle_timeout, write=60.0, pool=60.0),
        ))

    @classmethod
    def from_env(cls, model: str | None = None, env: dict[str, str] | None = None, **kw) -> AnthropicModel:
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
        return cls(name, base_url=base_url, credentials=creds, base_url_source=source, **kw)

    @property
    def messages_url(self) -> str:
        return f"{self.base_url}/v1/messages"

    async def respond(self, request: ModelRequest) -> ModelResponse:
        attempt = 0
        while True:
            try:
                return await self._stream_once(request)
            except (anthropic.APIError, httpx.TransportError) as e:
                if attempt >= self.max_retries or not _retryable(e):
                    raise self._explain(e) from e
                await asyncio.sleep(retry_delay(e, attempt, self.backoff))
                attempt += 1

    async def _stream_once(self, request: ModelRequest) -> ModelResponse:
        params: dict = {
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
        async with self._clients.get().messages.stream(**params) as stream:
            await self._check_shape(stream.response)
            async for event in stream:
                if request.on_text and event.type == "content_block_delta" and event.delta.type == "text_delta":
                    request.on_text(event.delta.text)
            final = await stream.get_final_message()
        # The SDK folds message_delta's cumulative usage into the final message:
        # usage comes from the last event, not from message_start.
        u = final.usage
        usage = Usage(u.input_tokens or 0, u.output_tokens or 0,
                      getattr(u, "cache_creation_input_tokens", 0) or 0, getattr(u, "cache_read_input_tokens", 0) or 0)
        content = tuple(block_from_wire(b.to_dict()) for b in final.content)
        return ModelResponse(content, final.stop_reason or "end_turn", usage, final.model, final.id)

    async def _check_shape(self, response) -> None:
        ctype = response.headers.get("content-type", "")
        if "text/event-stream" in ctype:
            return
        body = (await response.aread()).decode("utf-8", "replace")
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if isinstance(data, dict) and "choices" in data:
            raise ModelError(
                f"{self.messages_url} answered in the OpenAI chat-completions shape (`choices`), not as an "
                f"Anthropic Messages endpoint. Point {self._url_setting()} at an Anthropic-compatible server, "
                "or use the OpenAI-compatible provider (--provider openai with OPENAI_BASE_URL).")
        raise ModelError(f"{self.messages_url} did not answer as an Anthropic Messages endpoint "
                         f"(content-type {ctype or 'none'}): {body[:200]!r}. Check {self._url_setting()}.")

    def _url_setting(self) -> str:
        return "ANTHROPIC_BASE_URL" if self.base_url_source == "ANTHROPIC_BASE_URL" else "ANTHROPIC_BASE_URL (unset)"

    def _explain(self, e: Exception) -> ModelError:
        if isinstance(e, (anthropic.AuthenticationError, anthropic.PermissionDeniedError)):
            return ModelError(
                f"The API key was rejected ({e.status_code}) by {self.base_url}. It came from "
                f"{self.credentials.source}; the base URL came from {self._base_url_origin()}. "
                f"Check the key, or that it belongs to this server. Server said: {api_message(e)}")
        if isinstance(e, anthropic.NotFoundError):
            return ModelError(f"404 Not Found from {e.response.request.url} (base URL {self.base_url} from "
                              f"{self._base_url_origin()}). Check the base URL and the model name "
                              f"'{self.name}'. Server said: {api_message(e)}")
        if isinstance(e, (anthropic.APIConnectionError, httpx.TransportError)):
            timed_out = isinstance(e, (anthropic.APITimeoutError, httpx.TimeoutException))
            return ModelError(unreachable_message(self.messages_url, e, timed_out=timed_out,
                                                  idle_timeout=self.idle_timeout, origin=self._base_url_origin()))
        if isinstance(e, anthropic.APIStatusError):
            return ModelError(f"{self.messages_url} answered {e.status_code}: {api_message(e)}")
        return ModelError(f"{self.messages_url}: {e}")

    def _base_url_origin(self) -> str:
        if self.base_url_source == "ANTHROPIC_BASE_URL":
            return "ANTHROPIC_BASE_URL"
        return f"the default ({DEFAULT_BASE_URL}; set ANTHROPIC_BASE_URL to change it)"


def _retryable(e: Exception) -> bool:
    if isinstance(e, (anthropic.APIConnectionError, httpx.TransportError)):
        return True
    if not isinstance(e, anthropic.APIError):
        return False
    response = getattr(e, "response", None)
    if response is not None and response.headers.get("x-should-retry") == "false":
        return False  # the server (e.g. `drivetrain serve`, whose own backend already retried) says don't
    if isinstance(e, anthropic.APIStatusError) and e.status_code in RETRYABLE_STATUS:
        return True
    # an `error` event in the middle of a stream arrives with the stream's 200 status
    err = e.body.get("error", e.body) if isinstance(e.body, dict) else None
    return isinstance(err, dict) and err.get("type") in RETRYABLE_ERROR_TYPES

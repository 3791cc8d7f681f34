"""The OpenAI-compatible chat-completions provider, on the official ``openai`` SDK, streaming.

It speaks to OpenAI and to every server that copies its API: Ollama, llama.cpp's server, vLLM,
LM Studio, gateways. As in the Anthropic provider, retries are ours (the SDK's are off), so a
stream that breaks half-way is retried like one that never started, and every error that ends a
run names the URL and the setting it came from.

Configuration (``from_env``):

- ``OPENAI_BASE_URL``: default ``https://api.openai.com/v1``. The SDK appends ``/chat/completions``
  to it, so it must include the API's version path. A URL given as a bare host
  (``http://localhost:11434``) gets ``/v1`` added, since every common server (Ollama, llama.cpp,
  vLLM, LM Studio) serves the API there; a URL with any path is kept as given (Gemini's
  ``…/v1beta/openai``, Groq's ``…/openai/v1``). A URL ending in ``/chat/completions`` is taken as
  the endpoint itself, used exactly: the way to reach a server that serves chat completions at
  its root.
- ``OPENAI_API_KEY``: optional; local servers need none, so a placeholder is sent instead. Only
  the default (api.openai.com) URL without a key is refused up front.
- ``OPENAI_MODEL`` or ``--model``: default ``gpt-4o-mini``.
- ``DRIVETRAIN_MAX_RETRIES``: how often a transient failure is retried (docs/faults.md).
- ``CLAUDE_STREAM_IDLE_TIMEOUT_MS``: how long the stream may go without data (default 300 s: a local server on
  a CPU may take minutes to read a long prompt).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import uuid
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict, Unpack
from urllib.parse import urlsplit

import openai

from drivetrain.errors import ConfigError, ModelError
from drivetrain.jsontypes import JsonObject
from drivetrain.messages import Message, ToolUseBlock
from drivetrain.models.base import ModelRequest, ModelResponse
from drivetrain.models.http import (
    BadAnswer,
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
from drivetrain.models.openai_wire import FinishReason, from_chat_completion, to_chat_messages, to_chat_tools
from drivetrain.pricing import known_window

if TYPE_CHECKING:
    from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"
NO_KEY = "no-key"  # sent when OPENAI_API_KEY is unset: local servers ignore it, the SDK insists on one
ENDPOINT = "/chat/completions"
RETRYABLE_ERROR_TYPES = {"server_error", "api_error", "overloaded_error", "rate_limit_error", "rate_limit_exceeded"}
_ANTHROPIC_EVENTS = (
    "message_start",
    "message_delta",
    "message_stop",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "ping",
)


def normalize_base_url(url: str) -> str:
    """Trailing slashes dropped; a bare host gets ``/v1``; ``…/chat/completions`` means that endpoint."""
    url = url.strip().rstrip("/")
    if url.endswith(ENDPOINT):
        return url[: -len(ENDPOINT)].rstrip("/")
    return url if urlsplit(url).path.strip("/") else url + "/v1"


class OpenAIOptions(TypedDict, total=False):
    """The constructor's settings that ``from_env`` passes through (or fills in from the environment)."""

    max_retries: int
    idle_timeout: float
    connect_timeout: float
    backoff: float
    organization: str | None
    project: str | None
    context_window: int | None


class OpenAIModel:
    def __init__(
        self,
        name: str = DEFAULT_MODEL,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        base_url_source: str = "the default",
        max_retries: int = 4,
        idle_timeout: float = 300.0,
        connect_timeout: float = 15.0,
        backoff: float = 0.5,
        organization: str | None = None,
        project: str | None = None,
        context_window: int | None = None,
    ):
        self.name = name
        self.context_window = context_window or known_window(name, "openai")
        self.base_url = normalize_base_url(base_url)
        self.v1_added = self.base_url == base_url.strip().rstrip("/") + "/v1"  # named in a 404's message
        self.base_url_source = base_url_source
        self.api_key = api_key or None
        if self.api_key is None and urlsplit(self.base_url).hostname == "api.openai.com":
            raise ConfigError(
                "No OpenAI API key: set OPENAI_API_KEY, or set OPENAI_BASE_URL to an "
                "OpenAI-compatible server that needs none (Ollama, llama.cpp, vLLM, LM Studio)."
            )
        self.max_retries = max_retries
        self.backoff = backoff
        # Generous: a local server on a CPU may take minutes to read a long prompt before the first token.
        # httpx's read timeout is per read, so on a stream it is an idle timeout.
        self.idle_timeout = idle_timeout
        self.retries: Counter[str] = Counter()  # retries so far, by fault (a row of docs/faults.md)
        self.on_retry: Callable[[str, int, float], None] | None = None  # (fault, attempt, delay) before each retry
        self.answered = False  # an answer came: a broken one later is the upstream's fault, not a wrong URL
        self._clients = PerLoop(
            lambda: openai.AsyncOpenAI(
                api_key=self.api_key or NO_KEY,
                base_url=self.base_url,
                max_retries=0,
                organization=organization,
                project=project,
                timeout=openai.Timeout(connect=connect_timeout, read=idle_timeout, write=60.0, pool=60.0),
            )
        )

    @classmethod
    def from_env(
        cls, model: str | None = None, env: dict[str, str] | None = None, **kw: Unpack[OpenAIOptions]
    ) -> OpenAIModel:
        env = dict(os.environ) if env is None else env
        base_url = env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        source = "OPENAI_BASE_URL" if env.get("OPENAI_BASE_URL") else "the default"
        name = model or env.get("OPENAI_MODEL") or DEFAULT_MODEL
        if env.get("DRIVETRAIN_MAX_RETRIES"):
            kw.setdefault("max_retries", int(env["DRIVETRAIN_MAX_RETRIES"]))
        if timeout := timeout_setting(env, "CLAUDE_STREAM_IDLE_TIMEOUT_MS"):
            kw.setdefault("idle_timeout", timeout)
        kw.setdefault("organization", env.get("OPENAI_ORG_ID") or None)
        kw.setdefault("project", env.get("OPENAI_PROJECT_ID") or None)
        return cls(name, base_url=base_url, api_key=env.get("OPENAI_API_KEY"), base_url_source=source, **kw)

    @property
    def completions_url(self) -> str:
        return self.base_url + ENDPOINT

    async def respond(self, request: ModelRequest) -> ModelResponse:
        attempt = 0
        while True:
            try:
                response = await self._stream_once(request)
            except (openai.APIError, httpx.TransportError, BadAnswer) as e:
                if attempt >= self.max_retries or not _retryable(e):
                    raise self._explain(e, attempt + 1) from e
                kind = _fault(e)
                self.retries[kind] += 1
                delay = retry_delay(e, attempt, self.backoff)
                if self.on_retry is not None:
                    self.on_retry(kind, attempt + 1, delay)
                await asyncio.sleep(delay)
                attempt += 1
            else:
                self.answered = True
                return _fresh_ids(response, request.messages)

    def _params(self, request: ModelRequest) -> CompletionCreateParamsStreaming:
        params: CompletionCreateParamsStreaming = {
            "model": self.name,
            "messages": to_chat_messages(request.system, request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        # OpenAI's own API wants max_completion_tokens (its reasoning models refuse max_tokens);
        # the servers that copy it know max_tokens, and not all of them know the newer name.
        if urlsplit(self.base_url).hostname == "api.openai.com":
            params["max_completion_tokens"] = request.max_tokens
        else:
            params["max_tokens"] = request.max_tokens
        if request.tools:  # an empty list is an error on OpenAI's API
            params["tools"] = to_chat_tools(request.tools)
            if request.tool_choice:
                params["tool_choice"] = "required" if request.tool_choice == "any" else request.tool_choice
        if request.stop_sequences:
            params["stop"] = request.stop_sequences
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.seed is not None:
            params["seed"] = request.seed
        return params

    async def _stream_once(self, request: ModelRequest) -> ModelResponse:
        stream = await self._clients.get().chat.completions.create(**self._params(request))
        async with stream:
            whole = await self._check_shape(stream.response)
            if whole is not None:  # a server that ignored stream=true and sent the whole completion
                if request.on_text and whole.message.text:
                    request.on_text(whole.message.text)
                return whole
            acc = ChunkAccumulator()
            try:
                async for chunk in stream:
                    data = chunk.to_dict()
                    if "choices" not in data and data.get("type") in _ANTHROPIC_EVENTS:
                        raise self._anthropic_shape()
                    piece = acc.add(data)
                    if piece and request.on_text:
                        request.on_text(piece)
            except ValueError as e:  # a data: line that is not JSON
                raise BadAnswer("broken_json", f"a chunk of the stream is not JSON ({e})") from e
        if acc.finish_reason is None:
            raise BadAnswer("no_message_stop", "the stream ended before a finish_reason")
        return from_chat_completion(acc.completion())

    async def _check_shape(self, response: httpx.Response) -> ModelResponse | None:
        ctype = response.headers.get("content-type", "")
        if "text/event-stream" in ctype:
            return None
        body = (await response.aread()).decode("utf-8", "replace")
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("choices"), list):
            return from_chat_completion(data)
        if isinstance(data, dict) and data.get("type") == "message" and isinstance(data.get("content"), list):
            raise self._anthropic_shape()
        kind = "broken_json" if data is None and "json" in ctype else "not_json"
        raise BadAnswer(kind, f"content-type {ctype or 'none'}: {body[:200]!r}")

    def _anthropic_shape(self) -> ModelError:
        return ModelError(
            f"{self.completions_url} answered in the Anthropic Messages shape (`type: message`, a `content` list, "
            f"no `choices`), not as an OpenAI chat-completions endpoint. Point {self._url_setting()} at an "
            "OpenAI-compatible server, or use the Anthropic provider (--provider anthropic with ANTHROPIC_BASE_URL)."
        )

    def _url_setting(self) -> str:
        return "OPENAI_BASE_URL" if self.base_url_source == "OPENAI_BASE_URL" else "OPENAI_BASE_URL (unset)"

    def _base_url_origin(self) -> str:
        if self.base_url_source == "OPENAI_BASE_URL":
            return "OPENAI_BASE_URL"
        return f"the default ({DEFAULT_BASE_URL}; set OPENAI_BASE_URL to change it)"

    def _explain(self, e: openai.APIError | httpx.TransportError | BadAnswer, attempts: int) -> ModelError:
        note = attempts_note(attempts)
        if isinstance(e, (openai.AuthenticationError, openai.PermissionDeniedError)):
            key = (
                "It came from OPENAI_API_KEY; check the key, or that it belongs to this server."
                if self.api_key
                else "No key was set (OPENAI_API_KEY is unset, so a placeholder was sent); set OPENAI_API_KEY."
            )
            return ModelError(
                f"The API key was rejected ({e.status_code}) by {self.base_url}. {key} The base URL "
                f"came from {self._base_url_origin()}. Server said: {api_message(e)}"
            )
        if isinstance(e, openai.NotFoundError):
            added = " (/v1 was added to it because it had no path)" if self.v1_added else ""
            return ModelError(
                f"404 Not Found from {e.response.request.url} (base URL {self.base_url}{added} from "
                f"{self._base_url_origin()}). Check the base URL and the model name '{self.name}' "
                f"(OPENAI_MODEL or --model). Server said: {api_message(e)}"
            )
        fault = _fault(e) if _retryable(e) else None
        if isinstance(e, BadAnswer):
            if e.kind == "no_message_stop":
                return ModelError(unfinished_stream(self.completions_url, e) + note, fault)
            if not self.answered:  # it never answered as a chat-completions endpoint: most likely the wrong URL
                return ModelError(
                    f"{self.completions_url} did not answer as an OpenAI chat-completions endpoint ({e}). "
                    f"Check {self._url_setting()}.{note}"
                )
            return ModelError(
                f"{self.completions_url} answered 200 with a broken answer ({e.kind}: {e}). It answered well "
                f"before, so this is the upstream's fault, not your configuration.{note}",
                fault,
            )
        if isinstance(e, (openai.APIConnectionError, httpx.TransportError)):
            if fault in ("cut", "reset"):
                return ModelError(broken_connection(self.completions_url, e, fault) + note, fault)
            timed_out = isinstance(e, (openai.APITimeoutError, httpx.TimeoutException))
            return ModelError(
                unreachable_message(
                    self.completions_url,
                    e,
                    timed_out=timed_out,
                    idle_timeout=self.idle_timeout,
                    origin=self._base_url_origin(),
                    setting="CLAUDE_STREAM_IDLE_TIMEOUT_MS",
                )
                + note,
                fault,
            )
        if isinstance(e, openai.APIStatusError):
            return ModelError(
                f"{self.completions_url} answered {e.status_code}: {sentence(api_message(e))}{note}", fault
            )
        return ModelError(f"{self.completions_url} failed mid-stream: {sentence(api_message(e))}{note}", fault)


class ChunkAccumulator:
    """Builds one ``chat.completion`` dict from ``chat.completion.chunk`` dicts (choice 0).

    Tool calls are put together by their ``index``; a server that leaves the index out gets one
    call per new ``id``. Usage comes from the final chunk (``choices: []``).
    """

    def __init__(self) -> None:
        self.id = self.model = ""
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, JsonObject] = {}
        self.finish_reason: FinishReason | None = None
        self.usage: JsonObject | None = None

    def add(self, chunk: JsonObject) -> str:
        """Take one chunk; returns the text it added."""
        self.id = self.id or chunk.get("id") or ""
        self.model = self.model or chunk.get("model") or ""
        self.usage = chunk.get("usage") or self.usage
        choice = next((c for c in chunk.get("choices") or [] if (c.get("index") or 0) == 0), None)
        if choice is None:
            return ""
        self.finish_reason = choice.get("finish_reason") or self.finish_reason
        delta = choice.get("delta") or {}
        for call in delta.get("tool_calls") or []:
            self._add_call(call)
        if delta.get("refusal"):
            self.refusal.append(delta["refusal"])
        piece = delta.get("content") or ""
        self.text.append(piece)
        return piece

    def _add_call(self, call: JsonObject) -> None:
        index = call.get("index")
        if index is None:
            last = max(self.calls, default=None)
            new = last is None or (call.get("id") and call["id"] != self.calls[last]["id"])
            index = len(self.calls) if new or last is None else last
        acc = self.calls.setdefault(index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
        fn = call.get("function") or {}
        acc["id"] = acc["id"] or call.get("id") or ""
        if fn.get("name") and fn["name"] != acc["function"]["name"]:
            acc["function"]["name"] += fn["name"]
        args = fn.get("arguments")
        acc["function"]["arguments"] += json.dumps(args) if isinstance(args, dict) else (args or "")

    def completion(self) -> JsonObject:
        message: JsonObject = {"role": "assistant", "content": "".join(self.text) or None}
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return {
            "id": self.id,
            "object": "chat.completion",
            "model": self.model,
            "usage": self.usage,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        }


def _fresh_ids(response: ModelResponse, history: list[Message]) -> ModelResponse:
    """Give a new id to a tool call whose id is missing or already used (some servers number calls
    ``call_0``, ``call_1``, … on every turn): a repeated id would break the history."""
    used = {b.id for m in history for b in m.content if isinstance(b, ToolUseBlock)}
    content = []
    for b in response.content:
        if isinstance(b, ToolUseBlock):
            if not b.id or b.id in used:
                b = dataclasses.replace(b, id=f"call_{uuid.uuid4().hex[:24]}")
            used.add(b.id)
        content.append(b)
    return dataclasses.replace(response, content=tuple(content))


def _retryable(e: openai.APIError | httpx.TransportError | BadAnswer) -> bool:
    if isinstance(e, (openai.APIConnectionError, httpx.TransportError, BadAnswer)):
        return True
    if isinstance(e, openai.APIStatusError):
        return e.status_code in (408, 409, 429) or e.status_code >= 500
    return _stream_error(e) in RETRYABLE_ERROR_TYPES


def _stream_error(e: openai.APIError) -> str | None:
    """The type (or code) of an error sent as a chunk in the middle of a stream (with the stream's 200 status)."""
    err = e.body.get("error", e.body) if isinstance(e.body, dict) else None
    if not isinstance(err, dict):
        return None
    for key in ("type", "code"):
        if err.get(key) in RETRYABLE_ERROR_TYPES:
            return str(err[key])
    return str(err.get("type"))


def _fault(e: openai.APIError | httpx.TransportError | BadAnswer) -> str:
    """The row of docs/faults.md that ``e`` is."""
    if isinstance(e, BadAnswer):
        return e.kind
    if isinstance(e, openai.APIStatusError):
        return f"http_{e.status_code}"
    if isinstance(e, openai.APIError) and not isinstance(e, openai.APIConnectionError):
        return "overloaded_in_stream" if _stream_error(e) == "overloaded_error" else "error_in_stream"
    return connection_fault(e)

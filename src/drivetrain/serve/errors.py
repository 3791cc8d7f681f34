"""Answers other than 200, each in the shape of the API the request was made to."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal

from drivetrain.errors import HarnessError
from drivetrain.jsontypes import JsonObject

Dialect = Literal["anthropic", "openai"]  # the API a request was made in, and so the shape of its answers

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
_OPENAI_TYPES = {401: "invalid_request_error", 403: "permission_error", 429: "rate_limit_error"}

ANTHROPIC_PATHS = ("/v1/messages", "/v1/messages/count_tokens")


class HTTPError(Exception):
    """An answer other than 200; rendered in the shape of the API the request was made to.

    ``kind`` overrides the error type (Anthropic's ``error.type``, OpenAI's ``error.type``);
    ``code`` is OpenAI's ``error.code`` (``invalid_api_key``, ``rate_limit_exceeded``).
    """

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        kind: str | None = None,
        headers: dict[str, str] | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code
        self.headers = headers or {}


def dialect_of(path: str, headers: Mapping[str, str]) -> Dialect:
    """Which API's error shape a request gets: its path's, else Anthropic's if it sent anthropic-version."""
    if path in ANTHROPIC_PATHS:
        return "anthropic"
    if path.endswith("/chat/completions"):
        return "openai"
    return "anthropic" if "anthropic-version" in headers else "openai"


def error_body(dialect: Dialect, e: HTTPError) -> JsonObject:
    if dialect == "anthropic":
        kind = e.kind or _ANTHROPIC_TYPES.get(e.status, "api_error" if e.status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": e.message}}
    kind = (e.kind if e.kind != "overloaded_error" else None) or _OPENAI_TYPES.get(
        e.status, "server_error" if e.status >= 500 else "invalid_request_error"
    )
    return {"error": {"message": e.message, "type": kind, "param": e.param, "code": e.code}}


def error_bytes(dialect: Dialect, e: HTTPError) -> bytes:
    return json.dumps(error_body(dialect, e)).encode()


def model_failure(e: BaseException) -> HTTPError:
    """The model call failed: the provider's own message (it already retried), or a bug's one line."""
    if isinstance(e, HTTPError):
        return e
    if isinstance(e, HarnessError):
        return HTTPError(502, f"the served model failed: {e}", headers={"x-should-retry": "false"})
    return HTTPError(500, f"internal error in drivetrain serve: {type(e).__name__}: {e}")


def unauthorized(has_credential: bool) -> HTTPError:
    said = "the API key is not valid" if has_credential else "no API key: send it as x-api-key or Authorization: Bearer"
    return HTTPError(
        401,
        f"{said} (this server's key is DRIVETRAIN_SERVE_API_KEY)",
        code="invalid_api_key",
        headers={"www-authenticate": "Bearer"},
    )


def overloaded(retry_after: int, why: str) -> HTTPError:
    """Too many requests waiting: Anthropic's overloaded_error shape, OpenAI's rate-limit one, both 429."""
    return HTTPError(
        429, why, kind="overloaded_error", code="rate_limit_exceeded", headers={"retry-after": str(retry_after)}
    )

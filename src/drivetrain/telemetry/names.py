"""The names telemetry speaks: the OpenTelemetry GenAI semantic conventions for spans, Claude Code's for metrics and
events (so a Claude Code dashboard works on drivetrain), and the attributes built from a run's data."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Mapping

from drivetrain.control.permissions.commands import analyze_command
from drivetrain.control.redact import redact
from drivetrain.jsontypes import JsonObject
from drivetrain.messages import Usage
from drivetrain.models.base import Model, ModelRequest, ModelResponse
from drivetrain.pricing import Wrapper

AttributeValue = str | bool | int | float | list[str]
Attributes = dict[str, AttributeValue]

AGENT = "drivetrain"
CONTENT_LIMIT = 16_384  # characters of a prompt or a tool's input or output, when they are sent at all

# Claude Code's metrics (its monitoring docs), and drivetrain's own
SESSIONS = "claude_code.session.count"
TOKENS = "claude_code.token.usage"
COST = "claude_code.cost.usage"
LINES = "claude_code.lines_of_code.count"
COMMITS = "claude_code.commit.count"
PULL_REQUESTS = "claude_code.pull_request.count"
EDIT_DECISIONS = "claude_code.code_edit_tool.decision"
ACTIVE_TIME = "claude_code.active_time.total"
# Claude Code's events (OpenTelemetry log records with an event name)
USER_PROMPT = "claude_code.user_prompt"
API_REQUEST = "claude_code.api_request"
API_ERROR = "claude_code.api_error"
TOOL_RESULT = "claude_code.tool_result"
TOOL_DECISION = "claude_code.tool_decision"


def version() -> str:
    """drivetrain's version (``service.version``, and ``app.version`` when OTEL_METRICS_INCLUDE_VERSION asks)."""
    try:
        return importlib.metadata.version("drivetrain")
    except importlib.metadata.PackageNotFoundError:
        return "0"


EDIT_TOOLS = ("Edit", "Write", "MultiEdit", "NotebookEdit")
TOKEN_TYPES = ("input", "output", "cacheRead", "cacheCreation")


def provider_of(model: Model | object) -> str:
    """``gen_ai.provider.name``: the innermost model's kind."""
    while isinstance(model, Wrapper) and model.inner is not None:
        model = model.inner
    kind = type(model).__name__.lower()
    for prefix, name in (("anthropic", "anthropic"), ("openai", "openai"), ("local", "llama_cpp")):
        if kind.startswith(prefix):
            return name
    return AGENT


def usage_attributes(usage: Usage) -> Attributes:
    """GenAI usage: ``input_tokens`` counts every input token, cached or not, as the conventions ask; the cache
    reads and writes are also given apart (Anthropic's own ``input_tokens`` leaves both out)."""
    return {
        "gen_ai.usage.input_tokens": usage.input_tokens
        + usage.cache_read_input_tokens
        + usage.cache_creation_input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
    }


def tokens_by_type(usage: Usage) -> dict[str, int]:
    """Claude Code's ``type`` attribute of ``claude_code.token.usage``: four disjoint kinds."""
    return {
        "input": usage.input_tokens,
        "output": usage.output_tokens,
        "cacheRead": usage.cache_read_input_tokens,
        "cacheCreation": usage.cache_creation_input_tokens,
    }


def request_attributes(model: str, provider: str, request: ModelRequest) -> Attributes:
    attrs: Attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": request.max_tokens,
    }
    if request.temperature is not None:
        attrs["gen_ai.request.temperature"] = request.temperature
    if request.stop_sequences:
        attrs["gen_ai.request.stop_sequences"] = list(request.stop_sequences)
    if request.tool_choice is not None:
        attrs["drivetrain.request.tool_choice"] = request.tool_choice
    attrs["drivetrain.request.tools"] = len(request.tools)
    return attrs


def response_attributes(response: ModelResponse, cost: float | None) -> Attributes:
    attrs: Attributes = {"gen_ai.response.finish_reasons": [response.stop_reason], **usage_attributes(response.usage)}
    if response.model:
        attrs["gen_ai.response.model"] = response.model
    if response.id:
        attrs["gen_ai.response.id"] = response.id
    if cost is not None:
        attrs["drivetrain.cost_usd"] = cost
    return attrs


def content_text(text: str) -> str:
    """Content that leaves only when the user opted in, redacted and capped."""
    redacted = redact(text)  # the recognisable secrets, and the values of the environment's secret variables
    text = redacted if isinstance(redacted, str) else text
    return text if len(text) <= CONTENT_LIMIT else text[:CONTENT_LIMIT] + "…"


def content_json(value: JsonObject | list[JsonObject]) -> str:
    return content_text(json.dumps(redact(value), ensure_ascii=False, default=str))


def input_messages(prompt: str) -> str:
    """``gen_ai.input.messages`` for a user prompt, in the conventions' JSON shape."""
    return json.dumps([{"role": "user", "parts": [{"type": "text", "content": content_text(prompt)}]}])


def line_changes(tool: str, tool_input: Mapping[str, object]) -> tuple[int, int]:
    """(added, removed) lines of an edit tool's call, from its input (what ``claude_code.lines_of_code.count``
    counts)."""

    def lines(key: str) -> int:
        value = tool_input.get(key)
        return len(value.splitlines()) if isinstance(value, str) else 0

    if tool == "Write":
        return lines("content"), 0
    if tool == "Edit":
        return lines("new_string"), lines("old_string")
    return 0, 0


GIT_VALUE_OPTIONS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env"})


def commits_and_pull_requests(command: str) -> tuple[int, int]:
    """How many ``git commit`` and ``gh pr create`` a shell command runs, read from its parsed words (wrappers
    such as ``timeout`` looked through), for ``claude_code.commit.count`` and ``claude_code.pull_request.count``."""
    commits = prs = 0
    parts, _ = analyze_command(command)
    for part in parts:
        words = [w.value or "" for w in part.words]
        program = words[0].rsplit("/", 1)[-1] if words else ""
        if program == "git" and _git_subcommand(words) == "commit":
            commits += 1
        elif program == "gh" and words[1:3] == ["pr", "create"]:
            prs += 1
    return commits, prs


def _git_subcommand(words: list[str]) -> str:
    i = 1
    while i < len(words):
        if words[i] in GIT_VALUE_OPTIONS:
            i += 2
        elif words[i].startswith("-"):
            i += 1
        else:
            return words[i]
    return ""

"""A run seen through OpenTelemetry: spans under the GenAI conventions, Claude Code's metrics and events.

One ``RunTelemetry`` per ``Run``. It makes an ``invoke_agent`` span for each invocation of the run (a prompt driven
to its end or to a pause), a ``chat`` span around each model request (the run's model, wrapped), an
``execute_tool`` span around each tool call (the run's tools, wrapped: a tool's own spans, a subagent's run, nest
under it), and a span for each call that never ran, with the permission decision and who made it. It uses the
OpenTelemetry API only: the providers are the agent's (``Telemetry``), else the global ones; with neither, a run has
no ``RunTelemetry`` at all and costs nothing.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal

from opentelemetry import _logs, metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from drivetrain.jsontypes import JsonObject
from drivetrain.loop.draft import Deps
from drivetrain.loop.events import Behavior, Compacted, Event, PermissionDecided, ToolFinished
from drivetrain.loop.result import RunResult
from drivetrain.loop.state import Compact, State, SubmitPrompt
from drivetrain.models.base import Model, ModelRequest, ModelResponse
from drivetrain.pricing import cost_usd, window_of
from drivetrain.telemetry import names as n
from drivetrain.telemetry.settings import CommonAttributes, TelemetryContent
from drivetrain.tools.base import Tool, ToolContext, ToolResult

INSTRUMENTATION = "drivetrain"
Ending = Literal["finished", "paused", "failed", "abandoned"]  # abandoned: an attempt left for a fresh one


@dataclass(frozen=True)
class Telemetry:
    """How an agent's runs are observed. Each provider left None is the global one (``opentelemetry.trace``'s …),
    so a user's own spans and drivetrain's nest. ``content``: what content may leave (None: ``OTEL_LOG_*`` as each
    run starts); ``common``: what every metric point and event carries (None: ``OTEL_METRICS_INCLUDE_*``, likewise).
    ``attributes`` go on every ``invoke_agent`` span (e.g. ``drivetrain.attempt``: one agent copy per
    attempt of a task)."""

    tracer_provider: trace.TracerProvider | None = None
    meter_provider: metrics.MeterProvider | None = None
    logger_provider: _logs.LoggerProvider | None = None
    content: TelemetryContent | None = None
    common: CommonAttributes | None = None
    attributes: Mapping[str, n.AttributeValue] = field(default_factory=dict)


def _configured(provider: object) -> bool:
    """A provider an SDK (or a user) made, rather than the API's proxy or no-op default."""
    return not type(provider).__name__.startswith(("Proxy", "_Proxy", "NoOp", "_NoOp"))


@dataclass
class _Call:
    """A call's permission decision, until its ``ToolFinished``."""

    behavior: Behavior
    by: str
    ran: bool = False


class RunTelemetry:
    """The spans, metrics and events of one run (``Run.telemetry``)."""

    def __init__(
        self,
        telemetry: Telemetry,
        tracer_provider: trace.TracerProvider,
        meter_provider: metrics.MeterProvider,
        logger_provider: _logs.LoggerProvider,
        session_id: str,
        model: str,
        content: TelemetryContent,
        common: CommonAttributes,
    ):
        self.telemetry, self.session_id, self.model, self.content = telemetry, session_id, model, content
        self.common: n.Attributes = {}
        if common.session_id:
            self.common["session.id"] = session_id
        if common.version:
            self.common["app.version"] = n.version()
        self.tracer = tracer_provider.get_tracer(INSTRUMENTATION)
        meter = meter_provider.get_meter(INSTRUMENTATION)
        self.sessions = meter.create_counter(n.SESSIONS, "count", "Sessions started")
        self.tokens = meter.create_counter(n.TOKENS, "tokens", "Tokens used, by type")
        self.cost = meter.create_counter(n.COST, "USD", "Cost of the model requests")
        self.lines = meter.create_counter(n.LINES, "count", "Lines of code added and removed")
        self.commits = meter.create_counter(n.COMMITS, "count", "Git commits made")
        self.pull_requests = meter.create_counter(n.PULL_REQUESTS, "count", "Pull requests opened")
        self.edit_decisions = meter.create_counter(n.EDIT_DECISIONS, "count", "Permission decisions on edit tools")
        self.active_time = meter.create_counter(n.ACTIVE_TIME, "s", "Time the agent was working")
        self.events = logger_provider.get_logger(INSTRUMENTATION)
        # a signal nobody set up is not worked for (the API's no-op would take it, after the work of making it)
        self.metering, self.logging = _configured(meter_provider), _configured(logger_provider)
        self.span: Span | None = None  # the open invoke_agent span
        self.compaction: Span | None = None  # the open compact span
        self.context: Context | None = None  # the context with that span current
        self.calls: dict[str, _Call] = {}
        self.working = 0.0  # seconds the open invocation's steps took

    @classmethod
    def of(cls, telemetry: Telemetry | None, session_id: str, model: str) -> RunTelemetry | None:
        """The run's telemetry, or None when no provider is configured anywhere (the default: nothing to do)."""
        t = telemetry or Telemetry()
        tp = t.tracer_provider or trace.get_tracer_provider()
        mp = t.meter_provider or metrics.get_meter_provider()
        lp = t.logger_provider or _logs.get_logger_provider()
        if not any(_configured(p) for p in (tp, mp, lp)):
            return None
        content = t.content if t.content is not None else TelemetryContent.from_env(os.environ)
        common = t.common if t.common is not None else CommonAttributes.from_env(os.environ)
        return cls(t, tp, mp, lp, session_id, model, content, common)

    # -- what the run's handle calls

    def equip(self, deps: Deps) -> None:
        """Wrap the run's model and tools, so each request and call is a span of its own."""
        model = TracedModel(deps.outfit.model, self)
        deps.outfit = replace(deps.outfit, model=model)
        deps.tools = {name: TracedTool(tool, self) for name, tool in deps.tools.items()}

    def session_started(self) -> None:
        self.sessions.add(1, self.common)

    @contextlib.contextmanager
    def step(self, state: State) -> Iterator[None]:
        """One step of the run, inside its invocation's span (opened here at an invocation's first step); a
        compaction inside a span of its own, so its summary request nests under it."""
        prompt = state.prompt if isinstance(state, SubmitPrompt) else None
        if self.span is None:
            attrs: n.Attributes = {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": n.AGENT,
                "gen_ai.conversation.id": self.session_id,
                "gen_ai.request.model": self.model,
                "session.id": self.session_id,
                **self.telemetry.attributes,
            }
            if prompt is not None and self.content.prompts:
                attrs["gen_ai.input.messages"] = n.input_messages(prompt)
            self.span = self.tracer.start_span(f"invoke_agent {n.AGENT}", kind=SpanKind.INTERNAL, attributes=attrs)
            self.context = trace.set_span_in_context(self.span)
        started = time.monotonic()
        try:
            with trace.use_span(self.span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                if prompt is not None:  # inside the span, so the event carries the trace's ids
                    attrs = {"prompt_length": len(prompt)}
                    if self.content.prompts:
                        attrs["prompt"] = n.content_text(prompt)
                    self.event(n.USER_PROMPT, attrs)
                with self._compacting(state) if isinstance(state, Compact) else contextlib.nullcontext():
                    yield
        except BaseException as e:
            self.working += time.monotonic() - started
            self.end("failed", error=e)
            raise
        self.working += time.monotonic() - started  # added up, and counted once, when the invocation ends

    @contextlib.contextmanager
    def _compacting(self, state: Compact) -> Iterator[None]:
        attrs: n.Attributes = {"drivetrain.compaction.trigger": state.trigger, "session.id": self.session_id}
        with self.tracer.start_as_current_span(
            "compact", context=self.context, attributes=attrs, record_exception=False, set_status_on_exception=False
        ) as span:
            self.compaction = span
            try:
                yield
            finally:
                self.compaction = None

    def end(self, ending: Ending, result: RunResult | None = None, error: BaseException | None = None) -> None:
        """The invocation's span ends: the run finished, paused for approval, or failed."""
        span, self.span, self.context = self.span, None, None
        if self.working:
            self.active_time.add(self.working, {**self.common, "type": "cli"})
            self.working = 0.0
        if span is None:
            return
        span.set_attribute("drivetrain.run.ending", ending)
        if result is not None:
            span.set_attributes(
                {
                    "drivetrain.result.subtype": result.subtype,
                    "drivetrain.num_turns": result.num_turns,
                    **n.usage_attributes(result.usage),
                    **({"drivetrain.cost_usd": result.total_cost_usd} if result.total_cost_usd is not None else {}),
                }
            )
            if result.is_error:
                span.set_status(Status(StatusCode.ERROR, result.subtype))
        if error is not None:
            span.set_attribute("error.type", type(error).__qualname__)
            span.set_status(Status(StatusCode.ERROR, str(error) or type(error).__name__))
        span.end()

    # -- the run's events

    def observe(self, event: Event) -> None:
        match event:
            case Compacted(tokens_before=before, tokens_after=after, failed=failed) if self.compaction is not None:
                self.compaction.set_attributes(
                    {"drivetrain.compaction.tokens_before": before, "drivetrain.compaction.tokens_after": after}
                )
                if failed:
                    self.compaction.set_attribute("error.type", "compaction_failed")
                    self.compaction.set_status(Status(StatusCode.ERROR, failed[:500]))
            case PermissionDecided(call=c, behavior=behavior, by=by):
                self.calls[c.id] = _Call(behavior, by)
                if behavior != "defer":
                    decision = "accept" if behavior == "allow" else "reject"
                    self.event(n.TOOL_DECISION, {"tool_name": c.name, "decision": decision, "source": by})
                    if c.name in n.EDIT_TOOLS:
                        self.edit_decisions.add(
                            1, {**self.common, "tool_name": c.name, "decision": decision, "source": by}
                        )
            case ToolFinished(call=c, result=result, duration_ms=ms):
                call = self.calls.pop(c.id, None)
                if call is None or not call.ran:
                    self._not_run(c.id, c.name, c.input, call, result.text)
                elif self.metering and not result.is_error and c.name in n.EDIT_TOOLS:
                    added, removed = n.line_changes(c.name, c.input)
                    self.lines.add(added, {**self.common, "type": "added"})
                    self.lines.add(removed, {**self.common, "type": "removed"})
                elif self.metering and not result.is_error and c.name == "Bash":
                    self._shell_work(c.input.get("command"))
                if not self.logging:
                    return
                attrs: n.Attributes = {
                    "tool_name": c.name,
                    "success": not result.is_error,
                    "duration_ms": round(ms, 1),
                    "decision": "reject" if call is not None and call.behavior == "deny" else "accept",
                    "source": call.by if call is not None else "",
                }
                if result.is_error:
                    attrs["error"] = n.content_text(result.text[:500])
                if self.content.tool_details:
                    attrs["tool_parameters"] = n.content_json(c.input)
                self.event(n.TOOL_RESULT, attrs)

    def _shell_work(self, command: object) -> None:
        """Commits and pull requests a successful Bash call made."""
        if not isinstance(command, str) or ("git" not in command and "gh" not in command):
            return
        commits, prs = n.commits_and_pull_requests(command)
        if commits:
            self.commits.add(commits, self.common)
        if prs:
            self.pull_requests.add(prs, self.common)

    def _not_run(self, call_id: str, name: str, tool_input: JsonObject, call: _Call | None, text: str) -> None:
        """A call that never ran (denied, refused as a repeat, left by the harness): a span of no length."""
        attrs = self._tool_attributes(call_id, name, tool_input, call)
        now = time.time_ns()
        span = self.tracer.start_span(f"execute_tool {name}", context=self.context, attributes=attrs, start_time=now)
        span.set_attribute("drivetrain.tool.ran", False)
        span.set_attribute(
            "error.type", "permission_denied" if call is not None and call.behavior == "deny" else "not_run"
        )
        span.set_status(Status(StatusCode.ERROR, n.content_text(text[:500])))
        span.end(end_time=now)

    def _tool_attributes(self, call_id: str, name: str, tool_input: JsonObject, call: _Call | None) -> n.Attributes:
        attrs: n.Attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
        }
        if call is not None:
            attrs["drivetrain.permission.decision"] = call.behavior
            attrs["drivetrain.permission.decided_by"] = call.by
        if self.content.tool_details:
            attrs["gen_ai.tool.call.arguments"] = n.content_json(tool_input)
        return attrs

    # -- metrics and events

    def event(self, name: str, attributes: n.Attributes) -> None:
        """One of Claude Code's events: a log record named ``name``, with its common attributes."""
        if not self.logging:
            return
        attrs: n.Attributes = {
            "event.name": name,
            "event.timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
            **self.common,
            **attributes,
        }
        self.events.emit(event_name=name, body=name, attributes=attrs)

    def responded(self, model: str, response: ModelResponse, duration_ms: float) -> float | None:
        cost = cost_usd(model, response.usage)
        if self.metering:
            common = {**self.common, "model": model}
            for kind, count in n.tokens_by_type(response.usage).items():
                if count:
                    self.tokens.add(count, {**common, "type": kind})
            if cost:
                self.cost.add(cost, common)
        u = response.usage
        self.event(
            n.API_REQUEST,
            {
                "model": model,
                "cost_usd": cost or 0.0,
                "duration_ms": round(duration_ms, 1),
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "cache_read_tokens": u.cache_read_input_tokens,
                "cache_creation_tokens": u.cache_creation_input_tokens,
            },
        )
        return cost


class TracedModel:
    """The run's model, each request a ``chat`` span (a ``Wrapper``: what reads the model beneath still can)."""

    def __init__(self, inner: Model, telemetry: RunTelemetry):
        self._inner, self.telemetry, self.name = inner, telemetry, inner.name
        self.provider = n.provider_of(inner)
        self._window: int | None = None

    @property
    def inner(self) -> Model:
        return self._inner

    @property
    def context_window(self) -> int:
        """The model's own window (``pricing.window_of`` reads it a few times a turn: found here at once, and
        looked up beneath once, not through a Protocol check per layer each time)."""
        if self._window is None:
            self._window = window_of(self._inner)
        return self._window

    async def respond(self, request: ModelRequest) -> ModelResponse:
        t = self.telemetry
        with t.tracer.start_as_current_span(
            f"chat {self.name}",
            kind=SpanKind.CLIENT,
            attributes=n.request_attributes(self.name, self.provider, request),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            started = time.monotonic()
            try:
                response = await self._inner.respond(request)
            except Exception as e:
                ms = (time.monotonic() - started) * 1000
                span.set_attribute("error.type", type(e).__qualname__)
                span.set_status(Status(StatusCode.ERROR, str(e)))
                t.event(n.API_ERROR, {"model": self.name, "error": str(e)[:500], "duration_ms": round(ms, 1)})
                raise
            cost = t.responded(response.model or self.name, response, (time.monotonic() - started) * 1000)
            span.set_attributes(n.response_attributes(response, cost))
            return response


class TracedTool:
    """One of the run's tools, each call an ``execute_tool`` span, current while the tool runs."""

    def __init__(self, inner: Tool, telemetry: RunTelemetry):
        self.inner, self.telemetry = inner, telemetry

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def description(self) -> str:
        return self.inner.description

    @property
    def input_schema(self) -> JsonObject:
        return self.inner.input_schema

    async def call(self, input: JsonObject, ctx: ToolContext) -> ToolResult:
        t = self.telemetry
        call = t.calls.get(ctx.tool_use_id)
        if call is not None:
            call.ran = True
            if call.behavior == "defer":  # it runs, so the person it waited for allowed it (``Run.resume``)
                call.behavior, call.by = "allow", "approver"
        attrs = t._tool_attributes(ctx.tool_use_id, self.name, input, call)
        with t.tracer.start_as_current_span(
            f"execute_tool {self.name}", attributes=attrs, record_exception=False, set_status_on_exception=False
        ) as span:
            try:
                result = await self.inner.call(input, ctx)
            except Exception as e:
                span.set_attribute("error.type", type(e).__qualname__)
                span.set_status(Status(StatusCode.ERROR, str(e)))
                raise
            if isinstance(code := result.meta.get("exit_code"), int):
                span.set_attribute("drivetrain.tool.exit_code", code)
            if result.is_error:
                span.set_attribute("error.type", "tool_error")
                span.set_status(Status(StatusCode.ERROR, n.content_text(result.text[:500])))
            if t.content.tool_content:
                span.set_attribute("gen_ai.tool.call.result", n.content_text(result.text))
            return result

"""The step's working types: ``Deps`` (what a step works with) and ``Draft`` (the next value, being made).

Below every part of the loop, so each part can take them without importing the loop itself. What the loop
reads of the agent is the ``LoopSettings`` protocol, not the ``Agent`` class, which sits above the loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Protocol, runtime_checkable

from drivetrain.control.approval import Approver, PermissionDecider
from drivetrain.control.gate import Gate
from drivetrain.control.hooks import HookOutcome, HookRunner
from drivetrain.home import session_outputs
from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.loop.budget import Budget, Limit, Spent
from drivetrain.loop.events import Event, HookReported
from drivetrain.loop.profile import Outfit, Profile
from drivetrain.loop.state import POINTS, Node, RunState, SeenCall, State, TurnMark
from drivetrain.messages import Message, StopReason, TextBlock, Usage, ensure_valid, tool_use_ids
from drivetrain.models.base import Model
from drivetrain.tools.base import ReadFilter, Tool, ToolContext


@dataclass(frozen=True)
class ContextSettings:
    """How much of the context tool output may take (``loop/context.py``, which uses them).
    ``Agent(context_settings=ContextSettings(clear=False))``."""

    cap_outputs: bool = True
    result_share: float = 0.25  # one round's results may take this share of the context still free
    min_result_tokens: int = 1_000  # however full the context, a result keeps this much
    max_result_tokens: int = 25_000  # however empty, no result takes more
    clear: bool = True
    clear_at: float = 0.5  # high-water mark, a share of the context window
    clear_to: float = 0.25  # low-water mark: a clearing goes this far down at once
    keep_rounds: int = 3  # the last rounds' results are never cleared
    keep_under: int = 400  # a result this short (characters) is not worth clearing


class LoopSettings(Protocol):
    """What the loop reads of the agent (``drivetrain.agent.Agent`` is one); its profile makes the run's ``Outfit``
    from the model, tools, system prompt, hooks and nodes."""

    model: Model
    tools: list[Tool]
    system: str
    cwd: Path
    policy: PermissionDecider | None
    approver: Approver | None
    hooks: HookRunner | None
    profile: Profile
    nodes: list[Node]
    budget: Budget
    context_settings: ContextSettings
    max_turns: int | None
    max_tokens: int
    max_tokens_ceiling: int
    max_continuations: int
    max_stop_refusals: int
    strict: bool
    context_window: int | None
    compact_at: float
    repeat_limit: int
    repeat_exempt: tuple[str, ...]


@dataclass
class Deps:
    """What a step works with besides the run's value: the agent's settings, its model, tools and gate."""

    agent: LoopSettings  # the agent's own settings, as the caller made them
    outfit: Outfit  # what the run works with, as the agent's profile made it
    tools: dict[str, Tool]
    gate: Gate
    session_id: str = ""
    _context: ToolContext | None = None
    started: float = field(default_factory=time.monotonic)
    spent: Spent = field(
        default_factory=Spent
    )  # what the session had used when this invocation began (the limits count from it)

    @classmethod
    def of(cls, agent: LoopSettings, session_id: str = "") -> Deps:
        """The step's dependencies for a run of ``agent``: what its profile adds (``Profile.equip``) is made here,
        once per run, so a library ``Agent(profile=…)`` runs exactly as the CLI's."""
        outfit = agent.profile.equip(agent)
        names = [n.name for n in outfit.nodes]
        if len(set(names)) != len(names) or any(n.at not in POINTS for n in outfit.nodes):
            raise ValueError(
                f"each added node needs its own name and a point among {POINTS}: got "
                f"{[(n.name, n.at) for n in outfit.nodes]}"
            )
        gate = Gate(outfit.hooks, agent.policy, agent.approver)
        return cls(agent, outfit, {t.name: t for t in outfit.tools}, gate, session_id)

    @property
    def model(self) -> Model:
        return self.outfit.model

    @property
    def system(self) -> str:
        return self.outfit.system

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.outfit.nodes

    @property
    def profile(self) -> Profile:
        return self.agent.profile

    @property
    def context_settings(self) -> ContextSettings:
        return self.agent.context_settings

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def begin_invocation(self, value: RunState) -> None:
        """A new invocation (a prompt, a resume): the limits count from what ``value`` has used so far."""
        self.started = time.monotonic()
        self.spent = Spent(value.num_turns, value.usage, value.tool_calls)

    @cached_property
    def outputs(self) -> Path:
        """This session's saved tool outputs (``home.session_outputs``), named once per run."""
        return session_outputs(self.session_id)

    @property
    def context(self) -> ToolContext:
        """What tools know of the run (made once per run: the policy's workspace roots resolved, the session's
        outputs folder named, which the policy lets read tools into)."""
        if self._context is None:
            policy, cwd = self.agent.policy, self.agent.cwd
            # "is not None" first: mypy narrows an Optional protocol to another by isinstance only once None is out
            self._context = ToolContext(
                cwd=cwd,
                roots=policy.roots(cwd) if policy is not None and isinstance(policy, Confining) else [],
                read_filter=policy.search_filter(cwd) if policy is not None and isinstance(policy, Filtering) else None,
                outputs=self.outputs if self.session_id else None,
                session_id=self.session_id,
            )
        return self._context


@runtime_checkable
class Confining(Protocol):
    """A policy that confines files names the workspace (``Policy`` does)."""

    def roots(self, cwd: Path) -> list[Path]: ...


@runtime_checkable
class Filtering(Protocol):
    """A policy that hides files from searches says which (``Policy`` does)."""

    def search_filter(self, cwd: Path) -> ReadFilter: ...


# ---------------------------------------------------------------- one step


class Draft:
    """The working copy of one step: the next value is drafted here, then frozen.

    The value the step was given is never changed. History edits go through ``append``, ``set_last``
    and ``pop`` so the draft knows how much of the already-checked history is still unchanged.
    """

    _COPIED = (
        "num_turns",
        "prompts",
        "usage",
        "continuations",
        "stop_refusals",
        "stuck_turns",
        "hook_stop",
        "tool_calls",
        "turn_marks",
        "error_streak",
        "warned",
        "compactions",
        "compact_failures",
    )  # immutable: copied as they are
    # their types, as ``RunState`` has them
    num_turns: int
    prompts: int
    usage: Usage
    continuations: int
    stop_refusals: int
    stuck_turns: int
    hook_stop: str | None
    tool_calls: int
    turn_marks: tuple[TurnMark, ...]
    error_streak: tuple[str, int]
    warned: tuple[Limit, ...]
    compactions: int
    compact_failures: int

    def __init__(self, value: RunState, deps: Deps, emit: Callable[[Event], None] | None):
        self.value, self.deps, self._emit = value, deps, emit
        self.history = list(value.history)
        self.linted = value.linted if value.linted_of is value.history else 0  # a history replaced: check it all
        self.linted_ids = value.linted_ids
        for name in self._COPIED:
            setattr(self, name, getattr(value, name))
        self.trajectory: list[StopReason] = list(value.trajectory)
        self.seen_calls: dict[str, SeenCall] = dict(value.seen_calls)
        self.blocked = dict(value.blocked)
        self.node_visits = dict(value.node_visits)
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)
        if self._emit is not None:
            self._emit(event)

    def append(self, message: Message) -> None:
        self.history.append(message)

    def set_last(self, message: Message) -> None:
        self.history[-1] = message
        self.linted = min(self.linted, len(self.history) - 1)

    def pop(self) -> Message:
        message = self.history.pop()
        self.linted = min(self.linted, len(self.history))
        return message

    def check(self, strict: bool) -> None:
        """Lint the history before a request (``messages.ensure_valid``: repaired, or raises when ``strict``).

        Only from where it may have changed: the part checked before and unchanged since is known good,
        and its tool_use ids are carried from the last check when it ended where this one starts."""
        start = max(self.linted - 1, 0)
        n, ids = self.linted_ids
        seen = ids if n == start else tool_use_ids(self.history[:start])
        checked = ensure_valid(self.history, strict=strict, start=start, seen=seen)
        if checked is not self.history:  # repaired: valid as a whole
            self.history, start, seen = checked, 0, frozenset()
        self.linted = len(self.history)
        end = max(self.linted - 1, 0)  # the last message is checked again next time: its answer may be new
        self.linted_ids = (end, seen | tool_use_ids(self.history[start:end]))

    def payload(self, event: str, **fields: JsonValue) -> JsonObject:
        return {
            "session_id": self.value.session_id,
            "cwd": str(self.deps.agent.cwd),
            "hook_event_name": event,
            **fields,
        }

    def report(self, event: str, outcome: HookOutcome) -> None:
        if outcome.stop:
            self.hook_stop = f"A {event} hook stopped the run: {outcome.stop_reason or 'no reason given'}"
        if outcome.errors:
            self.emit(HookReported(event, tuple(outcome.errors)))

    def ask(self, text: str) -> None:
        """Tell the model something: added to the last user message (after its results), or as a new one."""
        last = self.history[-1] if self.history else None
        if last is not None and last.role == "user":
            self.set_last(Message("user", (*last.content, TextBlock(text))))
        else:
            self.append(Message.user(text))

    def freeze(self, state: State) -> RunState:
        v = self.value
        path = v.path or (type(v.state).__name__,)
        if state is not v.state:
            path += (type(state).__name__,)
        history = tuple(self.history)
        return replace(
            v,
            history=history,
            state=state,
            path=path,
            trajectory=tuple(self.trajectory),
            seen_calls=self.seen_calls,
            blocked=self.blocked,
            node_visits=self.node_visits,
            linted=self.linted,
            linted_of=history,
            linted_ids=self.linted_ids,
            **{name: getattr(self, name) for name in self._COPIED},
        )

"""A profile: how much help the loop gives the model, as one object.

A profile is data: the flags are the aids the loop itself reads (``agent.profile.final`` …), never its name.
``equip`` makes what a run works with (an ``Outfit``: a model wrapper, a tool set, a system prompt, hooks
and nodes) from the agent's own, without changing the agent or anything it holds. ``FULL`` is the plain loop, for
models that need no help; the small profile, for small local models, is ``drivetrain.small.profile.SMALL``.
Each aid can be switched off alone (``profile.without("checks")``) to measure what it is worth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Protocol

from drivetrain.control.approval import PermissionDecider
from drivetrain.control.hooks import HookRunner
from drivetrain.loop.state import Node
from drivetrain.models.base import Model
from drivetrain.tools.base import Tool

AIDS = (
    "codeact",
    "example",
    "collapse",
    "context",
    "final",
    "checks",
    "changes",
    "prefixcache",
    "show",
    "answer",
    "attempts",
    "abandon",
)


class Outfitted(Protocol):
    """What a profile reads of an agent to make its outfit (``drivetrain.agent.Agent`` is one)."""

    @property
    def model(self) -> Model: ...
    @property
    def tools(self) -> Sequence[Tool]: ...
    @property
    def system(self) -> str: ...
    @property
    def hooks(self) -> HookRunner | None: ...
    @property
    def nodes(self) -> Sequence[Node]: ...
    @property
    def cwd(self) -> Path: ...
    @property
    def policy(self) -> PermissionDecider | None: ...


@dataclass(frozen=True)
class Outfit:
    """What a run works with, as its profile makes it from the agent's own (``Profile.equip``): the model (maybe
    wrapped), the tools, the system prompt, the hooks and the nodes. Made new for each run; the agent and the
    objects it holds are not changed. The agent's other settings are read from the agent itself, live (a plan
    raising a retry's turn limit reaches the run)."""

    model: Model
    tools: tuple[Tool, ...]
    system: str
    hooks: HookRunner | None
    nodes: tuple[Node, ...]


@dataclass(frozen=True)
class Profile:
    """The aids a run gets. ``Agent(profile=SMALL)`` in the library is what ``--profile small`` is in the CLI."""

    name: str
    codeact: bool = False  # answer in fenced bash/python blocks instead of JSON tool calls
    example: bool = False  # a short system prompt with one worked example
    collapse: bool = False  # earlier copies of a repeated call and its result leave the context
    context: bool = False  # long outputs shown head and tail; old outputs shortened when context fills
    final: bool = False  # at the turn cap or when stuck, one last request without tools, for the answer
    checks: bool = False  # checks of the workspace and the run before the model may stop (small/checks.py)
    changes: bool = False  # each call's result says what it changed in the workspace (small/changes.py)
    prefixcache: bool = False  # the fixed prompt prefix's KV state kept on disk (local model)
    show: bool = False  # the first lines of the files the task names go with it (as an @-mention attaches them)
    answer: bool = False  # the answer agrees with the run: what it reports was seen, else written again from the facts
    attempts: bool = False  # a task runs as several fresh attempts, and the evidence picks one (small/attempts.py)
    abandon: bool = False  # an attempt whose first calls misfire is left for a fresh one (small/misfires.py)

    def without(self, *aids: str) -> Profile:
        """This profile less the named aids (an ablation)."""
        unknown = [a for a in aids if a not in AIDS]
        if unknown:
            raise ValueError(f"unknown aid(s) {', '.join(unknown)}; known: {', '.join(AIDS)}")
        # name given by itself, so mypy checks the ** dict of bools against the aids alone
        return replace(self, name=self.name, **dict.fromkeys(aids, False))

    @property
    def aids(self) -> list[str]:
        return [f.name for f in fields(self) if f.name != "name" and getattr(self, f.name)]

    def default_system(self) -> str | None:
        """The system prompt this profile runs with when the agent sets none (None: the caller's default)."""
        return None

    def default_wall_s(self) -> float | None:
        """The wall-time budget of a task when the user sets none (None: no limit)."""
        return None

    def equip(self, agent: Outfitted) -> Outfit:
        """What a run of ``agent`` works with under this profile. The plain loop adds nothing: the agent's own."""
        return Outfit(agent.model, tuple(agent.tools), agent.system, agent.hooks, tuple(agent.nodes))


FULL = Profile("full")

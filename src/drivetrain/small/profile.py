"""The small profile: what the loop does for a small local model, as one object (``SMALL``).

A small model makes one well-scoped decision reliably but cannot carry a long multi-turn loop. The small
profile asks it for fewer, simpler decisions and does in code what a strong model does by itself: it answers in
code blocks (``small/codeact.py``), sees repeats collapsed and old output shortened, is told what each command
changed, is checked before it may stop (``small/checks.py``), and always ends with an answer.

``Agent(profile=SMALL)`` gets all of it: the flags are read by the loop, and ``SmallProfile.equip`` makes the
run's outfit (the code-block model, the tool set, the system prompt, the hooks and the checks node) from the
agent's own when a run starts, changing none of them. Each aid can
be switched off alone (``SMALL.without("checks")``, or ``DRIVETRAIN_ABLATE=checks,collapse`` in the CLI).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from drivetrain.control.hooks import HookChain, Hooks
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.nodes import Node
from drivetrain.loop.profile import AIDS, FULL, Outfit, Outfitted, Profile
from drivetrain.models.base import Model
from drivetrain.pricing import Named, Wrapper
from drivetrain.small.checks import WorkChecks
from drivetrain.small.codeact import CodeActionModel
from drivetrain.small.prompts import small_system_prompt, task_context
from drivetrain.tools.base import Tool

ENV_ABLATE = "DRIVETRAIN_ABLATE"
DEFAULT_WALL_S = 60.0  # one wall budget for a task and all its attempts


# Parameter counts in model names: "qwen2.5-coder:1.5b", "Llama-3.2-3B-Instruct", "phi-3-mini-4k".
_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*[bB](?![a-zA-Z])")
_SMALL_NAMES = re.compile(r"mini|tiny|small|nano|smol", re.IGNORECASE)
SMALL_MAX_BILLIONS = 8.0
ProfileChoice = Literal["small", "full"]  # --profile (None: chosen by the model's size)
PROFILE_CHOICES: tuple[ProfileChoice, ...] = get_args(ProfileChoice)


def is_small(model_name: str, provider: str) -> bool:
    """The embedded model, and OpenAI-compatible models whose name says they have ≤ 8B parameters."""
    if provider == "local" or model_name.startswith("local/"):
        return True
    if provider != "openai":
        return False  # Anthropic's models are large
    size = _SIZE.search(model_name)
    if size:
        return float(size.group(1)) <= SMALL_MAX_BILLIONS
    return bool(_SMALL_NAMES.search(model_name)) and not model_name.startswith(("gpt-", "o1", "o3", "o4"))


def select_profile(
    model_name: str, provider: str, choice: ProfileChoice | None = None, env: Mapping[str, str] | None = None
) -> Profile:
    """``choice`` ("small" | "full" | None for automatic), less the aids named in $DRIVETRAIN_ABLATE."""
    if choice is not None and choice not in PROFILE_CHOICES:
        raise ValueError(f"unknown profile {choice!r}; choose small or full")
    small = choice == "small" or (choice is None and is_small(model_name, provider))
    profile = SMALL if small else FULL
    ablate = [a.strip() for a in (env or {}).get(ENV_ABLATE, "").split(",") if a.strip()]
    return profile.without(*ablate) if ablate and small else profile


@dataclass(frozen=True)
class SmallProfile(Profile):
    """The small profile's flags, and what it adds to an agent for a run (``equip``)."""

    def default_system(self) -> str | None:
        return small_system_prompt(self.codeact, self.example)

    def default_wall_s(self) -> float | None:
        return DEFAULT_WALL_S  # at CPU speed a small model that loops would otherwise run for many minutes

    def equip(self, agent: Outfitted) -> Outfit:
        """The code-block model over the agent's, the profile's tools, its system prompt (where the agent sets
        none), its hooks run after the agent's own, and the checks node added; the agent and what it holds are
        not changed. A file the task names is shown with it only when the agent's policy allows reading it."""
        policy, cwd = agent.policy, agent.cwd

        def readable(path: str) -> bool:
            return policy is None or policy.decide("Read", {"file_path": path}, cwd).behavior == "allow"

        hooks = Hooks()
        model, tools, system, nodes = equip(
            self, agent.model, list(agent.tools), hooks, cwd, agent.system or None, readable
        )
        return Outfit(model, tuple(tools), system or "", HookChain(agent.hooks, hooks), (*agent.nodes, *nodes))


def _answers_in_blocks(model: Model) -> bool:
    """Is the model (or a model it wraps) already the code-block model? Then it is not wrapped again."""
    at: Named | None = model
    while at is not None:
        if isinstance(at, CodeActionModel):
            return True
        at = at.inner if isinstance(at, Wrapper) else None
    return False


SMALL = SmallProfile("small", **dict.fromkeys(AIDS, True))
SMALL_TOOLS = ("Read", "Write", "Edit", "Bash")  # without code blocks: four tools that do not overlap


def equip(
    profile: Profile,
    model: Model,
    tools: list[Tool],
    hooks: Hooks,
    cwd: Path,
    system: str | None = None,
    readable: Callable[[str], bool] = lambda _: True,
) -> tuple[Model, list[Tool], str | None, list[Node]]:
    """The model, tools, system prompt and loop nodes a profile runs with (``system`` None: the profile's own);
    its hooks (workspace context, what the checks watch) are added to ``hooks``. ``readable``: may a file the
    task names be shown with it (the permission policy's answer for a Read of it). Nothing passed in is changed
    (``prefixcache`` reaches the model through each request's ``keep_prefix``)."""
    if profile.codeact:
        # Blocks run as Bash; a block naming a file is an Edit or Write of it (small/fragments.py).
        model = model if _answers_in_blocks(model) else CodeActionModel(model, cwd)
        tools = [t for t in tools if t.name in ("Bash", "Edit", "Write")]
    else:
        tools = [t for t in tools if t.name in SMALL_TOOLS]
    checks = (
        WorkChecks(cwd, report_changes=profile.changes, file_blocks=profile.codeact, agree=profile.answer)
        if profile.checks or profile.changes
        else None
    )

    def context(payload: JsonObject) -> JsonObject:
        """The listing (and the files the task names) go with the task, not in the system prompt, which stays
        fixed (and cacheable)."""
        text = task_context(cwd, str(payload.get("prompt", "")), profile.show, readable)
        if checks:
            checks.shown = text  # a file shown here counts as looked at
        return {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": text}}

    hooks.add("UserPromptSubmit", context)
    nodes: list[Node] = []
    if checks:
        checks.install(hooks)
        nodes = [checks] if profile.checks else []
    return model, tools, system if system is not None else small_system_prompt(profile.codeact, profile.example), nodes

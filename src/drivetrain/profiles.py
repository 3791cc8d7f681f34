"""Profiles: how much help the loop gives the model.

A 1.5B model makes one well-scoped decision reliably but cannot carry a long multi-turn loop. The
``small`` profile asks it for fewer, simpler decisions and does in code what a strong model does by
itself: it answers in code blocks (see ``models/codeact.py``), must act on its first turn, cannot
sample a refused repeat again, sees repeats collapsed and old output shortened, is told what each
command changed, is checked before it may stop, and always ends with an answer. ``full`` is the plain
loop, for models that need none of it.

Each aid can be switched off alone (``DRIVETRAIN_ABLATE=checks,collapse``) to measure what it is worth.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

if TYPE_CHECKING:
    from drivetrain.hooks import Hooks
    from drivetrain.models.base import Model
    from drivetrain.nodes import Node
    from drivetrain.tools.base import Tool

AIDS = ("codeact", "example", "act", "exclude", "collapse", "context", "final", "checks", "changes", "prefixcache",
        "show", "force")
ENV_ABLATE = "DRIVETRAIN_ABLATE"


@dataclass(frozen=True)
class Profile:
    name: str
    codeact: bool = False  # answer in fenced bash/python blocks instead of JSON tool calls
    example: bool = False  # a short system prompt with one worked example
    act: bool = False  # the first turn must call a tool; prose that describes calls is sent back
    exclude: bool = False  # a call repeated with the same result cannot be sampled again (grammar)
    collapse: bool = False  # earlier copies of a repeated call and its result leave the context
    context: bool = False  # long outputs shown head and tail; old outputs shortened when context fills
    final: bool = False  # at the turn cap or when stuck, one last request without tools, for the answer
    checks: bool = False  # generic checks before the model may stop (see checks.py)
    changes: bool = False  # each call's result says what it changed in the workspace (see changes.py)
    prefixcache: bool = False  # the fixed prompt prefix's KV state kept on disk (local model)
    show: bool = False  # the first lines of the files the task names go with it (as an @-mention attaches them)
    force: bool = False  # when a check knows the fix (a missing output's content, a rename's sed), the next call
    # must be it, not just be told it (see checks.py ``_fixes``)

    def without(self, *aids: str) -> Profile:
        unknown = [a for a in aids if a not in AIDS]
        if unknown:
            raise ValueError(f"unknown aid(s) {', '.join(unknown)}; known: {', '.join(AIDS)}")
        return replace(self, **{a: False for a in aids})

    @property
    def aids(self) -> list[str]:
        return [f.name for f in fields(self) if f.name != "name" and getattr(self, f.name)]


FULL = Profile("full")
SMALL = Profile("small", **{a: True for a in AIDS})

# Parameter counts in model names: "qwen2.5-coder:1.5b", "Llama-3.2-3B-Instruct", "phi-3-mini-4k".
_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*[bB](?![a-zA-Z])")
_SMALL_NAMES = re.compile(r"mini|tiny|small|nano|smol", re.IGNORECASE)
SMALL_MAX_BILLIONS = 8.0


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


def select_profile(model_name: str, provider: str, choice: str | None = None,
                   env: Mapping[str, str] | None = None) -> Profile:
    """``choice`` ("small" | "full" | None for automatic), less the aids named in $DRIVETRAIN_ABLATE."""
    if choice not in (None, "small", "full"):
        raise ValueError(f"unknown profile {choice!r}; choose small or full")
    small = choice == "small" or (choice is None and is_small(model_name, provider))
    profile = SMALL if small else FULL
    ablate = [a.strip() for a in (env or {}).get(ENV_ABLATE, "").split(",") if a.strip()]
    return profile.without(*ablate) if ablate and small else profile


SMALL_TOOLS = ("Read", "Write", "Edit", "Bash")  # without code blocks: four tools that do not overlap


def equip(profile: Profile, model: Model, tools: list[Tool], hooks: Hooks, cwd: Path,
          system: str | None = None, readable: Callable[[str], bool] = lambda _: True,
          ) -> tuple[Model, list[Tool], str | None, list[Node]]:
    """The model, tools, system prompt and loop nodes a profile runs with (``system`` None: the profile's own);
    its hooks (workspace context, what the checks watch) are added to ``hooks``. ``readable``: may a file the
    task names be shown with it (the permission policy's answer for a Read of it)."""
    if profile.name != "small":
        return model, tools, system, []
    from drivetrain.checks import WorkChecks
    from drivetrain.models.codeact import CodeActionModel
    from drivetrain.prompts import small_system_prompt, task_context

    from drivetrain.models.local import LocalModel

    if profile.prefixcache and isinstance(model, LocalModel):  # before the code-block wrapper hides it
        model.prefix_cache = True
    if profile.codeact:
        # Blocks run as Bash; a block naming a file is an Edit or Write of it (models/fragments.py).
        model, tools = CodeActionModel(model, cwd), [t for t in tools if t.name in ("Bash", "Edit", "Write")]
    else:
        tools = [t for t in tools if t.name in SMALL_TOOLS]
    checks = WorkChecks(cwd, report_changes=profile.changes, file_blocks=profile.codeact, force=profile.force) \
        if profile.checks or profile.changes else None

    def context(payload: dict) -> dict:
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

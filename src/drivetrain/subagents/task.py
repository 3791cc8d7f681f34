"""The ``Task`` tool (Claude Code's fields: description, prompt, subagent_type): a child loop for one part of a task.

The child is the parent's agent with its own history (its first user message is the prompt), the subagent type's
system prompt and tools (never ``Task``: no recursion), the parent's permission policy, approver and hooks, and
a share of the parent's limits. The parent receives only the child's final answer; the child's usage is added to
the parent's (``ToolResult.meta["usage"]``, read by ``loop/calls.py``). Several Task calls in one turn run at
once, as any calls do. The child's turns are a session of their own, linked both ways with the parent's
tool_use id (``subagent`` / ``subagent_of`` records), which ``drivetrain sessions show`` nests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar, TypeVar

from drivetrain.agent import Agent
from drivetrain.home import safe_name
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.budget import Budget
from drivetrain.loop.events import Event
from drivetrain.models.base import Model
from drivetrain.sessions.audit import AuditLog
from drivetrain.subagents.definitions import SubagentType
from drivetrain.tools.base import ToolContext, ToolResult

NAME = "Task"
SHARE = 0.5  # of each of the parent's limits, for one child

Limit = TypeVar("Limit", int, float)


def share(budget: Budget, max_turns: int | None, fraction: float = SHARE) -> tuple[Budget, int | None]:
    """The child's limits: ``fraction`` of each of the parent's; on reaching one it still answers (wrap_up)."""

    def part(x: Limit | None) -> Limit | None:
        if x is None:
            return None
        if isinstance(x, int):  # a count: at least one
            return max(int(x * fraction), 1)
        return x * fraction

    return (
        dataclasses.replace(
            budget,
            usd=part(budget.usd),
            tokens=part(budget.tokens),
            wall_time_s=part(budget.wall_time_s),
            tool_calls=part(budget.tool_calls),
            wrap_up=True,
        ),
        part(max_turns),
    )


class TaskTool:
    """``Task``: run a subagent of one of ``types`` on a prompt and return its final answer."""

    name = NAME
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {
            "description": {"type": "string", "description": "A short (3-5 word) description of the task"},
            "prompt": {"type": "string", "description": "The task for the agent to perform"},
            "subagent_type": {"type": "string", "description": "The type of specialized agent to use for this task"},
        },
        "required": ["description", "prompt", "subagent_type"],
    }

    def __init__(self, parent: Agent, types: dict[str, SubagentType], model_for: Callable[[str], Model] | None = None):
        self.parent, self.types, self.model_for = parent, types, model_for

    @property
    def description(self) -> str:
        kinds = "\n".join(
            f"- {t.name}: {t.description} (Tools: {', '.join(t.tools) if t.tools else '*'})"
            for t in self.types.values()
        )
        return (
            "Launch a subagent to handle a well-scoped part of the task on its own: it works with its own "
            "context and tools and returns only its final answer. Give it a complete, self-contained prompt "
            "(it does not see this conversation) and say what it should report back. Several Task calls in "
            f"one message run at the same time.\n\nAvailable agent types:\n{kinds}"
        )

    async def call(self, input: JsonObject, ctx: ToolContext) -> ToolResult:
        prompt, kind_name = input.get("prompt"), input.get("subagent_type") or "general-purpose"
        if not isinstance(prompt, str) or not prompt.strip():
            return ToolResult("Task needs a prompt: the complete task for the subagent.", is_error=True)
        kind = self.types.get(kind_name)
        if kind is None:
            return ToolResult(f"No subagent type {kind_name!r}. Available: {', '.join(self.types)}.", is_error=True)
        child_id = f"{ctx.session_id or 'run'}.task-{safe_name(ctx.tool_use_id or 'call')}"
        child = self._child(kind, child_id)
        run = child.start(prompt, session_id=child_id)
        self._link(ctx, child_id, kind, str(input.get("description", "")))
        result = await run.finish()
        meta = {"usage": result.usage.to_wire(), "subagent_session": child_id}
        if run.paused:
            return ToolResult(
                f"The {kind.name} subagent stopped: {len(run.pending)} of its call(s) wait for an "
                "approval nobody can give now.",
                is_error=True,
                meta=meta,
            )
        answer = result.result or "(the subagent gave no answer)"
        if result.is_error:
            answer = f"The {kind.name} subagent stopped early ({result.subtype}). {result.note}\n{answer}".strip()
        return ToolResult(answer, is_error=result.is_error, meta=meta)

    def _child(self, kind: SubagentType, child_id: str) -> Agent:
        p = self.parent
        tools = [t for t in p.tools if t.name != NAME and (kind.tools is None or t.name in kind.tools)]
        budget, max_turns = share(p.budget, p.max_turns)
        model = self.model_for(kind.model) if kind.model and self.model_for is not None else p.model
        observers: list[Callable[[Event], None]] = [AuditLog(p.store, child_id).observe] if p.store is not None else []
        return dataclasses.replace(
            p,
            model=model,
            tools=tools,
            system=kind.prompt,
            budget=budget,
            max_turns=max_turns,
            observers=observers,
            checkpoints=None,
            nodes=[],
        )

    def _link(self, ctx: ToolContext, child_id: str, kind: SubagentType, description: str) -> None:
        store = self.parent.store
        if store is None:
            return
        link: JsonObject = {"tool_use_id": ctx.tool_use_id, "subagent_type": kind.name, "description": description}
        store.append(child_id, [{"kind": "subagent_of", "session": ctx.session_id, **link}])
        if ctx.session_id:
            store.append(ctx.session_id, [{"kind": "subagent", "session": child_id, **link}])

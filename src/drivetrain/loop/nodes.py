"""Nodes a user adds to the loop without forking it: each is entered at a fixed point and picks the next edge.

A node is entered ``at`` one of two points:
- ``"start"``: after a prompt is submitted, before the first model request for it;
- ``"end_turn"``: when the model has answered and would end the run (after the Stop hooks let it), and when a
  model stuck repeating refused calls has given the answer it was asked for (a node may send it back to work).
It returns ``Proceed`` (go on as the loop would), ``Note(text)`` (add the text for the model, then go on) or
``SendBack(text)`` (the model goes back to work with the text: only from ``"end_turn"``; its ``tool_choice`` is
the next request's: ``"none"`` asks for the answer alone, without tools, ``"any"`` for a call first). A node runs
at most ``limit`` times a run; after that it is passed over. Nodes at one point run in the order given.

In the loop a node is the state ``RunNode(name, then)``; the run's path records ``RunNode:<name>``.

Two nodes come with drivetrain: ``Verify`` (run a check command when the model wants to stop; on failure send
the output back) and ``PlanFirst`` (before the first request, ask the model — without tools — for a short plan).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from drivetrain.host.procs import run_command
from drivetrain.loop.calls import harness_call
from drivetrain.loop.draft import Draft
from drivetrain.loop.state import Node, NodeContext, NodePoint, NodeResult, Note, Proceed, SendBack
from drivetrain.messages import Message
from drivetrain.models.base import ModelRequest
from drivetrain.tools.base import tool_spec

# The contract (``Node``, what it sees, what it answers) is defined with the run's value, below the loop's parts,
# since the profile's ``Outfit`` carries nodes; it is named here, with the nodes that come with drivetrain.
__all__ = ["DraftContext", "Node", "NodeContext", "NodeResult", "Note", "PlanFirst", "Proceed", "SendBack", "Verify"]


@dataclass
class DraftContext:
    """The ``NodeContext`` the loop gives a node: the history so far, the workspace and the model, of the step in
    progress (its ``Draft``)."""

    draft: Draft

    @property
    def history(self) -> list[Message]:
        return list(self.draft.history)

    @property
    def cwd(self) -> Path:
        return self.draft.deps.agent.cwd

    @property
    def answer(self) -> str:
        """The model's last text (at ``end_turn``: the answer it wants to stop with)."""
        last = next((m for m in reversed(self.draft.history) if m.role == "assistant"), None)
        return last.text if last is not None else ""

    async def run(self, command: str, timeout_ms: int = 120_000) -> tuple[int | None, str]:
        """Run a shell command as the harness's own Bash call (``calls.harness_call``: the gate decides, the
        sandbox holds, the audit log records). (exit code, output); the code is None when it did not run."""
        result = await harness_call(self.draft, "Bash", {"command": command, "timeout": timeout_ms})
        code = (result.meta or {}).get("exit_code")
        text = result.text
        if isinstance(code, int) and code != 0 and not (result.meta or {}).get("timed_out"):
            text = text.rpartition("\n")[0]  # the tool's own last line says the exit code
        return (code if isinstance(code, int) else None), "" if text == "(no output)" else text

    async def ask(self, text: str, max_tokens: int = 1024) -> str:
        """One request where no tool may be called (tool_choice none; the tools stay defined, so the cached prefix
        holds and earlier tool_use blocks stay valid): the history so far, then ``text``. Counts toward the budget."""
        deps = self.draft.deps
        history = self.draft.history
        if history and history[-1].role == "user":
            messages = [*history[:-1], Message("user", (*history[-1].content, *Message.user(text).content))]
        else:
            messages = [*history, Message.user(text)]
        tools = [tool_spec(t) for t in deps.outfit.tools]
        response = await deps.model.respond(
            ModelRequest(
                messages, deps.system, tools, max_tokens, tool_choice="none", keep_prefix=deps.agent.profile.prefixcache
            )
        )
        self.draft.usage = self.draft.usage + response.usage
        return response.message.text.strip()


@dataclass
class Verify:
    """At ``end_turn``: run ``command`` in the workspace; on failure, send its output back (``limit`` times)."""

    command: str
    limit: int = 2
    timeout_s: float = 300
    name: str = "Verify"
    at: NodePoint = "end_turn"

    async def run(self, ctx: NodeContext) -> NodeResult:
        code, output = await run_command(self.command, ctx.cwd, self.timeout_s)
        if code == 0:
            return Proceed()
        tail = output[-3000:]
        return SendBack(
            f"Before you finish: `{self.command}` failed (exit {code}). Fix the cause, run it again, "
            f"and only then give your answer.\n\n{tail}"
        )


@dataclass
class PlanFirst:
    """At ``start``: ask the model, without tools, for a short numbered plan, and keep it in the history."""

    limit: int = 1
    name: str = "PlanFirst"
    at: NodePoint = "start"
    ask: str = (
        "Before acting, write a short numbered plan (at most 6 steps) for this task: what to look at, what "
        "to change, how to check it. Do not call tools yet."
    )

    async def run(self, ctx: NodeContext) -> NodeResult:
        plan = await ctx.ask(self.ask)
        return Note(f"Your plan:\n{plan}\nNow carry it out.") if plan else Proceed()

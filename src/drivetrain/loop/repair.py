"""A run's value made valid again after it was cut short: every tool call answered, stray results gone."""

from __future__ import annotations

from collections.abc import Set

from drivetrain.jsontypes import JsonObject
from drivetrain.loop.state import AwaitApproval, CallModel, RunState, RunTools
from drivetrain.messages import Message, ToolResultBlock, lint, repair

NOT_STARTED = (
    "Not run: drivetrain stopped ({why}) before this call started, so it had no effect. "
    "Make it again if it is still needed."
)
STARTED = (
    "Interrupted: drivetrain stopped ({why}) while this call was running. It may have had side "
    "effects (partly done): check the state before repeating it."
)
FINISHED = (
    "This call ran to the end, but drivetrain stopped ({why}) before its result was saved, so the "
    "output is lost. Its effects happened: check them rather than repeating it."
)


def close_open_calls(
    value: RunState, started: Set[str] = frozenset(), finished: Set[str] = frozenset(), why: str = "the process ended"
) -> tuple[RunState, JsonObject | None]:
    """Every tool_use answered, stray results gone, and a state that can go on from this history."""
    history = list(value.history)
    added: list[dict[str, str | bool]] = []
    if isinstance(value.state, AwaitApproval):
        return value, None  # a pause for approval is a valid place to be: the verdicts will come
    if history and history[-1].role == "assistant" and history[-1].tool_uses:
        blocks = []
        for use in history[-1].tool_uses:
            template = FINISHED if use.id in finished else STARTED if use.id in started else NOT_STARTED
            blocks.append(ToolResultBlock(use.id, template.format(why=why), True))
            added.append({"tool_use_id": use.id, "tool": use.name, "started": use.id in started})
        history.append(Message("user", tuple(blocks)))
    problems = lint(history).problems
    if problems:
        history = repair(history)
    state = value.state
    if added or isinstance(state, RunTools):
        state = CallModel()
    if not added and not problems and state is value.state:
        return value, None
    note = (
        f"{len(added)} call(s) left without a result were answered as interrupted"
        if added
        else "the history was repaired"
    ) + (f"; {len(problems)} problem(s) fixed" if problems else "")
    return value.evolve(history=tuple(history), state=state), {
        "results_added": added,
        "problems": problems,
        "note": note,
    }

"""The loop's graph, drawn from the code: each state's handler declares its edges by its return annotation."""

from __future__ import annotations

import itertools
import typing

from drivetrain.loop import step as loop
from drivetrain.loop.state import AwaitApproval, CallModel, Compact, Done, Recover, RunNode, RunTools, SubmitPrompt

# state -> the function that leaves it (AwaitApproval is left when the verdicts come: Run.resume)
HANDLERS = {
    SubmitPrompt: loop.submit_prompt,
    CallModel: loop.call_model,
    RunTools: loop.run_tools,
    Recover: loop.recover,
    Compact: loop.compact,
    RunNode: loop.run_node,
    AwaitApproval: loop.resume_approval,
    Done: loop.next_prompt,
}


def edges() -> list[tuple[str, str]]:
    """(from, to) for every transition the handlers can make, in a stable order."""
    out: list[tuple[str, str]] = []
    for state, handler in HANDLERS.items():
        ret = typing.get_type_hints(handler)["return"]
        targets = list(typing.get_args(ret) or (ret,))
        out += [(state.__name__, t.__name__) for t in targets]
    return out


def mermaid() -> str:
    lines = ["stateDiagram-v2", "    [*] --> SubmitPrompt", "    [*] --> CallModel"]
    lines += [f"    {a} --> {b}" for a, b in edges()]
    lines.append("    Done --> [*]")
    return "\n".join(lines)


def walked(path: list[str]) -> str:
    """The loop's graph with the walk of one run over it: each edge taken labelled with how many times
    (tool_use turns, pause_turn resends, recoveries, approvals, nodes, compactions …); edges not taken dotted."""
    counts: dict[tuple[str, str], int] = {}
    for a, b in itertools.pairwise(path):
        counts[(a, b)] = counts.get((a, b), 0) + 1
    lines = ["flowchart LR"]
    if path:
        lines.append(f"    start(( )) --> {path[0]}")
    for a, b in edges() + [e for e in counts if e not in edges()]:  # an edge not drawn would be a bug: show it
        n = counts.get((a, b), 0)
        lines.append(f"    {a} -->|{n}| {b}" if n else f"    {a} -.-> {b}")
    if path and path[-1] == "Done":
        lines.append("    Done --> stop(( ))")
    return "\n".join(lines)

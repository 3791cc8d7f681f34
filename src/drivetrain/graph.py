"""The loop's graph, drawn from the code: each state's handler declares its edges by its return annotation."""

from __future__ import annotations

import typing

from drivetrain import loop

# state -> the function that leaves it (AwaitApproval is left when the verdicts come: Run.resume)
HANDLERS = {
    loop.SubmitPrompt: loop.submit_prompt,
    loop.CallModel: loop.call_model,
    loop.RunTools: loop.run_tools,
    loop.Recover: loop.recover,
    loop.Compact: loop.compact,
    loop.RunNode: loop.run_node,
    loop.AwaitApproval: loop.resume_approval,
    loop.Done: loop.next_prompt,
}


def edges() -> list[tuple[str, str]]:
    """(from, to) for every transition the handlers can make, in a stable order."""
    out = []
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

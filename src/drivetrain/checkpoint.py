"""A run as plain JSON, and back: pause in one process, resume in another.

Versioned, so a later drivetrain can refuse (or upgrade) a snapshot it does not
understand instead of misreading it.
"""

from __future__ import annotations

from drivetrain.approval import verdict_from_json, verdict_to_json
from drivetrain.loop import Agent, AwaitApproval, CallModel, Done, Recover, Run, RunTools, State, SubmitPrompt
from drivetrain.messages import Message, ToolUseBlock, Usage, block_from_wire
from drivetrain.models.base import ModelResponse

FORMAT = "drivetrain.run"
VERSION = 1


def snapshot(run: Run) -> dict:
    return {
        "format": FORMAT, "version": VERSION, "session_id": run.session_id,
        "history": [m.to_wire() for m in run.history], "state": _state_to_json(run.state),
        "num_turns": run.num_turns, "usage": run.usage.to_wire(), "trajectory": list(run.trajectory),
        "continuations": run.continuations, "stop_refusals": run.stop_refusals, "nudges": run.nudges,
        "stuck_turns": run.stuck_turns, "seen_calls": {k: list(v) for k, v in run.seen_calls.items()},
    }


def restore(agent: Agent, data: dict) -> Run:
    if data.get("format") != FORMAT:
        raise ValueError("not a drivetrain run snapshot")
    if data.get("version") != VERSION:
        raise ValueError(f"run snapshot version {data.get('version')} is not supported (this drivetrain reads {VERSION})")
    run = Run(agent, [Message.from_wire(m) for m in data["history"]], data["session_id"])
    run.state = _state_from_json(data["state"])
    run.num_turns = data["num_turns"]
    run.usage = Usage(**data["usage"])
    run.trajectory = list(data["trajectory"])
    run.continuations = data.get("continuations", 0)
    run.stop_refusals = data.get("stop_refusals", 0)
    run.nudges = data.get("nudges", 0)
    run.stuck_turns = data.get("stuck_turns", 0)
    run.seen_calls = {k: tuple(v) for k, v in data.get("seen_calls", {}).items()}
    run._sent = []
    return run


def _calls(calls: tuple[ToolUseBlock, ...]) -> list[dict]:
    return [c.to_wire() for c in calls]


def _state_to_json(state: State) -> dict:
    match state:
        case SubmitPrompt(prompt=p):
            return {"type": "SubmitPrompt", "prompt": p}
        case CallModel(max_tokens=m, tool_choice=c, final=f):
            return {"type": "CallModel", "max_tokens": m, "tool_choice": c, "final": f}
        case RunTools(calls=c, verdicts=v) | AwaitApproval(calls=c, verdicts=v):
            return {"type": type(state).__name__, "calls": _calls(c),
                    "verdicts": {k: verdict_to_json(x) for k, x in v.items()}}
        case Recover(response=r, max_tokens=m):
            return {"type": "Recover", "max_tokens": m, "response": {
                "content": [b.to_wire() for b in r.content], "stop_reason": r.stop_reason,
                "usage": r.usage.to_wire(), "model": r.model, "id": r.id}}
        case Done() as d:
            return {"type": "Done", "subtype": d.subtype, "stop_reason": d.stop_reason, "result": d.result,
                    "note": d.note}
    raise TypeError(f"unknown state {state!r}")


def _state_from_json(d: dict) -> State:
    match d["type"]:
        case "SubmitPrompt":
            return SubmitPrompt(d["prompt"])
        case "CallModel":
            return CallModel(d.get("max_tokens"), d.get("tool_choice"), d.get("final", ""))
        case "RunTools" | "AwaitApproval":
            calls = tuple(block_from_wire(c) for c in d["calls"])
            verdicts = {k: verdict_from_json(v) for k, v in d["verdicts"].items()}
            return (RunTools if d["type"] == "RunTools" else AwaitApproval)(calls, verdicts)  # type: ignore[arg-type]
        case "Recover":
            r = d["response"]
            response = ModelResponse(tuple(block_from_wire(b) for b in r["content"]), r["stop_reason"],
                                     Usage(**r["usage"]), r.get("model", ""), r.get("id", ""))
            return Recover(response, d["max_tokens"])
        case "Done":
            return Done(d["subtype"], d.get("stop_reason"), d.get("result", ""), d.get("note", ""))
    raise ValueError(f"unknown state in snapshot: {d['type']!r}")

"""A run as one value: the loop's closed set of states, and ``RunState``, everything a run knows.

The loop (``loop.step``) takes a ``RunState`` and returns the next one; it never changes
the one it was given. So a snapshot is the value itself, ``to_json``/``from_json`` carry
it between processes, and the session log saves it after every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, get_args

from drivetrain.control.approval import Verdict, verdict_from_json, verdict_to_json
from drivetrain.messages import Message, ToolUseBlock, Usage, block_from_wire
from drivetrain.models.base import ModelResponse

# ---------------------------------------------------------------- the loop's states

NodePoint = Literal["start", "end_turn"]  # where an added node is entered: after the prompt, or when the model stops
POINTS: tuple[str, ...] = get_args(NodePoint)
# How a run ended (the CLI's result ``subtype``); the error_max_* of a budget come from ``loop/budget.py``.
Subtype = Literal[
    "success",
    "awaiting_approval",
    "interrupted",
    "prompt_blocked",
    "stopped_by_hook",
    "error_during_execution",
    "error_loop_detected",
    "error_max_continuations",
    "error_max_turns",
    "error_max_budget_usd",
    "error_max_tokens_total",
    "error_max_wall_time",
    "error_max_tool_calls",
]


@dataclass(frozen=True)
class SubmitPrompt:
    prompt: str


@dataclass(frozen=True)
class CallModel:
    max_tokens: int | None = None  # raised above the default while recovering from a cut-off tool call
    tool_choice: str | None = None  # "none": only the answer is asked for (a send-back of the answer alone)
    final: str = ""  # why this is the last request, made without tools for the answer ("" when it is not)
    compact: bool = True  # may the history be compacted before this request (not right after a failed try)


@dataclass(frozen=True)
class RunTools:
    calls: tuple[ToolUseBlock, ...]
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # decided before a pause


@dataclass(frozen=True)
class AwaitApproval:
    calls: tuple[ToolUseBlock, ...]
    verdicts: dict[str, Verdict]  # the calls already decided; the others are pending

    @property
    def pending(self) -> list[ToolUseBlock]:
        return [c for c in self.calls if c.id not in self.verdicts]


@dataclass(frozen=True)
class Recover:
    response: ModelResponse  # cut off at max_tokens inside a tool_use: never executed
    max_tokens: int


@dataclass(frozen=True)
class Compact:
    trigger: str = "auto"  # auto (the history neared the context window) | manual (/compact, drivetrain compact)
    then: Done | None = None  # a finished run compacted by hand stays finished
    focus: str = ""  # what the summary should keep above all (``/compact FOCUS``)


@dataclass(frozen=True)
class RunNode:
    name: str  # a node the user added (``loop/nodes.py``), entered at its point of the loop
    then: State  # where the loop goes when the node says to proceed


@dataclass(frozen=True)
class Done:
    subtype: Subtype
    stop_reason: str | None = None
    result: str = ""
    note: str = ""


State = SubmitPrompt | CallModel | RunTools | AwaitApproval | Recover | Compact | RunNode | Done

# ---------------------------------------------------------------- the run


@dataclass(frozen=True)
class RunState:
    """History, current state and every counter of a run. Treat it as immutable (its dict and
    tuples are never changed in place; ``loop.step`` makes a new value)."""

    session_id: str
    history: tuple[Message, ...] = ()
    state: State = CallModel()
    num_turns: int = 0
    prompts: int = 0  # user prompts submitted
    usage: Usage = field(default_factory=Usage)
    trajectory: tuple[str, ...] = ()  # each response's stop_reason
    path: tuple[str, ...] = ()  # every state the run has been in, in order: its walk through the graph
    continuations: int = 0  # pause_turn resends in a row
    stop_refusals: int = 0  # Stop-hook refusals in a row
    stuck_turns: int = 0  # turns in a row whose calls included a refused repeat
    seen_calls: dict[str, tuple] = field(default_factory=dict)  # call -> (first turn, digest, times, result head)
    tool_calls: int = 0  # calls the model asked for
    turn_marks: tuple = ()  # the last few tool turns: (one digest of its calls and results, its call keys)
    blocked: dict[str, str] = field(default_factory=dict)  # call -> why it is not run again (a cycle)
    error_streak: tuple[str, int] = ("", 0)  # the last error result's digest, and how many times in a row
    warned: tuple[str, ...] = ()  # limits whose soft threshold was announced
    compactions: int = 0  # times the history was replaced by a summary
    compact_failures: int = 0  # failed compactions in a row (two: no more tries)
    node_visits: dict[str, int] = field(default_factory=dict)  # user-added node -> times it ran
    hook_stop: str | None = None  # a hook said {"continue": false}: the run stops after this step
    linted: int = 0  # leading messages already checked before a request and unchanged since …
    linted_of: tuple | None = field(default=None, compare=False, repr=False)  # … in this very history tuple
    # (n, the tool_use ids of history[:n]): what the next check starts from, if it starts at n (``loop.Draft.check``)
    linted_ids: tuple[int, frozenset] = field(default=(0, frozenset()), compare=False, repr=False)

    @property
    def done(self) -> bool:
        return isinstance(self.state, Done)

    def evolve(self, **changes) -> RunState:
        return replace(self, **changes)

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "session_id": self.session_id,
            "history": [m.to_wire() for m in self.history],
            **self.counters_json(),
        }

    def counters_json(self) -> dict:
        """Everything but the history (the session log saves the history as it grows, not whole each step)."""
        return {
            "state": state_to_json(self.state),
            "num_turns": self.num_turns,
            "prompts": self.prompts,
            "usage": self.usage.to_wire(),
            "trajectory": list(self.trajectory),
            "path": list(self.path),
            "continuations": self.continuations,
            "stop_refusals": self.stop_refusals,
            "stuck_turns": self.stuck_turns,
            "seen_calls": {k: list(v) for k, v in self.seen_calls.items()},
            "hook_stop": self.hook_stop,
            "tool_calls": self.tool_calls,
            "turn_marks": [[m, list(k)] for m, k in self.turn_marks],
            "blocked": dict(self.blocked),
            "error_streak": list(self.error_streak),
            "warned": list(self.warned),
            "compactions": self.compactions,
            "compact_failures": self.compact_failures,
            "node_visits": dict(self.node_visits),
        }

    @classmethod
    def from_json(cls, data: dict, history: tuple[Message, ...] | None = None) -> RunState:
        """A value saved with ``to_json`` (or, with ``history`` given, ``counters_json``)."""
        if history is None:
            if data.get("format") != FORMAT:
                raise ValueError("not a drivetrain run snapshot")
            if data.get("version") not in (1, VERSION):
                raise ValueError(
                    f"run snapshot version {data.get('version')} is not supported "
                    f"(this drivetrain reads 1 and {VERSION})"
                )
            history = tuple(Message.from_wire(m) for m in data["history"])
        return cls(
            session_id=data["session_id"],
            history=history,
            state=state_from_json(data["state"]),
            num_turns=data["num_turns"],
            prompts=data.get("prompts", 0),
            usage=Usage(**data["usage"]),
            trajectory=tuple(data["trajectory"]),
            path=tuple(data.get("path", ())),
            continuations=data.get("continuations", 0),
            stop_refusals=data.get("stop_refusals", 0),
            stuck_turns=data.get("stuck_turns", 0),
            seen_calls={k: tuple(v) for k, v in data.get("seen_calls", {}).items()},
            hook_stop=data.get("hook_stop"),
            tool_calls=data.get("tool_calls", 0),
            turn_marks=tuple((m, tuple(k)) for m, k in data.get("turn_marks", ())),
            blocked=dict(data.get("blocked", {})),
            error_streak=tuple(data.get("error_streak", ("", 0))),
            warned=tuple(data.get("warned", ())),
            compactions=data.get("compactions", 0),
            compact_failures=data.get("compact_failures", 0),
            node_visits=dict(data.get("node_visits", {})),
        )


FORMAT = "drivetrain.run"
VERSION = 2  # 2: path and hook_stop kept


def state_to_json(state: State) -> dict:
    match state:
        case SubmitPrompt(prompt=p):
            return {"type": "SubmitPrompt", "prompt": p}
        case CallModel(max_tokens=m, tool_choice=c, final=f, compact=k):
            return {"type": "CallModel", "max_tokens": m, "tool_choice": c, "final": f, "compact": k}
        case RunTools(calls=c, verdicts=v) | AwaitApproval(calls=c, verdicts=v):
            return {
                "type": type(state).__name__,
                "calls": [x.to_wire() for x in c],
                "verdicts": {k: verdict_to_json(x) for k, x in v.items()},
            }
        case Recover(response=r, max_tokens=m):
            return {
                "type": "Recover",
                "max_tokens": m,
                "response": {
                    "content": [b.to_wire() for b in r.content],
                    "stop_reason": r.stop_reason,
                    "usage": r.usage.to_wire(),
                    "model": r.model,
                    "id": r.id,
                },
            }
        case RunNode(name=n, then=then):
            return {"type": "RunNode", "name": n, "then": state_to_json(then)}
        case Compact(trigger=t, then=then, focus=f):
            return {
                "type": "Compact",
                "trigger": t,
                "then": state_to_json(then) if then else None,
                **({"focus": f} if f else {}),
            }
        case Done() as d:
            return {
                "type": "Done",
                "subtype": d.subtype,
                "stop_reason": d.stop_reason,
                "result": d.result,
                "note": d.note,
            }
    raise TypeError(f"unknown state {state!r}")


def state_from_json(d: dict) -> State:
    match d["type"]:
        case "SubmitPrompt":
            return SubmitPrompt(d["prompt"])
        case "CallModel":
            return CallModel(d.get("max_tokens"), d.get("tool_choice"), d.get("final", ""), d.get("compact", True))
        case "RunTools" | "AwaitApproval":
            calls = tuple(block_from_wire(c) for c in d["calls"])
            verdicts = {k: verdict_from_json(v) for k, v in d["verdicts"].items()}
            return (RunTools if d["type"] == "RunTools" else AwaitApproval)(calls, verdicts)  # type: ignore[arg-type]
        case "Recover":
            r = d["response"]
            response = ModelResponse(
                tuple(block_from_wire(b) for b in r["content"]),
                r["stop_reason"],
                Usage(**r["usage"]),
                r.get("model", ""),
                r.get("id", ""),
            )
            return Recover(response, d["max_tokens"])
        case "RunNode":
            return RunNode(d["name"], state_from_json(d["then"]))
        case "Compact":
            then = state_from_json(d["then"]) if d.get("then") else None
            return Compact(d.get("trigger", "auto"), then if isinstance(then, Done) else None, d.get("focus", ""))
        case "Done":
            return Done(d["subtype"], d.get("stop_reason"), d.get("result", ""), d.get("note", ""))
    raise ValueError(f"unknown state in a saved run: {d['type']!r}")

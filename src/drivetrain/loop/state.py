"""A run as one value: the loop's closed set of states, and ``RunState``, everything a run knows.

The loop (``loop.step``) takes a ``RunState`` and returns the next one; it never changes
the one it was given. So a snapshot is the value itself, ``to_json``/``from_json`` carry
it between processes, and the session log saves it after every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

from drivetrain.control.approval import Verdict, verdict_from_json, verdict_to_json
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.budget import Limit, LimitSubtype
from drivetrain.messages import Message, StopReason, ToolUseBlock, Usage, block_from_wire
from drivetrain.models.base import ModelResponse, ToolChoice

# ---------------------------------------------------------------- the loop's states

NodePoint = Literal["start", "end_turn"]  # where an added node is entered: after the prompt, or when the model stops
POINTS: tuple[NodePoint, ...] = get_args(NodePoint)
# How a run ended (the CLI's result ``subtype``); the error_max_* of a budget come from ``loop/budget.py``.
Subtype = (
    Literal[
        "success",
        "awaiting_approval",
        "interrupted",
        "prompt_blocked",
        "stopped_by_hook",
        "error_during_execution",
        "error_upstream",
        "error_loop_detected",
        "error_max_continuations",
    ]
    | LimitSubtype
)
FinalAsk = Literal["turn_limit", "stuck", "empty"]  # why a last request is made without tools, besides a limit
CompactTrigger = Literal["auto", "manual"]  # the history neared the context window | /compact, drivetrain compact
# a call made before: (its first turn, its result's digest, times, its result's head: not in runs saved before it was)
SeenCall = tuple[int, str, int, str] | tuple[int, str, int]
TurnMark = tuple[str, tuple[str, ...]]  # a tool turn: (one digest of its calls and results, its call keys)


@dataclass(frozen=True)
class SubmitPrompt:
    prompt: str


@dataclass(frozen=True)
class CallModel:
    max_tokens: int | None = None  # raised above the default while recovering from a cut-off tool call
    tool_choice: ToolChoice | None = None  # "none": only the answer is asked for (a send-back of the answer alone)
    final: FinalAsk | Limit | Literal[""] = ""  # why this is the last request, made without tools for the answer
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
    trigger: CompactTrigger = "auto"
    then: Done | None = None  # a finished run compacted by hand stays finished
    focus: str = ""  # what the summary should keep above all (``/compact FOCUS``)


@dataclass(frozen=True)
class RunNode:
    name: str  # a node the user added (``loop/nodes.py``), entered at its point of the loop
    then: CallModel | Done  # where the loop goes when the node says to proceed (from "start" | "end_turn")


@dataclass(frozen=True)
class Done:
    subtype: Subtype
    stop_reason: StopReason | None = None
    result: str = ""
    note: str = ""


State = SubmitPrompt | CallModel | RunTools | AwaitApproval | Recover | Compact | RunNode | Done

# ---------------------------------------------------------------- nodes a user adds (``loop/nodes.py``)


@dataclass(frozen=True)
class Proceed:
    """A node's answer: go on as if the node were not there."""


@dataclass(frozen=True)
class Note:
    """A node's answer: go on, with ``text`` told to the model."""

    text: str


@dataclass(frozen=True)
class SendBack:
    """A node's answer at ``end_turn``: the model may not stop yet; ``text`` says why, and it goes back to work."""

    text: str
    # the next request's tool_choice: None as usual; "none" only the answer must change (asked for without tools);
    # "any" a call comes first (the work is not done: another answer without acting is not a reply to it)
    tool_choice: ToolChoice | None = None


NodeResult = Proceed | Note | SendBack


class NodeContext(Protocol):
    """What a node may see and use: the history so far, the workspace, the model (one request, no tools).
    The loop gives a node the run's own (``loop.nodes.DraftContext``)."""

    @property
    def history(self) -> list[Message]: ...
    @property
    def cwd(self) -> Path: ...
    @property
    def answer(self) -> str:
        """The model's last text (at ``end_turn``: the answer it wants to stop with)."""
        ...

    async def run(self, command: str, timeout_ms: int = 120_000) -> tuple[int | None, str]:
        """Run a shell command as the harness's own Bash call: (exit code, output); the code is None when it
        did not run."""
        ...

    async def ask(self, text: str, max_tokens: int = 1024) -> str:
        """One request where no tool may be called: the history so far, then ``text``."""
        ...


class Node(Protocol):
    """A step added to the loop at a point (``at``): entered at most ``limit`` times a run, it answers with a
    ``Proceed``, a ``Note`` or a ``SendBack`` (``Verify``, ``PlanFirst`` and the small profile's checks are nodes).
    Here, below the loop's parts, so the profile's ``Outfit`` and the loop's settings can name it."""

    @property
    def name(self) -> str: ...
    @property
    def at(self) -> NodePoint: ...
    @property
    def limit(self) -> int:  # times a run
        ...

    async def run(self, ctx: NodeContext) -> NodeResult: ...


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
    trajectory: tuple[StopReason, ...] = ()  # each response's stop_reason
    path: tuple[str, ...] = ()  # every state the run has been in, in order: its walk through the graph
    continuations: int = 0  # pause_turn resends in a row
    stop_refusals: int = 0  # Stop-hook refusals in a row
    stuck_turns: int = 0  # turns in a row whose calls included a refused repeat
    seen_calls: dict[str, SeenCall] = field(default_factory=dict)  # call -> what it got before (``calls.py``)
    tool_calls: int = 0  # calls the model asked for
    turn_marks: tuple[TurnMark, ...] = ()  # the last few tool turns (``guard.py``)
    blocked: dict[str, str] = field(default_factory=dict)  # call -> why it is not run again (a cycle)
    error_streak: tuple[str, int] = ("", 0)  # the last error result's digest, and how many times in a row
    warned: tuple[Limit, ...] = ()  # limits whose soft threshold was announced
    compactions: int = 0  # times the history was replaced by a summary
    compact_failures: int = 0  # failed compactions in a row (two: no more tries)
    node_visits: dict[str, int] = field(default_factory=dict)  # user-added node -> times it ran
    hook_stop: str | None = None  # a hook said {"continue": false}: the run stops after this step
    linted: int = 0  # leading messages already checked before a request and unchanged since …
    # … in this very history tuple
    linted_of: tuple[Message, ...] | None = field(default=None, compare=False, repr=False)
    # (n, the tool_use ids of history[:n]): what the next check starts from, if it starts at n (``loop.Draft.check``)
    linted_ids: tuple[int, frozenset[str]] = field(default=(0, frozenset()), compare=False, repr=False)

    @property
    def done(self) -> bool:
        return isinstance(self.state, Done)

    def evolve(self, **changes: Any) -> RunState:  # Any: any of the fields, each checked by ``replace`` as it runs
        return replace(self, **changes)

    def to_json(self) -> JsonObject:
        return {
            "format": FORMAT,
            "version": VERSION,
            "session_id": self.session_id,
            "history": [m.to_wire() for m in self.history],
            **self.counters_json(),
        }

    def counters_json(self) -> JsonObject:
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
    def from_json(cls, data: JsonObject, history: tuple[Message, ...] | None = None) -> RunState:
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


def state_to_json(state: State) -> JsonObject:
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


def state_from_json(d: JsonObject) -> State:
    match d["type"]:
        case "SubmitPrompt":
            return SubmitPrompt(d["prompt"])
        case "CallModel":
            return CallModel(d.get("max_tokens"), d.get("tool_choice"), d.get("final", ""), d.get("compact", True))
        case "RunTools" | "AwaitApproval":
            calls = tuple(_call_from_wire(c) for c in d["calls"])
            verdicts = {k: verdict_from_json(v) for k, v in d["verdicts"].items()}
            return RunTools(calls, verdicts) if d["type"] == "RunTools" else AwaitApproval(calls, verdicts)
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
            then = state_from_json(d["then"])
            if not isinstance(then, (CallModel, Done)):
                raise ValueError(f"a saved run's node goes on to {type(then).__name__}, not CallModel or Done")
            return RunNode(d["name"], then)
        case "Compact":
            after = state_from_json(d["then"]) if d.get("then") else None
            return Compact(d.get("trigger", "auto"), after if isinstance(after, Done) else None, d.get("focus", ""))
        case "Done":
            return Done(d["subtype"], d.get("stop_reason"), d.get("result", ""), d.get("note", ""))
    raise ValueError(f"unknown state in a saved run: {d['type']!r}")


def _call_from_wire(data: JsonObject) -> ToolUseBlock:
    block = block_from_wire(data)
    if not isinstance(block, ToolUseBlock):
        raise ValueError(f"a saved run's tool call is a {block.type!r} block, not tool_use")
    return block

"""What a session did, and whether it went well: its turn log and three health signals, from its records.

Pure functions over a session's records (``SessionStore.read``), for ``drivetrain sessions show``:

- ``turn_log``: each model response (a ``turn`` record) with the assistant message it added to the
  history, its tool calls, the first 100 characters of each result and the decision that let or
  stopped each call (the audit log's ``intent``/``denied``/``deferred``/``not_run`` records).
- ``health``: repeated identical calls (same tool, input and result: a loop, not progress); the
  stop_reason trajectory (first turn already ``end_turn``? ``tool_use`` all the way to the turn
  cap?); and whether the final answer cites what the tools returned — its file names, ``file:line``
  references and numbers, each looked for in the tools' results and inputs.

The history is rebuilt as ``session.load`` does (``history`` records: cut at ``at``, then these
messages); nothing is repaired or written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from drivetrain.jsontypes import JsonObject, JsonValue
from drivetrain.messages import Message, ToolResultBlock, ToolUseBlock
from drivetrain.sessions.store import Record, fold

HEAD_CHARS = 100  # of each tool result, in the turn log
# what the harness adds to a repeated call's result (calls._note_repeat), and says instead of re-running one
_REPEAT_NOTE = re.compile(r"\n\n\[drivetrain: this is the same \S+ call you made in turn \d+.*\]\Z", re.S)
_REFUSED_REPEAT = "Not run: you have made this exact "

# What let or stopped a call: the audit log's intent (its decision), denied, deferred or not_run record
CallDecision = Literal["allow", "deny", "defer", "not_run"]
Verdict = Literal["cites tool results", "cites nothing the tools returned", "no checkable claims"]


@dataclass(frozen=True)
class CallEntry:
    id: str
    tool: str
    input: JsonObject
    result_head: str | None  # the first HEAD_CHARS characters of the result; None: no result in the log
    result_chars: int  # the result's whole length
    is_error: bool
    decision: CallDecision | None  # None when no audit record names the call
    decided_by: str | None
    reason: str | None


@dataclass(frozen=True)
class TurnEntry:
    turn: int
    stop_reason: str | None
    usage: JsonObject
    cost_usd: float | None
    model: str | None
    text: str  # the assistant's text in this turn (a plan line, or the answer)
    calls: tuple[CallEntry, ...]


@dataclass(frozen=True)
class Grounding:
    verdict: Verdict
    found: tuple[str, ...]  # evidence-like tokens of the answer that appear in a tool result or input
    not_found: tuple[str, ...]


@dataclass(frozen=True)
class Health:
    repeated_calls: tuple[tuple[str, JsonObject, int], ...]  # (tool, input, times) for identical call+result pairs
    trajectory: tuple[str, ...]  # each turn's stop_reason
    ended_at_once: bool  # the first turn was already end_turn, without a tool call
    tool_use_to_cap: bool  # every turn tool_use, and the run stopped at its turn cap
    answer_grounding: Grounding


# ---------------------------------------------------------------- the turn log


def turn_log(records: Sequence[Record]) -> list[TurnEntry]:
    history: list[Message] = []
    turns: list[tuple[Record, Message | None]] = []
    claimed: set[int] = set()  # id() of the assistant messages already paired with a turn
    results: dict[str, ToolResultBlock] = {}  # tool_use_id -> its result, as last seen in the history
    decisions: dict[str, tuple[CallDecision, str | None, str | None]] = {}
    for r in records:
        match r.get("kind"):
            case "history":
                history = history[: r["at"]] + [Message.from_wire(m) for m in r["messages"]]
                for m in history[r["at"] :]:
                    for b in m.content:
                        if isinstance(b, ToolResultBlock):
                            results[b.tool_use_id] = b
            case "turn":
                # the step that saved this turn saved its message just before; a response that never
                # reached the history (cut off inside a tool call) leaves an already paired message last
                last = next((m for m in reversed(history) if m.role == "assistant"), None)
                if last is not None and id(last) in claimed:
                    last = None
                if last is not None:
                    claimed.add(id(last))
                turns.append((r, last))
            case "intent":
                decisions[r["call_id"]] = (r.get("decision") or "allow", r.get("decided_by"), r.get("reason"))
            case "denied":
                decisions[r["call_id"]] = ("deny", r.get("decided_by"), r.get("reason"))
            case "deferred":
                decisions[r["call_id"]] = ("defer", None, None)
            case "not_run":
                decisions[r["call_id"]] = ("not_run", None, r.get("reason"))
    return [_entry(r, m, results, decisions) for r, m in turns]


def _entry(
    r: Record,
    message: Message | None,
    results: dict[str, ToolResultBlock],
    decisions: dict[str, tuple[CallDecision, str | None, str | None]],
) -> TurnEntry:
    calls = []
    for use in message.tool_uses if message is not None else ():
        res = results.get(use.id)
        text = res.text if res is not None else None
        decision, by, reason = decisions.get(use.id, (None, None, None))
        calls.append(
            CallEntry(
                use.id,
                use.name,
                use.input,
                text[:HEAD_CHARS] if text is not None else None,
                len(text or ""),
                bool(res and res.is_error),
                decision,
                by,
                reason,
            )
        )
    return TurnEntry(
        int(r.get("turn") or 0),
        r.get("stop_reason"),
        dict(r.get("usage") or {}),
        r.get("cost_usd"),
        r.get("model"),
        message.text if message is not None else "",
        tuple(calls),
    )


# ---------------------------------------------------------------- health


def health(records: Sequence[Record]) -> Health:
    history = _history(records)
    uses = [b for m in history if m.role == "assistant" for b in m.content if isinstance(b, ToolUseBlock)]
    results = {
        b.tool_use_id: b.text for m in history if m.role == "user" for b in m.content if isinstance(b, ToolResultBlock)
    }
    turns = [r for r in records if r.get("kind") == "turn"]
    trajectory = tuple(str(r.get("stop_reason")) for r in turns)
    result = next((r for r in reversed(records) if r.get("kind") == "result"), None)
    first = turn_log(records)[:1]
    answer = (result or {}).get("result") or next((m.text for m in reversed(history) if m.role == "assistant"), "")
    corpus = "\n".join([*results.values(), *(_input_text(u.input) for u in uses)])
    return Health(
        repeated_calls=_repeats(uses, results),
        trajectory=trajectory,
        ended_at_once=bool(first) and first[0].stop_reason == "end_turn" and not first[0].calls,
        tool_use_to_cap=bool(trajectory)
        and all(s == "tool_use" for s in trajectory)
        and (result or {}).get("subtype") == "error_max_turns",
        answer_grounding=grounding(answer, corpus),
    )


def _history(records: Sequence[Record]) -> list[Message]:
    history: list[Message] = []
    for r in records:
        if r.get("kind") == "history":
            history = history[: r["at"]] + [Message.from_wire(m) for m in r["messages"]]
    return history


def _repeats(uses: list[ToolUseBlock], results: dict[str, str]) -> tuple[tuple[str, JsonObject, int], ...]:
    """Identical calls with identical results. The harness's own repeat note is not part of the result,
    and a repeat it refused to run counts as one more of the same call."""
    counts: dict[tuple[str, str, str], int] = {}
    inputs: dict[tuple[str, str, str], JsonObject] = {}
    last: dict[tuple[str, str], str] = {}  # (tool, input) -> its last real result
    for use in uses:
        call = (use.name, json.dumps(use.input, sort_keys=True, ensure_ascii=False))
        text = results.get(use.id)
        if text is None:
            continue
        text = _REPEAT_NOTE.sub("", text)
        if text.startswith(_REFUSED_REPEAT) and call in last:
            text = last[call]
        last[call] = text
        key = (*call, text)
        counts[key] = counts.get(key, 0) + 1
        inputs[key] = use.input
    return tuple((k[0], inputs[k], n) for k, n in counts.items() if n >= 2)


def _input_text(value: JsonValue) -> str:
    """A tool input's strings and numbers, one per line (a path the model passed is evidence it had)."""
    if isinstance(value, dict):
        return "\n".join(_input_text(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(_input_text(v) for v in value)
    return str(value)


# ---------------------------------------------------------------- does the answer cite what the tools returned?

_FILE_LINE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,7}):(\d+)\b")
_PATH = re.compile(
    r"(?<![\w/.-])(?:\.{1,2}/|/|~/)?[\w-][\w.-]*(?:/[\w.-]+)+/?|"
    r"(?<![\w/.-])[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,7}\b"
)
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?![\w])")


def _path_like(token: str) -> bool:
    """A path by its shape, in any language: a file name has a stem or an extension of two characters or more
    (``a.py``, ``notes.md``; not ``e.g``), a path with no extension starts at a root or has three parts or more
    (``/etc/hosts``, ``src/app/models``; not ``and/or``)."""
    name = token.rstrip("/").rsplit("/", 1)[-1]
    stem, dot, ext = name.rpartition(".")
    if dot and stem and len(stem) + len(ext) > 2:
        return True
    return token.startswith(("/", "./", "../", "~/")) or token.count("/") >= 2


def evidence(answer: str) -> list[str]:
    """The tokens of an answer that can be checked against the tools' output: ``file:line`` references,
    paths and file names, and numbers of two digits or more (single digits match anything by chance)."""
    found: list[str] = []
    rest = answer
    for pattern in (_FILE_LINE, _PATH):
        for m in pattern.finditer(rest):
            token = m.group(0).rstrip(".,/")
            if _path_like(token) and not token.replace(".", "").isdigit():
                found.append(token)
        rest = pattern.sub(" ", rest)
    for m in _NUMBER.finditer(rest):
        token = m.group(0).rstrip(",")
        if len(token.replace(",", "").replace(".", "")) >= 2:
            found.append(token)
    return list(dict.fromkeys(found))


def cited(token: str, corpus: str) -> bool:
    """Whether ``token`` (from ``evidence``) appears in the tools' results and inputs."""
    if m := _FILE_LINE.fullmatch(token):
        path, line = m.groups()
        return token in corpus or (cited(path, corpus) and _number_in(line, corpus))
    if not _NUMBER.fullmatch(token):  # a path or a file name: itself, or its last part (a tool may show it relative)
        name = token.rstrip("/").rsplit("/", 1)[-1]  # capitalised at the start of a sentence, it is the same file
        return _word_in(token, corpus) or (bool(name) and (_word_in(name, corpus) or _word_in(_uncap(name), corpus)))
    return _number_in(token, corpus) or ("," in token and _number_in(token.replace(",", ""), corpus))


def _uncap(word: str) -> str:
    return word[:1].lower() + word[1:]


def _word_in(word: str, corpus: str) -> bool:
    return re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", corpus) is not None


def _number_in(number: str, corpus: str) -> bool:
    return re.search(rf"(?<![\d.]){re.escape(number)}(?!\.?\d)", corpus) is not None


def grounding(answer: str, corpus: str) -> Grounding:
    tokens = evidence(answer)
    found = tuple(t for t in tokens if cited(t, corpus))
    not_found = tuple(t for t in tokens if t not in found)
    verdict: Verdict = (
        "no checkable claims" if not tokens else "cites tool results" if found else "cites nothing the tools returned"
    )
    return Grounding(verdict, found, not_found)


# ---------------------------------------------------------------- output


def to_json(records: Sequence[Record]) -> JsonObject:
    info = fold(None, records)
    h = health(records)
    return {
        "session": info.to_json() if info is not None else None,
        "turns": [asdict(t) for t in turn_log(records)],
        "trajectory": list(h.trajectory),
        "health": {
            "repeated_calls": [{"tool": t, "input": i, "count": n} for t, i, n in h.repeated_calls],
            "ended_at_once": h.ended_at_once,
            "tool_use_to_cap": h.tool_use_to_cap,
            "answer_grounding": asdict(h.answer_grounding),
        },
    }


def render_text(records: Sequence[Record], nested: Mapping[str, str] | None = None) -> str:
    """The session as text; ``nested`` holds, by tool_use id, what to show indented under a call (a subagent's
    own session, under the Task call that ran it)."""
    nested = nested or {}
    info = fold(None, records)
    lines = []
    if info is not None:
        lines.append(
            f"session {info.session_id}  {info.status}  {info.num_turns} turns  "
            f"{cost_text(info.total_cost_usd)}  {info.model or '?'}  {info.cwd or '?'}"
        )
        if info.first_prompt:
            lines.append(f"prompt: {_one_line(info.first_prompt)[:160]}")
    for t in turn_log(records):
        lines.append(
            f"[turn {t.turn}] {t.stop_reason}  {t.usage.get('input_tokens', 0)} in / "
            f"{t.usage.get('output_tokens', 0)} out{_cached(t.usage)}  {cost_text(t.cost_usd)}"
        )
        if t.text.strip():
            lines.append(f'  " {_one_line(t.text)[:160]}')
        for c in t.calls:
            lines.append(f"  → {c.tool} {json.dumps(c.input, ensure_ascii=False)[:200]}")
            if c.decision in ("deny", "defer", "not_run"):
                why = c.reason if c.reason and not _said(c.reason, c.result_head) else ""
                lines.append(
                    f"  ! {c.decision}"
                    + (f" by {c.decided_by}" if c.decided_by else "")
                    + (f": {_one_line(why)[:160]}" if why else "")
                )
            if c.result_head is not None:
                more = "…" if c.result_chars > HEAD_CHARS else ""
                lines.append(f"  {'✗' if c.is_error else '←'} {_escaped(c.result_head)}{more}")
            else:
                lines.append("  ? no result in the log")
            if c.id in nested:
                lines += ["    " + line for line in nested[c.id].splitlines()]
    lines += attempts_text(records, nested)
    h = health(records)
    lines.append("trajectory: " + (" → ".join(h.trajectory) or "(no turns)"))
    lines.append("health:")
    repeats = "; ".join(f"{t} {json.dumps(i, ensure_ascii=False)[:80]} ×{n}" for t, i, n in h.repeated_calls)
    lines.append(f"  repeated identical calls: {repeats or 'none'}")
    lines.append(f"  first turn already end_turn: {'yes' if h.ended_at_once else 'no'}")
    lines.append(f"  tool_use all the way to the turn cap: {'yes' if h.tool_use_to_cap else 'no'}")
    g = h.answer_grounding
    lines.append(f"  answer grounding: {g.verdict}")
    if g.found:
        lines.append(f"    found in tool output: {', '.join(g.found)}")
    if g.not_found:
        lines.append(f"    not in any tool output: {', '.join(g.not_found)}")
    return "\n".join(lines)


def attempts_text(records: Sequence[Record], nested: Mapping[str, str]) -> list[str]:
    """A run of several attempts (small/attempts.py): each side by side, which won and why, then each one's turns
    (``nested["attempt-N"]``, its own session rendered)."""
    lines: list[str] = []
    for r in records:
        if r.get("kind") != "attempts":
            continue
        each = [e for e in r.get("each", []) if isinstance(e, dict)]
        lines.append(f"attempts: {r.get('count')}, chosen: {r.get('chosen') or 'none'} ({r.get('reason')})")
        lines.append(f"  {'#':>2}  {'seed':>10}  {'temp':>4}  {'ended':<22}{'turns':>5}  changed / checks")
        for e in each:
            mark = "*" if e.get("attempt") == r.get("chosen") else " "
            ended = "stopped" if e.get("stopped") else "abandoned" if e.get("abandoned") else str(e.get("subtype"))
            checks = ", ".join(f"`{c}` → {code}" for c, code in dict(e.get("checks") or {}).items())
            why = f"; cannot win: {e['hard_fail']}" if e.get("hard_fail") else ""
            if e.get("abandoned"):
                why += f"; abandoned for a fresh attempt: {e['abandoned']}"
            if objections := [str(o) for o in e.get("objections") or []]:
                why += f"; the checks still objected: {', '.join(objections)}"
            lines.append(
                f"{mark} {e.get('attempt'):>2}  {e.get('seed'):>10}  {e.get('temperature'):>4}  {ended:<22}"
                f"{e.get('num_turns'):>5}  {', '.join(e.get('changed') or []) or '-'}"
                f"{' / ' + checks if checks else ''}{why}"
            )
        for e in each:
            key = f"attempt-{e.get('attempt')}"
            if key in nested:
                lines.append(f"attempt {e.get('attempt')}:")
                lines += ["    " + line for line in nested[key].splitlines()]
    return lines


def cost_text(cost: float | None) -> str:
    return "$?" if cost is None else f"${cost:.6f}".rstrip("0").rstrip(".") if cost else "$0"


def _cached(usage: JsonObject) -> str:
    read, write = usage.get("cache_read_input_tokens", 0), usage.get("cache_creation_input_tokens", 0)
    return f" (+{read} cache read, {write} cache write)" if read or write else ""


def _said(reason: str, result_head: str | None) -> bool:
    """The result (shown next) already starts with the reason: do not print it twice."""
    if not result_head:
        return False
    return _one_line(result_head).startswith(_one_line(reason)[: HEAD_CHARS // 2])


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")

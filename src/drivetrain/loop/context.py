"""What the model sees of the history: the log keeps everything, the request may show less.

For every profile (``ContextSettings``, on by default):

- ``cap_result``: a tool result larger than its share of the context still free is cut to its head and
  tail when it is made (so the history and the log hold the cut text); the whole output is saved under
  the session folder, and the result says where and how to page through it with Read.
- ``clear_old_results``: once the request would pass ``clear_at`` of the context window, the results of
  the oldest tool rounds (never the last ``keep_rounds``) are replaced by a short placeholder that keeps
  the call and says how to get the output again, down to ``clear_to`` of the window. Clearing rewrites
  the prompt from the first changed result on, so invalidates a prompt cache from there: it is done in
  one batch down to the low-water mark, then not again until the high-water mark is passed.
  The view is recomputed from the whole history each turn, by replaying the same decisions in order,
  so a request's prefix is the previous request's prefix unless a batch was cleared in between.

For the small profile, also:

- ``collapse_repeats``: a round (one assistant turn of calls and the results that answer it) that
  is repeated later with the same calls and the same results is left out; only the last copy stays.
  Repetition feeds itself the more copies sit in the context.
- ``shorten_outputs``: a long tool result is shown head and tail; once the results no longer fit
  the budget, the oldest rounds' results are cut to a stub that says how to get them again. The cut
  advances ``step`` rounds at a time, so the prompt prefix (and a prompt cache) is rewritten rarely.

Both keep the history valid: a round is dropped whole, and a shortened result keeps its call.
"""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import Protocol

from drivetrain.home import safe_name, session_outputs
from drivetrain.jsontypes import JsonObject
from drivetrain.loop.draft import ContextSettings as ContextSettings  # re-exported: what this module reads
from drivetrain.loop.draft import Draft
from drivetrain.loop.profile import Outfit, Profile
from drivetrain.messages import CHARS_PER_TOKEN, Block, Message, ToolResultBlock, ToolResultContent, ToolUseBlock
from drivetrain.models.base import Model
from drivetrain.pricing import window_of
from drivetrain.tools.base import tool_spec


class ViewSettings(Protocol):
    """What the request's view of the history depends on (a run's ``loop.draft.Deps``: its outfit's system prompt
    and the tools it offers, the agent's profile and context settings)."""

    @property
    def system(self) -> str: ...
    @property
    def outfit(self) -> Outfit: ...
    @property
    def profile(self) -> Profile: ...
    @property
    def context_settings(self) -> ContextSettings: ...


CONTEXT_OFF = ContextSettings(cap_outputs=False, clear=False)


# ---------------------------------------------------------------- accounting


def fixed_tokens(system: str, tools: list[JsonObject]) -> int:
    """What every request carries besides the history: the system prompt and the tool definitions."""
    return (len(system) + len(json.dumps(tools))) // CHARS_PER_TOKEN


def history_tokens(history: list[Message]) -> int:
    """Estimated (``Message.tokens``, measured once per message: every request sums them over the history)."""
    return sum(m.tokens for m in history)


# ---------------------------------------------------------------- caps, when a result is made


def result_cap(window: int, used: int, reserve: int, calls: int, s: ContextSettings) -> int:
    """Characters one result may keep: its share of what is left of the window after the request so far
    (``used`` tokens) and the answer (``reserve``), split between the round's ``calls``."""
    free = window - used - reserve
    tokens = s.result_share * free / max(calls, 1)
    return int(min(max(tokens, s.min_result_tokens), s.max_result_tokens)) * CHARS_PER_TOKEN


def cap_result(w: Draft, call_id: str, content: ToolResultContent) -> ToolResultContent:
    """``content`` cut to its share of the free context, the whole of it saved (see ``cap_text``)."""
    agent, deps = w.deps.agent, w.deps
    settings = agent.context_settings
    if not settings.cap_outputs or agent.profile.context or not isinstance(content, str):
        return content  # the small profile's shorten_outputs clips long output in its own way
    if len(content) <= settings.min_result_tokens * CHARS_PER_TOKEN:
        return content  # within the smallest cap there is: no need to measure the context
    window = window_of(w.deps.model)
    used = fixed_tokens(deps.system, _specs(deps)) + history_tokens(_view(w.history, deps, window, None))
    calls = len(w.history[-1].tool_uses) if w.history else 1
    limit = result_cap(window, used, agent.max_tokens, calls, settings)
    return cap_text(
        content,
        limit,
        session_outputs(w.value.session_id) / f"{safe_name(call_id)}.txt",
        reader="Read" if "Read" in w.deps.tools else None,
    )


def cap_text(text: str, limit: int, path: Path, reader: str | None = "Read") -> str:
    """``text`` if it fits in ``limit`` characters; else its head and tail, whole lines, with a note between
    saying which lines are left out, where the whole text is saved and how to read them."""
    if len(text) <= limit:
        return text
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    lines = text.split("\n")
    half = max(limit // 2 - 200, 200)
    head, size = 0, 0
    while head < len(lines) and size + len(lines[head]) + 1 <= half:
        size += len(lines[head]) + 1
        head += 1
    tail, size = len(lines), 0
    while tail > head and size + len(lines[tail - 1]) + 1 <= half:
        size += len(lines[tail - 1]) + 1
        tail -= 1
    if head == 0 and tail == len(lines):  # one huge line: cut inside it
        return f"{text[:half]}\n{_note(path, 1, 1, len(lines), len(text), reader, cut_line=True)}\n{text[-half:]}"
    note = _note(path, head + 1, tail, len(lines), len(text), reader)
    return "\n".join([*lines[:head], note, *lines[tail:]])


def _note(path: Path, first: int, last: int, total: int, chars: int, reader: str | None, cut_line: bool = False) -> str:
    where = "the middle of this output" if cut_line else f"lines {first}-{last} of {total}"
    how = (
        f"Read it with file_path {path}, offset {first} and a limit (e.g. 200 lines at a time)"
        if reader
        else f"print parts of it (sed -n '{first},{min(last, first + 199)}p' {path})"
    )
    return f"[... {where} not shown ({chars} characters in all). The whole output is saved: {how}. ...]"


# ---------------------------------------------------------------- clearing, in the model's view


def _placeholder(block: ToolResultBlock, call: ToolUseBlock | None, outputs: Path | None) -> ToolResultBlock:
    saved = outputs / f"{safe_name(block.tool_use_id)}.txt" if outputs is not None else None
    if saved is not None and saved.exists():
        again = f"its whole output is saved: Read {saved} (with offset and limit) if you need it again"
    else:
        name = call.name if call is not None else "the call"
        again = f"make the {name} call again if you need it (mind that running a command twice may not be harmless)"
    text = (
        f"[Output cleared to save context ({len(block.text)} characters); the call is kept above. To see it, {again}.]"
    )
    return ToolResultBlock(block.tool_use_id, text, block.is_error)


def _cleared_once(message: Message, calls: dict[str, ToolUseBlock], keep_under: int, outputs: Path | None) -> Message:
    """``_cleared``, made once per message: the same object every request (no file checks again, and the
    tokens measured once)."""
    hit = _CLEARED.get(id(message))
    if hit is not None and hit[0]() is message:
        return hit[1]
    out = _cleared(message, calls, keep_under, outputs)
    key = id(message)

    def forget(_: weakref.ref[Message]) -> None:
        _CLEARED.pop(key, None)

    _CLEARED[key] = (weakref.ref(message, forget), out)
    return out


_CLEARED: dict[int, tuple[weakref.ref[Message], Message]] = {}  # id(results message) -> (it, its cleared copy)


def _cleared(message: Message, calls: dict[str, ToolUseBlock], keep_under: int, outputs: Path | None) -> Message:
    content = tuple(
        _placeholder(b, calls.get(b.tool_use_id), outputs)
        if isinstance(b, ToolResultBlock) and len(b.text) > keep_under
        else b
        for b in message.content
    )
    return Message(message.role, content)


def clear_old_results(
    history: list[Message], s: ContextSettings, window: int, fixed: int = 0, outputs: Path | None = None
) -> list[Message]:
    """The history with the oldest rounds' results cleared, in batches (see the module docstring).

    Replays the history in order: whenever the request up to a message would pass ``clear_at`` of the
    window, rounds are cleared from the oldest on until it is under ``clear_to`` (or only the last
    ``keep_rounds`` are left). Rounds cleared once stay cleared, so the view only changes at a batch."""
    high, low = s.clear_at * window, s.clear_to * window
    if fixed + history_tokens(history) <= high:
        return history  # the request never passed the mark at any point (totals only grow): nothing to clear
    total = fixed
    rounds: list[tuple[int, int]] = []  # (index of a results message, its tokens)
    cut = 0  # rounds[:cut] are cleared
    cleared: dict[int, Message] = {}
    calls: dict[str, ToolUseBlock] = {}
    for i, m in enumerate(history):
        size = m.tokens
        total += size
        if m.role == "assistant":
            calls.update((u.id, u) for u in m.tool_uses)
        elif any(isinstance(b, ToolResultBlock) for b in m.content):
            rounds.append((i, size))
        if total > high and len(rounds) - cut > s.keep_rounds:
            while total > low and cut < len(rounds) - s.keep_rounds:
                j, full = rounds[cut]
                cleared[j] = _cleared_once(history[j], calls, s.keep_under, outputs)
                total -= full - cleared[j].tokens
                cut += 1
    if not cleared:
        return history
    return [cleared.get(i, m) for i, m in enumerate(history)]


def _round_key(assistant: Message, user: Message) -> str | None:
    uses = assistant.tool_uses
    results = [b for b in user.content if isinstance(b, ToolResultBlock)]
    if not uses or len(results) != len(user.content) or len(results) != len(uses):
        return None  # not a plain round (text in it, or not answered one for one): never dropped
    return json.dumps(
        [[u.name, u.input] for u in uses] + [[r.text, r.is_error] for r in results], sort_keys=True, default=str
    )


def collapse_repeats(history: list[Message]) -> list[Message]:
    keys: dict[int, str] = {}
    for i in range(len(history) - 1):
        a, u = history[i], history[i + 1]
        if a.role == "assistant" and u.role == "user":
            key = _round_key(a, u)
            if key is not None:
                keys[i] = key
    last = {key: i for i, key in keys.items()}  # where each round is made for the last time
    skip = {j for i, key in keys.items() if last[key] != i for j in (i, i + 1)}
    if not skip:
        return history
    # No note on the copy that stays: a small model copied such a note into its next command. A copy of the
    # call past ``repeat_limit`` with the same result is refused by the loop (``calls._refuse_repeat``).
    return [msg for i, msg in enumerate(history) if i not in skip]


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return (
        f"{text[:half]}\n[... {len(text) - 2 * half} characters not shown: print less at a time "
        f"(head, tail, sed -n 'A,Bp', grep) ...]\n{text[-half:]}"
    )


def shorten_outputs(
    history: list[Message], *, per_result: int = 3000, budget: int = 12000, keep_rounds: int = 3, step: int = 4
) -> list[Message]:
    """Clip each result to ``per_result`` characters; past ``budget`` characters of results, cut old rounds."""
    results = {
        i: [b for b in m.content if isinstance(b, ToolResultBlock)] for i, m in enumerate(history) if m.role == "user"
    }
    rounds = [i for i, blocks in results.items() if blocks]
    per_round = [sum(min(len(b.text), per_result) for b in results[i]) for i in rounds]
    cut = 0  # results in rounds[:cut] become stubs
    if sum(per_round) > budget:
        cut = step
        while cut < len(rounds) - keep_rounds and sum(per_round[cut:]) > budget:
            cut += step
        cut = min(cut, max(len(rounds) - keep_rounds, 0))
    stubbed = set(rounds[:cut])
    out = []
    for i, msg in enumerate(history):
        if i in stubbed or any(len(b.text) > per_result for b in results.get(i, ())):
            msg = Message("user", tuple(_shorten(b, per_result, i in stubbed) for b in msg.content))
        out.append(msg)
    return out


def _shorten(block: Block, per_result: int, stub: bool) -> Block:
    if not isinstance(block, ToolResultBlock):
        return block
    text = block.text
    if stub and len(text) > 200:
        text = f"{text[:200]}\n[... older output shortened; run the command again if you need it ...]"
    else:
        text = clip(text, per_result)
    if text == block.text:
        return block
    return ToolResultBlock(block.tool_use_id, text, block.is_error)


def model_view(
    history: list[Message],
    *,
    collapse: bool = False,
    shorten: bool = False,
    settings: ContextSettings = CONTEXT_OFF,
    window: int = 0,
    fixed: int = 0,
    outputs: Path | None = None,
) -> list[Message]:
    if collapse:
        history = collapse_repeats(history)
    if settings.clear and window > 0 and not shorten:  # shorten_outputs does it the small profile's way
        history = clear_old_results(history, settings, window, fixed, outputs)
    if shorten:
        history = shorten_outputs(history)
    return history


def _specs(agent: ViewSettings) -> list[JsonObject]:
    return [tool_spec(t) for t in agent.outfit.tools]


def _view(history: list[Message], agent: ViewSettings, window: int, outputs: Path | None) -> list[Message]:
    p = agent.profile
    return model_view(
        history,
        collapse=p.collapse,
        shorten=p.context,
        settings=agent.context_settings,
        window=window,
        fixed=fixed_tokens(agent.system, _specs(agent)),
        outputs=outputs,
    )


def request_view(history: list[Message], agent: ViewSettings, model: Model, outputs: Path | None) -> list[Message]:
    """The messages of the next request: the history as the agent's profile and context settings show it
    (``outputs``: the session's saved tool outputs, which a cleared result points to)."""
    return _view(history, agent, window_of(model), outputs)

"""What the model sees of the history: the log keeps everything, the request may show less.

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

from drivetrain.messages import Message, ToolResultBlock


def _round_key(assistant: Message, user: Message) -> str | None:
    uses = assistant.tool_uses
    results = [b for b in user.content if isinstance(b, ToolResultBlock)]
    if not uses or len(results) != len(user.content) or len(results) != len(uses):
        return None  # not a plain round (text in it, or not answered one for one): never dropped
    return json.dumps([[u.name, u.input] for u in uses] + [[r.text, r.is_error] for r in results],
                      sort_keys=True, default=str)


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
    # No note on the copy that stays: a small model copied such a note into its next command. The grammar
    # already keeps it from sampling the same call again (``forbidden_calls``).
    return [msg for i, msg in enumerate(history) if i not in skip]


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return (f"{text[:half]}\n[... {len(text) - 2 * half} characters not shown: print less at a time "
            f"(head, tail, sed -n 'A,Bp', grep) ...]\n{text[-half:]}")


def shorten_outputs(history: list[Message], *, per_result: int = 3000, budget: int = 12000,
                    keep_rounds: int = 3, step: int = 4) -> list[Message]:
    """Clip each result to ``per_result`` characters; past ``budget`` characters of results, cut old rounds."""
    results = {i: [b for b in m.content if isinstance(b, ToolResultBlock)] for i, m in enumerate(history)
               if m.role == "user"}
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


def _shorten(block, per_result: int, stub: bool):
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


def model_view(history: list[Message], *, collapse: bool, shorten: bool) -> list[Message]:
    if collapse:
        history = collapse_repeats(history)
    if shorten:
        history = shorten_outputs(history)
    return history


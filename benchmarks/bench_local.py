"""Local model benchmarks: load time, prompt and generation speed, time to first token, KV-cache reuse.

For each model: load it, run a first turn with the built-in tools offered (cold: the whole
prompt is evaluated), answer its tool call and run the second turn (warm: only the new tokens
are evaluated), then time free-text generation with and without the tool-call grammar.
Prints figures; asserts nothing. Timings on a shared machine vary; run it more than once.

    python benchmarks/bench_local.py [--models small default] [--gen 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from drivetrain.messages import Message, ToolResultBlock, ToolUseBlock
from drivetrain.models.base import ModelRequest
from drivetrain.models.local import GenerationStats, LocalModel
from drivetrain.tools import builtin_tools, tool_spec

SYSTEM = "You are a coding agent working in a repository. Use the tools to read, search, edit files and run commands."
TASK = "Read app.py and tell me what it does."
APP = "import sys\n\n\ndef main():\n    print('hello')\n\n\nif __name__ == '__main__':\n    main()\n"
ESSAY = "Explain in a few paragraphs how a hash map works. Do not use any tools."


def row(label: str, s: GenerationStats) -> str:
    prompt_rate = s.prompt_eval_tokens / s.time_to_first_token_s if s.time_to_first_token_s else 0.0
    return (
        f"  {label:<26} prompt {s.prompt_tokens:>5} tok, evaluated {s.prompt_eval_tokens:>5} "
        f"({prompt_rate:6.1f} tok/s)  TTFT {s.time_to_first_token_s:6.2f} s  "
        f"output {s.output_tokens:>3} tok ({s.generation_tokens_per_s:5.1f} tok/s)"
    )


async def bench(choice: str, gen: int) -> None:
    model = LocalModel(choice, seed=0)
    started = time.perf_counter()
    model.load()
    print(f"{model.name}: loaded in {time.perf_counter() - started:.2f} s, {model.n_threads} threads")
    tools = [tool_spec(t) for t in builtin_tools()]

    history = [Message.user(TASK)]
    first = await model.respond(ModelRequest(history, system=SYSTEM, tools=tools, max_tokens=128))
    print(row("turn 1 (cold)", model.last_stats), f"-> {first.stop_reason}")
    history.append(first.message)
    uses = first.message.tool_uses
    history.append(Message.user(*[ToolResultBlock(u.id, APP) for u in uses]) if uses else Message.user("Go on."))
    second = await model.respond(ModelRequest(history, system=SYSTEM, tools=tools, max_tokens=128))
    print(row("turn 2 (KV reused)", model.last_stats), f"-> {second.stop_reason}")

    for constrained in (False, True):
        model.constrained = constrained
        await model.respond(ModelRequest([Message.user(ESSAY)], system=SYSTEM, tools=tools, max_tokens=gen))
        print(row(f"free text, grammar {'on' if constrained else 'off'}", model.last_stats))


def history_of(model: LocalModel, tokens: int) -> list[Message]:
    """A coding-session history of about ``tokens`` tokens (system prompt included): reads of source files."""
    code = "".join(f"def helper_{i}(x):\n    return x * {i} + {i % 7}\n\n" for i in range(40))
    per_read = len(model._llm.tokenize(code.encode(), add_bos=False)) + 30  # + the call and the turn markers
    history, n, i = [Message.user(TASK)], 1750, 0  # the system prompt with the tools is ~1,750 tokens
    while n + per_read <= tokens:
        call = ToolUseBlock(f"toolu_h{i}", "Read", {"file_path": f"mod_{i}.py"})
        history += [Message.assistant(call), Message.user(ToolResultBlock(call.id, code))]
        n, i = n + per_read, i + 1
    return history


async def history_latency(choice: str, sizes: list[int]) -> None:
    """Turn latency on a long history, with the KV cache of the previous turn reused, and without."""
    model = LocalModel(choice, seed=0)
    model.load()
    tools = [tool_spec(t) for t in builtin_tools()]
    for size in sizes:
        history = history_of(model, size)
        await model.respond(ModelRequest(history, system=SYSTEM, tools=tools, max_tokens=1))  # the previous turn
        nxt = history + [
            Message.assistant(ToolUseBlock("toolu_next", "Read", {"file_path": "app.py"})),
            Message.user(ToolResultBlock("toolu_next", APP)),
        ]
        started = time.perf_counter()
        await model.respond(ModelRequest(nxt, system=SYSTEM, tools=tools, max_tokens=16))
        warm, warm_stats = time.perf_counter() - started, model.last_stats
        model._llm.reset()  # forget the cache: the whole prompt is evaluated again
        started = time.perf_counter()
        await model.respond(ModelRequest(nxt, system=SYSTEM, tools=tools, max_tokens=16))
        cold, cold_stats = time.perf_counter() - started, model.last_stats
        print(
            f"  history ~{cold_stats.prompt_tokens:>5} tok: turn with KV reuse {warm:6.2f} s "
            f"(evaluated {warm_stats.prompt_eval_tokens} tok), without {cold:6.2f} s "
            f"(evaluated {cold_stats.prompt_eval_tokens} tok): {cold / warm:5.1f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["small", "default"], help="small, default, or .gguf paths")
    parser.add_argument("--gen", type=int, default=64, help="tokens of free text to generate")
    parser.add_argument(
        "--history",
        nargs="*",
        type=int,
        default=[2000, 6000],
        help="history sizes (tokens) for the turn-latency comparison; none to skip",
    )
    args = parser.parse_args()
    import llama_cpp

    print(f"cores available: {len(os.sched_getaffinity(0))}")
    print(f"llama.cpp built for: {llama_cpp.llama_print_system_info().decode().strip()}")
    for choice in args.models:
        asyncio.run(bench(choice, args.gen))
        if args.history:
            asyncio.run(history_latency(choice, args.history))


if __name__ == "__main__":
    main()

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

from drivetrain.messages import Message, ToolResultBlock
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["small", "default"], help="small, default, or .gguf paths")
    parser.add_argument("--gen", type=int, default=64, help="tokens of free text to generate")
    args = parser.parse_args()
    print(f"cores available: {len(os.sched_getaffinity(0))}")
    for choice in args.models:
        asyncio.run(bench(choice, args.gen))


if __name__ == "__main__":
    main()

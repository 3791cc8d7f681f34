"""Loop benchmarks against the scripted server on 127.0.0.1. Prints figures; asserts nothing.

1. Per-turn harness overhead: an agent run of N tool turns, next to the raw
   ``anthropic`` SDK sending the very same request bodies, in one process.
2. Parallel tools: 8 Bash calls of `sleep 0.5` in one turn, against one call,
   and against the same 8 calls run one after another.

    python benchmarks/bench_loop.py [--turns 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import anthropic

from drivetrain import Agent, tool
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from drivetrain.tools import Bash
from drivetrain.tools.base import ToolContext


@tool
async def noop(n: int) -> str:
    """Does nothing (async: no thread hop, so the figure is the loop's own cost)."""
    return f"ok {n}"


def model_for(url: str) -> AnthropicModel:
    return AnthropicModel.from_env("claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "k"})


async def harness_run(turns: int) -> tuple[float, list[dict]]:
    steps = [respond([tool_call("noop", {"n": i})]) for i in range(turns - 1)] + [reply("done")]
    with ScriptedServer(steps) as server:
        agent = Agent(model=model_for(server.url), tools=[noop], system="bench")
        started = time.perf_counter()
        result = await agent.run("go")
        elapsed = time.perf_counter() - started
        assert result.num_turns == turns, result
        return elapsed, [r.body for r in server.requests]


async def raw_sdk_run(bodies: list[dict]) -> float:
    steps = [respond([tool_call("noop", {"n": i})]) for i in range(len(bodies) - 1)] + [reply("done")]
    with ScriptedServer(steps) as server:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0)
        started = time.perf_counter()
        for body in bodies:
            params = {k: v for k, v in body.items() if k != "stream"}
            async with client.messages.stream(**params) as stream:
                await stream.get_final_message()
        return time.perf_counter() - started


async def parallel_tools(n: int, seconds: float) -> dict[str, float]:
    ws = Path(tempfile.mkdtemp())
    bash = Bash()

    async def agent_with(calls: int) -> float:
        steps = [respond([tool_call("Bash", {"command": f"sleep {seconds}"}) for _ in range(calls)]), reply("done")]
        with ScriptedServer(steps) as server:
            agent = Agent(model=model_for(server.url), tools=[bash], cwd=ws)
            started = time.perf_counter()
            await agent.run("sleep")
            return time.perf_counter() - started

    async def one_after_another() -> float:
        started = time.perf_counter()
        for _ in range(n):
            await bash.call({"command": f"sleep {seconds}"}, ToolContext(cwd=ws))
        return time.perf_counter() - started

    single = await agent_with(1)
    concurrent = await agent_with(n)
    sequential = await one_after_another()
    return {"single": single, "concurrent": concurrent, "sequential": sequential}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    await harness_run(10)  # warm up imports and sockets
    harness, raw = [], []
    for _ in range(args.repeats):  # interleaved, so both see the same machine state
        h, bodies = await harness_run(args.turns)
        harness.append(h)
        raw.append(await raw_sdk_run(bodies))
    h_turn = statistics.median(harness) / args.turns * 1000
    r_turn = statistics.median(raw) / args.turns * 1000
    print(f"per-turn, {args.turns} turns x {args.repeats} runs (median):")
    print(f"  drivetrain loop : {h_turn:.2f} ms/turn")
    print(f"  raw anthropic SDK: {r_turn:.2f} ms/request")
    print(f"  ratio           : {h_turn / r_turn:.3f}  (overhead {100 * (h_turn / r_turn - 1):+.1f}%)")

    p = await parallel_tools(8, 0.5)
    print("8 Bash calls of `sleep 0.5` in one turn:")
    print(f"  one call, whole turn  : {p['single']:.2f} s")
    print(f"  8 calls, concurrent   : {p['concurrent']:.2f} s  ({p['concurrent'] / p['single']:.2f}x one call)")
    print(f"  8 calls, one by one   : {p['sequential']:.2f} s  ({p['sequential'] / p['single']:.2f}x one call)")


if __name__ == "__main__":
    asyncio.run(main())

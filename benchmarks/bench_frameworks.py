"""Harness time per turn next to other agent frameworks, in one run: the same scripted conversation (N turns,
one ``noop`` tool call each, then an answer) against the scripted server in its own process, as a real
endpoint is. Prints figures; asserts nothing.

    python benchmarks/bench_frameworks.py [--turns 100] [--repeats 5]

The other frameworks are not drivetrain's dependencies: run it in a virtualenv that has them besides
drivetrain's own (``pip install openai-agents pydantic-ai-slim[anthropic] langgraph langchain-anthropic``);
a framework that is not installed is skipped. Rows, each its own run of the same script:

- raw SDK: the ``anthropic`` SDK streaming in a hand-written loop (history kept, tool run, results sent).
- drivetrain: an ``Agent`` as bench_loop.py runs it (streaming, a permission Policy, the audit log).
- SDK tool runner: ``client.beta.messages.tool_runner`` with ``@beta_async_tool``.
- pydantic-ai: ``Agent(AnthropicModel)``.run, LangGraph: ``create_react_agent(ChatAnthropic)``.ainvoke.
- openai-agents speaks OpenAI's APIs: it runs against the scripted chat-completions server with
  ``OpenAIChatCompletionsModel``, and its ratio is to the raw ``openai`` SDK streaming the same loop there.

Runs are interleaved (round robin, each starting after a full garbage collection), so all see the same
machine; the ratio of each run to the raw run next to it is reported besides the medians. CPU is this
process's (the server's is not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anthropic
import openai

from drivetrain import Agent, tool
from drivetrain.control.permissions import Policy
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.sessions.audit import AuditLog
from drivetrain.sessions.file import FileStore
from drivetrain.testing import ScriptedOpenAIServer, ScriptedServer, reply, respond, tool_call

MODEL = "claude-sonnet-4-6"
NOOP_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
Runner = Callable[[str, int, Path], Awaitable[None]]


def _serve(turns: int, chat: bool, conn) -> None:
    steps = [respond([tool_call("noop", {"n": i})]) for i in range(turns - 1)] + [reply("done")]
    server_class = ScriptedOpenAIServer if chat else ScriptedServer
    with server_class(steps) as server:
        conn.send(server.url)
        conn.recv()
        conn.send((len(server.requests), list(server.violations), list(server.unexpected)))


@contextmanager
def server_process(turns: int, chat: bool) -> Iterator[str]:
    mp = multiprocessing.get_context("spawn")
    ours, theirs = mp.Pipe()
    proc = mp.Process(target=_serve, args=(turns, chat, theirs), daemon=True)
    proc.start()
    try:
        yield ours.recv()
    finally:
        ours.send("done")
        served, violations, unexpected = ours.recv()
        proc.join(10)
    if served != turns or violations or unexpected:
        raise SystemExit(f"a run did not follow the script: {served} requests, {violations} {unexpected}")


# ---------------------------------------------------------------- the runs


async def raw_anthropic(url: str, turns: int, ws: Path) -> None:
    client = anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0)
    tools = [{"name": "noop", "description": "Does nothing.", "input_schema": NOOP_SCHEMA}]
    messages: list[dict] = [{"role": "user", "content": "go"}]
    while True:
        async with client.messages.stream(
            model=MODEL, max_tokens=1024, system="bench", tools=tools, messages=messages
        ) as stream:
            message = await stream.get_final_message()
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            break
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c.id, "content": f"ok {c.input['n']}"}  # type: ignore[index]
                    for c in calls
                ],
            }
        )
    await client.close()


@tool
async def noop(n: int) -> str:
    """Does nothing."""
    return f"ok {n}"


async def drivetrain_run(url: str, turns: int, ws: Path) -> None:
    store = FileStore(ws / "dthome")
    audit = AuditLog(store, str(uuid.uuid4()))
    model = AnthropicModel.from_env(MODEL, {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "k"})
    policy = Policy.load(ws, allowed_tools=["noop"], interactive=False)
    agent = Agent(model=model, tools=[noop], system="bench", cwd=ws, policy=policy, observers=[audit.observe])
    result = await agent.start("go", session_id=audit.session_id).finish()
    store.close()
    assert result.num_turns == turns and result.subtype == "success", result


async def tool_runner(url: str, turns: int, ws: Path) -> None:
    from anthropic import beta_async_tool

    @beta_async_tool
    async def noop(n: int) -> str:
        """Does nothing."""
        return f"ok {n}"

    client = anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0)
    runner = client.beta.messages.tool_runner(
        model=MODEL,
        max_tokens=1024,
        system="bench",
        tools=[noop],
        messages=[{"role": "user", "content": "go"}],
        max_iterations=turns + 1,
        stream=True,
        thread=False,
    )
    async for stream in runner:
        await stream.get_final_message()
    await client.close()


async def pydantic_ai_run(url: str, turns: int, ws: Path) -> None:
    from pydantic_ai import Agent as PAgent
    from pydantic_ai.models.anthropic import AnthropicModel as PModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    client = anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0)
    agent = PAgent(PModel(MODEL, provider=AnthropicProvider(anthropic_client=client)), system_prompt="bench")

    @agent.tool_plain
    async def noop(n: int) -> str:
        """Does nothing."""
        return f"ok {n}"

    from pydantic_ai.usage import UsageLimits

    await agent.run("go", usage_limits=UsageLimits(request_limit=turns + 1))
    await client.close()


async def langgraph_run(url: str, turns: int, ws: Path) -> None:
    from langchain_anthropic import ChatAnthropic
    from langchain_core.tools import tool as lc_tool
    from langgraph.prebuilt import create_react_agent

    @lc_tool
    async def noop(n: int) -> str:
        """Does nothing."""
        return f"ok {n}"

    llm = ChatAnthropic(model=MODEL, base_url=url, api_key="k", max_retries=0, max_tokens=1024)
    agent = create_react_agent(llm, [noop], prompt="bench")
    await agent.ainvoke({"messages": [("user", "go")]}, {"recursion_limit": 2 * turns + 5})


async def raw_openai(url: str, turns: int, ws: Path) -> None:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
    tools = [
        {"type": "function", "function": {"name": "noop", "description": "Does nothing.", "parameters": NOOP_SCHEMA}}
    ]
    messages: list[dict] = [{"role": "system", "content": "bench"}, {"role": "user", "content": "go"}]
    while True:
        async with client.chat.completions.stream(model=MODEL, messages=messages, tools=tools) as stream:  # type: ignore[arg-type]
            completion = await stream.get_final_completion()
        message = completion.choices[0].message
        messages.append(message.model_dump(exclude_none=True))  # type: ignore[arg-type]
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            n = json.loads(call.function.arguments)["n"]  # type: ignore[union-attr]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": f"ok {n}"})
    await client.close()


async def openai_agents_run(url: str, turns: int, ws: Path) -> None:
    from agents import Agent as OAgent
    from agents import OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
    from agents import Runner as ORunner

    set_tracing_disabled(True)

    @function_tool
    async def noop(n: int) -> str:
        """Does nothing."""
        return f"ok {n}"

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
    agent = OAgent(
        name="bench", instructions="bench", tools=[noop], model=OpenAIChatCompletionsModel(MODEL, openai_client=client)
    )
    await ORunner.run(agent, "go", max_turns=turns + 1)
    await client.close()


# name, runner, needs (a module), chat API, baseline name
RUNS: list[tuple[str, Runner, str | None, bool, str]] = [
    ("raw anthropic SDK loop", raw_anthropic, None, False, "raw anthropic SDK loop"),
    ("drivetrain", drivetrain_run, None, False, "raw anthropic SDK loop"),
    ("anthropic SDK tool runner", tool_runner, None, False, "raw anthropic SDK loop"),
    ("pydantic-ai", pydantic_ai_run, "pydantic_ai", False, "raw anthropic SDK loop"),
    ("LangGraph", langgraph_run, "langgraph", False, "raw anthropic SDK loop"),
    ("raw openai SDK loop (chat)", raw_openai, None, True, "raw openai SDK loop (chat)"),
    ("openai-agents (chat)", openai_agents_run, "agents", True, "raw openai SDK loop (chat)"),
]


async def timed(run: Runner, chat: bool, turns: int, ws: Path) -> tuple[float, float]:
    with server_process(turns, chat) as url:
        gc.collect()
        started, cpu = time.perf_counter(), time.process_time()
        await run(url, turns, ws)
        return time.perf_counter() - started, time.process_time() - cpu


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # LangGraph's notice of a move
    ws = Path(tempfile.mkdtemp(prefix="drivetrain-bench-"))
    runs = [r for r in RUNS if r[2] is None or importlib.util.find_spec(r[2]) is not None]
    skipped = [r[0] for r in RUNS if r not in runs]
    for _, run, _, chat, _ in runs:  # warm up imports and sockets
        await timed(run, chat, 5, ws)
    times: dict[str, list[tuple[float, float]]] = {r[0]: [] for r in runs}
    for _ in range(args.repeats):
        for name, run, _, chat, _ in runs:
            times[name].append(await timed(run, chat, args.turns, ws))
    print(
        f"{args.turns} turns x {args.repeats} rounds, interleaved, scripted server in its own process "
        f"(python {sys.version.split()[0]}, anthropic {anthropic.__version__}, openai {openai.__version__})"
    )
    print(f"{'':28} {'wall ms/turn':>12} {'ratio':>6} {'pairs':>6} {'CPU ms/turn':>12} {'ratio':>6}")
    for name, _, _, _, base in runs:
        wall = statistics.median(t[0] for t in times[name]) / args.turns * 1000
        cpu = statistics.median(t[1] for t in times[name]) / args.turns * 1000
        b_wall = statistics.median(t[0] for t in times[base]) / args.turns * 1000
        b_cpu = statistics.median(t[1] for t in times[base]) / args.turns * 1000
        pairs = statistics.median(t[0] / b[0] for t, b in zip(times[name], times[base]))
        print(f"{name:28} {wall:12.2f} {wall / b_wall:6.2f} {pairs:6.2f} {cpu:12.2f} {cpu / b_cpu:6.2f}")
    if skipped:
        print(f"not installed, skipped: {', '.join(skipped)}")


if __name__ == "__main__":
    asyncio.run(main())

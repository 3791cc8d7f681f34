"""Context management benchmark: what a long tool session is billed for, with and without drivetrain's help.

A scripted session of ``--turns`` model requests (the last one the answer): every turn calls a tool whose
result is ``--result-kb`` kB. The scripted server counts tokens (a token is four bytes of a block's JSON,
see ``drivetrain.testing.cache``) and simulates the Messages API prompt cache. The same session is run

- by a naive loop: the raw ``anthropic`` SDK resending the whole history every turn, no cache_control;
- by drivetrain with context management off (no cache breakpoints, no clearing);
- by drivetrain with prompt caching only, with clearing only, and with both (the default).

Billed-equivalent input tokens = uncached + 1.25 x cache writes + 0.1 x cache reads (the 5-minute cache's
prices relative to plain input). Every request of every run is checked, by the server as it arrives, to
carry the last three rounds' tool results intact; the server also validates each request as the real API
would. ``changed prefix`` counts the requests whose history is not the previous request's plus new
messages: each of those rewrites the cache from the change on.

    python benchmarks/bench_context.py [--turns 100] [--result-kb 8] [--window 200000]

Target (issue 10): drivetrain at most 15% of the naive loop.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass

import anthropic

from drivetrain import Agent, tool
from drivetrain.loop.context import CONTEXT_OFF, ContextSettings
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.testing import ScriptedServer, reply, respond, tool_call

MODEL = "claude-sonnet-4-6"
KEEP = 3  # the last rounds whose results must reach the model intact
SYSTEM = (
    "You are a careful engineer working through a long investigation. Fetch each record in turn, "
    "compare it with what you saw before, and report what changed. " * 8
)


def record(n: int, size: int) -> str:
    """The tool's output for call ``n``: ``size`` bytes, different for every n, lines of hex like a log."""
    lines, k = [f"record {n}"], 0
    while sum(len(x) + 1 for x in lines) < size:
        lines.append(f"{k:05d} " + hashlib.sha256(f"{n}:{k}".encode()).hexdigest())
        k += 1
    return "\n".join(lines)[:size]


def make_fetch(size: int):
    @tool
    def fetch(n: int) -> str:
        """Fetch record n of the investigation."""
        return record(n, size)

    return fetch


def last_rounds_intact(body: dict, size: int) -> bool:
    """Do the last KEEP tool rounds in ``body`` carry their results unchanged?"""
    messages = body["messages"]
    calls = {
        b["id"]: b["input"]["n"]
        for m in messages
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "tool_use"
    }
    rounds = [
        m
        for m in messages
        if m["role"] == "user" and any(b.get("type") == "tool_result" for b in m["content"] if isinstance(b, dict))
    ]
    for m in rounds[-KEEP:]:
        for b in m["content"]:
            if b.get("type") == "tool_result":
                content = (
                    b["content"] if isinstance(b["content"], str) else "".join(x.get("text", "") for x in b["content"])
                )
                if content != record(calls[b["tool_use_id"]], size):
                    raise AssertionError(f"a result of the last {KEEP} rounds was changed: {b['tool_use_id']}")
    return True


def script(turns: int, size: int) -> list:
    check = lambda body: last_rounds_intact(body, size)
    return [respond([tool_call("fetch", {"n": i})], expect=check) for i in range(turns - 1)] + [
        reply("All records compared.", expect=check)
    ]


@dataclass
class Figures:
    name: str
    requests: int = 0
    uncached: int = 0
    writes: int = 0
    reads: int = 0
    largest: int = 0  # the largest request, in tokens
    changed: int = 0  # requests whose history prefix differs from the previous request's

    @property
    def billed(self) -> float:
        return self.uncached + 1.25 * self.writes + 0.1 * self.reads


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def figures(name: str, server: ScriptedServer) -> Figures:
    f = Figures(name)
    previous = None
    for req in server.requests:
        body = req.body
        messages = _strip(body["messages"])
        if previous is not None and messages[: len(previous)] != previous:
            f.changed += 1
        previous = messages
    f.requests = len(server.requests)
    for u in server.usages:
        f.uncached += u["input_tokens"]
        f.writes += u["cache_creation_input_tokens"]
        f.reads += u["cache_read_input_tokens"]
        f.largest = max(f.largest, u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"])
    return f


class RecordingServer(ScriptedServer):
    """The scripted server, keeping the usage it billed each request for."""

    def __init__(self, steps):
        super().__init__(steps)
        self.usages: list[dict] = []

    def _reply(self, step, body, n):
        answer = super()._reply(step, body, n)
        usage = answer.body["usage"] if hasattr(answer, "body") else _usage_of(answer)
        self.usages.append(usage)
        return answer


def _usage_of(stream) -> dict:
    for chunk in stream.chunks:
        if b"message_delta" in chunk:
            return json.loads(chunk.split(b"data: ", 1)[1])["usage"]
    raise AssertionError("no message_delta in the stream")


async def naive(turns: int, size: int) -> Figures:
    """The raw SDK resending everything, no cache_control."""
    fetch = make_fetch(size)
    with RecordingServer(script(turns, size)) as server:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0)
        messages: list[dict] = [{"role": "user", "content": "Go through the records."}]
        tools = [{"name": "fetch", "description": fetch.description, "input_schema": fetch.input_schema}]
        while True:
            msg = await client.messages.create(
                model=MODEL, max_tokens=8192, system=SYSTEM, tools=tools, messages=messages
            )
            messages.append({"role": "assistant", "content": [b.to_dict() for b in msg.content]})
            if msg.stop_reason != "tool_use":
                break
            results = [
                {"type": "tool_result", "tool_use_id": b.id, "content": record(b.input["n"], size)}
                for b in msg.content
                if b.type == "tool_use"
            ]
            messages.append({"role": "user", "content": results})
        await client.close()
    return figures("naive loop (raw SDK, resends all)", server)


async def drivetrain(
    name: str, turns: int, size: int, caching: bool, settings: ContextSettings, window: int
) -> Figures:
    with RecordingServer(script(turns, size)) as server:
        model = AnthropicModel.from_env(
            MODEL,
            {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"},
            prompt_caching=caching,
            context_window=window,
        )
        agent = Agent(model=model, tools=[make_fetch(size)], system=SYSTEM, context_settings=settings)
        result = await agent.run("Go through the records.")
        assert result.subtype == "success", result
    return figures(name, server)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--result-kb", type=float, default=8)
    ap.add_argument("--window", type=int, default=200_000, help="the model's context window, in tokens")
    args = ap.parse_args()
    os.environ["DRIVETRAIN_HOME"] = tempfile.mkdtemp(prefix="drivetrain-bench-")  # saved outputs go here
    size = int(args.result_kb * 1024)
    on = ContextSettings()
    runs = [await naive(args.turns, size)]
    for name, caching, settings in (
        ("drivetrain, context management off", False, CONTEXT_OFF),
        ("drivetrain, prompt caching only", True, CONTEXT_OFF),
        ("drivetrain, clearing only", False, on),
        ("drivetrain, on (default)", True, on),
    ):
        runs.append(await drivetrain(name, args.turns, size, caching, settings, args.window))
    base = runs[0].billed
    print(
        f"{args.turns} requests, {args.result_kb:g} kB tool results, window {args.window} tokens; clearing at "
        f"{on.clear_at:.0%} down to {on.clear_to:.0%}, last {on.keep_rounds} rounds kept; tokens = 4 bytes of JSON"
    )
    print(f"every request checked by the server: valid, and the last {KEEP} rounds' results intact")
    head = (
        f"{'':38} {'uncached':>10} {'cache wr':>10} {'cache rd':>10} {'billed eq.':>11} {'% naive':>8} "
        f"{'largest':>8} {'changed':>8}"
    )
    print(head)
    for f in runs:
        print(
            f"{f.name:38} {f.uncached:>10,} {f.writes:>10,} {f.reads:>10,} {f.billed:>11,.0f} "
            f"{100 * f.billed / base:>7.1f}% {f.largest:>8,} {f.changed:>8}"
        )
    best = runs[-1]
    verdict = "met" if best.billed <= 0.15 * base else "NOT met"
    print(f"target (drivetrain on <= 15% of the naive loop): {verdict} ({100 * best.billed / base:.1f}%)")


if __name__ == "__main__":
    asyncio.run(main())

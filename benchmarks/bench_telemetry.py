"""The cost of telemetry per turn. Prints figures; asserts nothing.

1. The harness's own cost: a run of N tool turns against a model in this process that answers at once, with
   telemetry off, on (traces, metrics and events exported over OTLP http/protobuf to a receiver in another
   process) and on with a collector that refuses connections. Per turn: wall and CPU (this process, every thread:
   the exporters' background threads count).
2. The same three against the scripted server in its own process (``bench_loop.server_process``), as a real
   endpoint is, each answer after ``--model-ms`` (default 0: the most telemetry can weigh).

    python benchmarks/bench_telemetry.py [--turns 200] [--repeats 5] [--model-ms 0]

Off is the default: no provider is set, so a run has no ``RunTelemetry`` and wraps nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

from bench_loop import model_for, noop
from drivetrain import Agent
from drivetrain.messages import TextBlock, ToolUseBlock, Usage
from drivetrain.models.base import ModelRequest, ModelResponse
from drivetrain.telemetry.export import Installed
from drivetrain.telemetry.run import Telemetry
from drivetrain.telemetry.settings import TelemetrySettings
from drivetrain.telemetry.setup import install
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from drivetrain.testing.otlp import OtlpReceiver

Measure = Callable[[int, Telemetry | None], Awaitable[tuple[float, float]]]
USAGE = {"input_tokens": 900, "output_tokens": 40, "cache_read_input_tokens": 5000, "cache_creation_input_tokens": 60}


# ---------------------------------------------------------------- the receiver and the model server, each a process


def _receive(conn) -> None:
    with OtlpReceiver() as receiver:
        conn.send(receiver.url)
        conn.recv()
        conn.send(len(receiver.spans()))


def _serve(turns: int, delay: float, conn) -> None:
    steps = [respond([tool_call("noop", {"n": i})], usage=USAGE, delay=delay) for i in range(turns - 1)]
    with ScriptedServer([*steps, reply("done", usage=USAGE, delay=delay)]) as server:
        conn.send(server.url)
        conn.recv()
        conn.send(None)


@contextmanager
def process(target: Callable[..., None], *args: object) -> Iterator[tuple[str, dict]]:
    """``target`` in a child process: yields the URL it sends, and a dict that gets what it sends at exit."""
    mp = multiprocessing.get_context("spawn")
    ours, theirs = mp.Pipe()
    proc = mp.Process(target=target, args=(*args, theirs), daemon=True)
    proc.start()
    out: dict = {}
    try:
        yield ours.recv(), out
    finally:
        ours.send("done")
        out["sent"] = ours.recv()
        proc.join(10)


def telemetry_to(url: str, signals: tuple[str, ...] = ("TRACES", "METRICS", "LOGS")) -> tuple[Installed, Telemetry]:
    settings = TelemetrySettings.from_env(
        {
            "DRIVETRAIN_ENABLE_TELEMETRY": "1",
            **{f"OTEL_{signal}_EXPORTER": "otlp" for signal in signals},
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": url,
            "OTEL_METRIC_EXPORT_INTERVAL": "1000",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "1000",
        }
    )
    installed = install(settings)
    return installed, Telemetry(installed.tracer_provider, installed.meter_provider, installed.logger_provider)


# ---------------------------------------------------------------- the two kinds of run


class Instant:
    """A model that answers at once: one noop call a turn, then the answer."""

    name = "claude-sonnet-4-6"
    context_window = 200_000

    def __init__(self, turns: int):
        self.left = turns

    async def respond(self, request: ModelRequest) -> ModelResponse:
        self.left -= 1
        usage = Usage(**USAGE)
        if self.left <= 0:
            return ModelResponse((TextBlock("done"),), "end_turn", usage, self.name, "msg")
        return ModelResponse((ToolUseBlock(f"toolu_{self.left}", "noop", {"n": self.left}),), "tool_use", usage)


async def timed(agent: Agent, turns: int) -> tuple[float, float]:
    gc.collect()
    started, cpu = time.perf_counter(), time.process_time()
    result = await agent.run("go")
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert result.num_turns == turns and result.subtype == "success", result
    return elapsed / turns, cpu / turns


async def in_process(turns: int, telemetry: Telemetry | None) -> tuple[float, float]:
    return await timed(Agent(model=Instant(turns), tools=[noop], system="bench", telemetry=telemetry), turns)


def over_http(delay: float) -> Measure:
    async def measure(turns: int, telemetry: Telemetry | None) -> tuple[float, float]:
        with process(_serve, turns, delay) as (url, _):
            return await timed(Agent(model=model_for(url), tools=[noop], system="bench", telemetry=telemetry), turns)

    return measure


async def compare(title: str, measure: Measure, turns: int, repeats: int, ways: dict[str, Telemetry | None]) -> None:
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for telemetry in ways.values():
        await measure(5, telemetry)  # imports, the first client's SSL context, the first batches
    for _ in range(repeats):  # interleaved, so the machine's load falls on each alike
        for name, telemetry in ways.items():
            times[name].append(await measure(turns, telemetry))
    off = [statistics.median(t[i] for t in times["off"]) for i in (0, 1)]
    print(f"{title}: {turns} turns a run, {repeats} runs each, median per turn")
    for name, values in times.items():
        wall, cpu = (statistics.median(t[i] for t in values) for i in (0, 1))
        print(
            f"  {name:34} wall {wall * 1000:7.3f} ms ({(wall / off[0] - 1) * 100:+6.1f}%)"
            f"   CPU {cpu * 1000:7.3f} ms ({(cpu - off[1]) * 1e6:+5.0f} µs)"
        )


async def main(turns: int, repeats: int, model_ms: float) -> None:
    with process(_receive) as (url, received):
        traced, traces = telemetry_to(url, ("TRACES",))
        everything, all_signals = telemetry_to(url)
        down, off_line = telemetry_to("http://127.0.0.1:9")  # the discard port: connections refused
        ways = {
            "off": None,
            "traces": traces,
            "traces, metrics, events": all_signals,
            "traces, metrics, events; no collector": off_line,
        }
        await compare("1. the harness's own cost (a model in this process)", in_process, turns, repeats, ways)
        await compare(
            f"2. against the scripted server in its own process, answers after {model_ms:g} ms",
            over_http(model_ms / 1000),
            max(turns // 4, 10),
            repeats,
            ways,
        )
        for installed in (traced, everything):
            installed.shutdown(5_000)
        down.shutdown(1_000)
    print(f"spans received: {received['sent']}; not delivered with no collector: {down.dropped.counts}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model-ms", type=float, default=0.0)
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.repeats, args.model_ms))

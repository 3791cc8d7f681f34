"""Loop benchmarks against the scripted server, run in its own process on 127.0.0.1. Prints figures; asserts nothing.

1. Per-turn harness overhead: an agent run of N tool turns with the defaults a user gets (streaming,
   a permission Policy deciding every call, the audit log writing every call), next to the raw
   ``anthropic`` SDK streaming the very same request bodies. The server is a separate process, as a
   real endpoint is: in ours it would share the interpreter (and the GIL) and dilute the ratio.
2. Parallel tools: 8 Bash calls of `sleep 0.5` in one turn, against one call,
   and against the same 8 calls run one after another.

    python benchmarks/bench_loop.py [--turns 200] [--repeats 7] [--profile out.prof] [--skip-parallel]

Besides the ratio it prints drivetrain's own work per turn: the time spent outside the model call,
which is what the harness adds (the model call is the same SDK call on both sides).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import multiprocessing
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anthropic

from drivetrain import Agent, tool
from drivetrain.control.permissions import Policy
from drivetrain.host.procs import child_env, watch_group
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.sessions.audit import AuditLog
from drivetrain.sessions.file import FileStore
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from drivetrain.tools import Bash
from drivetrain.tools.base import ToolContext


@tool
async def noop(n: int) -> str:
    """Does nothing (async: no thread hop, so the figure is the loop's own cost)."""
    return f"ok {n}"


# ---------------------------------------------------------------- the server, in its own process


def _steps(spec: tuple) -> list:
    kind, *args = spec
    if kind == "noop":  # (turns,): one noop call per turn, then an answer
        return [respond([tool_call("noop", {"n": i})]) for i in range(args[0] - 1)] + [reply("done")]
    calls, seconds = args  # ("bash", calls, seconds): that many `sleep` calls in one turn
    return [respond([tool_call("Bash", {"command": f"sleep {seconds}"}) for _ in range(calls)]), reply("done")]


def _serve(spec: tuple, conn) -> None:
    with ScriptedServer(_steps(spec)) as server:
        conn.send(server.url)
        conn.recv()  # until the client is done
        conn.send([r.body for r in server.requests])


@contextmanager
def server_process(spec: tuple) -> Iterator[tuple[str, dict]]:
    """A ScriptedServer in a child process: yields its URL and a dict that gets the request bodies at exit."""
    mp = multiprocessing.get_context("spawn")
    ours, theirs = mp.Pipe()
    proc = mp.Process(target=_serve, args=(spec, theirs), daemon=True)
    proc.start()
    out: dict = {}
    try:
        yield ours.recv(), out
    finally:
        try:
            ours.send("done")
            out["bodies"] = ours.recv()
        except (EOFError, OSError):  # the server died: its traceback is on stderr
            out["bodies"] = None
        proc.join(10)


def model_for(url: str) -> AnthropicModel:
    return AnthropicModel.from_env("claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "k"})


# ---------------------------------------------------------------- 1. per-turn overhead


async def harness_run(
    turns: int, ws: Path, profile: cProfile.Profile | None = None, session_log: bool = False
) -> tuple[tuple, list[dict]]:
    """drivetrain with a Policy (default mode, an allow rule for the tool) and the audit log; with ``session_log``,
    as the CLI builds it: the run saved to the same store after every step (fsync'd once a turn).

    Returns ((wall, CPU, wall outside the model call, CPU outside it) in seconds, the request bodies)."""
    with server_process(("noop", turns)) as (url, out):
        policy = Policy.load(ws, allowed_tools=["noop"], interactive=False)
        store = FileStore(ws / "dthome")
        audit = AuditLog(store, str(uuid.uuid4()))
        model = model_for(url)
        in_model = [0.0, 0.0]
        model_respond = model.respond

        async def timed_respond(request):  # the SDK's share is the same on both sides: count the rest
            started, cpu = time.perf_counter(), time.process_time()
            try:
                return await model_respond(request)
            finally:
                in_model[0] += time.perf_counter() - started
                in_model[1] += time.process_time() - cpu

        model.respond = timed_respond
        agent = Agent(
            model=model,
            tools=[noop],
            system="bench",
            cwd=ws,
            policy=policy,
            observers=[audit.observe],
            store=store if session_log else None,
        )
        gc.collect()  # each timed run starts with no one else's garbage
        started, cpu = time.perf_counter(), time.process_time()
        if profile is not None:
            profile.enable()
        result = await agent.start("go", session_id=audit.session_id).finish()
        if profile is not None:
            profile.disable()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        store.close()
    assert result.num_turns == turns and result.subtype == "success", result
    return (wall, cpu, wall - in_model[0], cpu - in_model[1]), one_history(out["bodies"])


def one_history(bodies: list[dict]) -> list[dict]:
    """The bodies with equal messages made one object, as a client that keeps one history holds them.

    Received from the server, each body is a copy of the whole history so far: 200 of them are ~250,000
    objects, and every full garbage collection in the timed runs (~0.4 s each) would walk them all."""
    seen: dict[str, dict] = {}
    for body in bodies:
        body["messages"] = [seen.setdefault(json.dumps(m, sort_keys=True), m) for m in body["messages"]]
    return bodies


async def raw_sdk_run(bodies: list[dict]) -> tuple[float, float]:
    """(wall, CPU) seconds to stream ``bodies`` with the raw SDK; the server's CPU is not ours to count.

    Making the client is counted, as drivetrain's run makes its own (~25 ms: an SSL context)."""
    with server_process(("noop", len(bodies))) as (url, _):
        gc.collect()
        started, cpu = time.perf_counter(), time.process_time()
        client = anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0)
        for body in bodies:
            params = {k: v for k, v in body.items() if k != "stream"}
            async with client.messages.stream(**params) as stream:
                await stream.get_final_message()
        elapsed = time.perf_counter() - started, time.process_time() - cpu
        await client.close()
    return elapsed


# ---------------------------------------------------------------- 2. parallel tools


async def parallel_tools(n: int, seconds: float, ws: Path) -> dict[str, float]:
    bash = Bash()

    async def agent_with(calls: int) -> float:
        with server_process(("bash", calls, seconds)) as (url, _):
            agent = Agent(model=model_for(url), tools=[bash], cwd=ws)
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


async def bash_costs(ws: Path, n: int = 100) -> dict[str, float]:
    """What each Bash call pays for dying with drivetrain and for a scrubbed environment, next to the call."""
    bash = Bash()
    await bash.call({"command": "true"}, ToolContext(cwd=ws))  # starts the watchdog, once
    started = time.perf_counter()
    for _ in range(n):
        await bash.call({"command": "true"}, ToolContext(cwd=ws))
    call = (time.perf_counter() - started) / n
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a group of its own to register
    started = time.perf_counter()
    for _ in range(n):
        watch_group(victim.pid)
    watch = (time.perf_counter() - started) / n
    victim.kill()
    victim.wait()
    started = time.perf_counter()
    for _ in range(n):
        child_env()
    env = (time.perf_counter() - started) / n
    return {"call": call, "watch": watch, "env": env}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--profile", metavar="FILE", help="cProfile drivetrain's runs into FILE (pstats format)")
    ap.add_argument("--skip-parallel", action="store_true")
    ap.add_argument(
        "--session-log",
        action="store_true",
        help="save the run to the session store after every step, as the CLI does (an fsync a turn)",
    )
    args = ap.parse_args()
    ws = Path(tempfile.mkdtemp(prefix="drivetrain-bench-"))
    profile = cProfile.Profile() if args.profile else None

    await harness_run(10, ws)  # warm up imports and sockets
    await raw_sdk_run((await harness_run(10, ws))[1])
    harness, raw = [], []
    for _ in range(args.repeats):  # interleaved, so both see the same machine state
        h, bodies = await harness_run(args.turns, ws, profile, args.session_log)
        harness.append(h)
        raw.append(await raw_sdk_run(bodies))
        del bodies  # not held through the next run's garbage collections
    saved = " and the session log" if args.session_log else ""
    print(
        f"per-turn, {args.turns} turns x {args.repeats} runs, interleaved, server in its own process; drivetrain "
        f"with streaming, a Policy, the audit log{saved} vs the raw anthropic SDK streaming the same bodies:"
    )
    for i, what in enumerate(("wall", "CPU")):
        for name, pick in (("median", statistics.median), ("best", min)):
            h_turn = pick(x[i] for x in harness) / args.turns * 1000
            r_turn = pick(x[i] for x in raw) / args.turns * 1000
            print(
                f"  {what:4} {name:6}: drivetrain {h_turn:6.2f} ms/turn, raw SDK {r_turn:6.2f} ms/request: "
                f"ratio {h_turn / r_turn:.3f} ({100 * (h_turn / r_turn - 1):+.1f}%)"
            )
    pairs = sorted(h[0] / r[0] for h, r in zip(harness, raw))  # each pair ran back to back, on one machine state
    print(f"  wall, each pair's ratio: median {statistics.median(pairs):.3f}, from {pairs[0]:.3f} to {pairs[-1]:.3f}")
    own = [statistics.median(x[i] for x in harness) / args.turns * 1000 for i in (2, 3)]
    print(f"  drivetrain's own work per turn (outside the model call): {own[0]:.2f} ms wall, {own[1]:.2f} ms CPU")
    if profile is not None:
        profile.dump_stats(args.profile)
        print(f"  profile of drivetrain's runs: {args.profile}")
    if args.skip_parallel:
        return

    c = await bash_costs(ws)
    print(
        f"Bash `true`: {c['call'] * 1000:.2f} ms a call, of which handing its process group to the watchdog "
        f"{c['watch'] * 1e6:.1f} µs and building its environment without credentials {c['env'] * 1e6:.1f} µs"
    )
    p = await parallel_tools(8, 0.5, ws)
    print("8 Bash calls of `sleep 0.5` in one turn:")
    print(f"  one call, whole turn  : {p['single']:.2f} s")
    print(f"  8 calls, concurrent   : {p['concurrent']:.2f} s  ({p['concurrent'] / p['single']:.2f}x one call)")
    print(f"  8 calls, one by one   : {p['sequential']:.2f} s  ({p['sequential'] / p['single']:.2f}x one call)")


if __name__ == "__main__":
    asyncio.run(main())

"""The same multi-file task as a free loop and as a pre-scheduled DAG, against the scripted server. Prints figures.

The task: inspect three modules (each inspection a tool call that takes ``--work`` seconds, standing in for
reading and running things), then write a report from what was found. The model's side is scripted, so both
modes make the same decisions; what differs is how the harness schedules them:

- free loop, one call a turn: the way a small model walks it (inspect a, b, c, write, answer);
- free loop, parallel calls: the best a model can do in one loop (three inspections in one turn, write, answer);
- DAG (``apply_plan``): steps a, b, c independent and run concurrently as their own loops, d after them, each
  step seeded with its dependencies' answers.

Tokens are what the scripted server reports (its estimate, the same counting on every side): input, cache and
output tokens summed over the run's requests. Turns are model requests.

    python benchmarks/bench_plan.py [--work 0.5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from drivetrain import Agent, tool
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.plans.plan import Plan, step_agent
from drivetrain.plans.scheduler import apply_plan
from drivetrain.testing import ScriptedServer, reply, respond, tool_call

MODULES = ("billing", "shipping", "catalog")
WORK_S = 0.5


@tool
async def inspect(module: str) -> str:
    """Inspect a module: its functions, its tests, what fails."""
    await asyncio.sleep(WORK_S)
    return f"{module}: 12 functions, 30 tests, 1 failing ({module}_total rounds down). " + "detail " * 200


@tool
def write_report(text: str) -> str:
    """Write the report."""
    return f"wrote {len(text)} characters"


def model(server: ScriptedServer) -> AnthropicModel:
    return AnthropicModel.from_env(
        "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, backoff=0.01
    )


def report_text() -> str:
    return "\n".join(f"{m}: 1 failing test ({m}_total rounds down)" for m in MODULES)


def total_tokens(u) -> int:
    return u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens + u.output_tokens


async def free_loop(parallel: bool, cwd: Path) -> tuple[int, int, float]:
    if parallel:
        steps = [respond([tool_call("inspect", {"module": m}) for m in MODULES])]
    else:
        steps = [respond([tool_call("inspect", {"module": m})]) for m in MODULES]
    steps += [respond([tool_call("write_report", {"text": report_text()})]), reply("Report written.")]
    with ScriptedServer(steps) as server:
        agent = Agent(model=model(server), tools=[inspect, write_report], cwd=cwd, strict=True)
        started = time.monotonic()
        result = await agent.run("Inspect billing, shipping and catalog, then write a report of what fails.")
        wall = time.monotonic() - started
        assert result.subtype == "success", result
        return result.num_turns, total_tokens(result.usage), wall


async def dag(cwd: Path) -> tuple[int, int, float]:
    plan = Plan.from_json(
        {
            "task": "Inspect three modules, then write a report of what fails.",
            "steps": [
                *(
                    {"id": m, "goal": f"Inspect {m}.", "depends_on": [], "tools": ["inspect"], "max_turns": 3}
                    for m in MODULES
                ),
                {
                    "id": "report",
                    "goal": "Write the report.",
                    "depends_on": list(MODULES),
                    "tools": ["write_report"],
                    "max_turns": 3,
                },
            ],
        }
    )
    scripts = {
        m: [respond([tool_call("inspect", {"module": m})]), reply(f"{m}: 1 failing ({m}_total)")] for m in MODULES
    }
    scripts["report"] = [respond([tool_call("write_report", {"text": report_text()})]), reply("Report written.")]
    with ExitStack() as stack:
        servers = {i: stack.enter_context(ScriptedServer(s)) for i, s in scripts.items()}

        def make_agent(step):
            return step_agent(
                Agent(model=model(servers[step.id]), tools=[inspect, write_report], cwd=cwd, strict=True), step
            )

        started = time.monotonic()
        result = await apply_plan(plan, make_agent, state_path=cwd / "state.json", concurrency=3)
        wall = time.monotonic() - started
        assert result.subtype == "success", result.result
        turns = sum(len(s.requests) for s in servers.values())
        return turns, total_tokens(result.usage), wall


def main() -> int:
    global WORK_S
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=float, default=WORK_S, help="seconds each inspection takes (0.5)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    WORK_S = args.work
    rows: dict[str, list] = {
        "free loop, one call a turn": [],
        "free loop, parallel calls": [],
        "DAG (apply_plan, concurrency 3)": [],
    }

    async def all_runs() -> None:  # one event loop for all: the SDK clients close with it
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as d:
                rows["free loop, one call a turn"].append(await free_loop(False, Path(d)))
                rows["free loop, parallel calls"].append(await free_loop(True, Path(d)))
                rows["DAG (apply_plan, concurrency 3)"].append(await dag(Path(d)))

    asyncio.run(all_runs())
    print(f"three inspections of {WORK_S:g} s each, then a report; {args.repeats} runs each, median wall")
    print(f"{'':34}{'turns':>7}{'tokens':>9}{'wall s':>9}")
    for name, runs in rows.items():
        turns, toks, _ = runs[0]
        print(f"{name:34}{turns:>7}{toks:>9,}{statistics.median(r[2] for r in runs):>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

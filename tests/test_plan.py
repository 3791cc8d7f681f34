"""Structured graph mode: plans asked of the model, validated, run as a DAG of agent loops, checkpointed, resumed.

The model side is the scripted server (the real anthropic SDK over HTTP). Library tests give each step a
server of its own (``make_agent`` points the step's model at it), so concurrent steps keep their scripts
apart; the CLI tests run ``python -m drivetrain plan/run`` as subprocesses against one server.
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

import cli_process
import drivetrain
from drivetrain import Agent, tool
from drivetrain.loop.budget import Budget
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.plans.plan import Plan, PlanError, Step, make_plan, parse_plan, step_agent
from drivetrain.plans.scheduler import apply_plan
from drivetrain.testing import ScriptedServer, reply, respond, tool_call

SRC = str(Path(drivetrain.__file__).parents[1])
spans: list[tuple[str, float, float]] = []


@tool
async def pause(label: str, seconds: float) -> str:
    """Wait a while, recording when."""
    start = time.monotonic()
    await asyncio.sleep(seconds)
    spans.append((label, start, time.monotonic()))
    return f"paused {label}"


@tool
def note(text: str) -> str:
    """Write a note down."""
    return f"noted {text}"


@pytest.fixture(autouse=True)
def _reset():
    spans.clear()


def model_for(server):
    return AnthropicModel.from_env(
        "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, backoff=0.01
    )


def agents_for(servers, cwd, tools=(pause, note)):
    """make_agent: each step talks to its own scripted server, with only its own tools and turn limit."""

    def make_agent(step):
        base = Agent(model=model_for(servers[step.id]), tools=list(tools), cwd=cwd, strict=True)
        return step_agent(base, step)

    return make_agent


def first_text(body):
    first = body["messages"][0]["content"]
    return "\n".join(b["text"] for b in first if b.get("type") == "text")


def fenced(plan: dict) -> str:
    return "Here is the plan.\n```json\n" + json.dumps(plan) + "\n```"


DIAMOND = {
    "steps": [
        {"id": "a", "goal": "List the modules.", "depends_on": [], "tools": ["note"], "max_turns": 3},
        {"id": "b", "goal": "Summarise the tests.", "depends_on": [], "tools": ["pause"], "max_turns": 3},
        {"id": "c", "goal": "Write the report.", "depends_on": ["a", "b"], "tools": ["note"], "max_turns": 3},
    ]
}


# ---------------------------------------------------------------- the plan as data


def test_validate_names_cycles_unknown_steps_tools_and_budgets():
    plan = Plan.from_json(
        {
            "steps": [
                {"id": "a", "goal": "x", "depends_on": ["c"], "max_turns": 10, "tools": ["Read"]},
                {"id": "b", "goal": "y", "depends_on": ["a"], "tools": ["Telepathy"], "max_turns": 10},
                {"id": "c", "goal": "z", "depends_on": ["b", "nope"], "max_turns": 10},
            ]
        }
    )
    problems = plan.validate(["Read", "Bash"], Budget(tokens=1000), max_turns=20)
    text = "\n".join(problems)
    assert "cycle: a -> b -> c -> a" in text
    assert "step c depends on unknown step 'nope'" in text
    assert "step b uses unknown tool(s) Telepathy" in text
    assert "max_turns add up to 30, over the run's limit of 20" in text
    assert "every step needs a max_tokens" in text
    good = Plan.from_json(DIAMOND)
    assert good.validate(["note", "pause"], max_turns=9) == []
    assert [s.id for s in good.ready([])] == ["a", "b"] and [s.id for s in good.ready(["a", "b"])] == ["c"]


def test_the_file_format_round_trips_and_is_versioned():
    plan = Plan.from_json({**DIAMOND, "task": "t", "budget": {"max_turns": 9}})
    data = plan.to_json()
    assert data["version"] == 1 and data["budget"] == {"max_turns": 9}
    assert Plan.from_json(json.dumps(data)) == plan
    with pytest.raises(PlanError, match="version 2"):
        Plan.from_json({**data, "version": 2})
    with pytest.raises(PlanError, match="unknown field"):
        Plan.from_json({"steps": [{"id": "a", "goal": "x", "dependencies": []}]})
    assert parse_plan(fenced(DIAMOND), "t").task == "t"


def test_mermaid_colours_statuses_and_shows_timings():
    plan = Plan.from_json(DIAMOND)
    text = plan.mermaid({"a": "done", "b": "failed", "c": "skipped"}, {"a": 1.25, "b": 0.5, "c": None})
    assert text.startswith("flowchart TD") and "s0 --> s2" in text and "s1 --> s2" in text
    assert "done · 1.2s" in text and "failed · 0.5s" in text
    assert "classDef failed" in text and "class s1 failed" in text and "class s2 skipped" in text


# ---------------------------------------------------------------- asking the model for a plan


async def test_the_plan_request_has_no_tools_and_a_bad_plan_is_asked_again_with_its_problems(tmp_path):
    bad = {
        "steps": [
            {"id": "a", "goal": "x", "depends_on": ["b"], "tools": ["note"]},
            {"id": "b", "goal": "y", "depends_on": ["a"], "tools": ["Telepathy"]},
        ]
    }

    def no_tools(body):
        assert "tools" not in body and "tool_choice" not in body
        assert "note" in first_text(body) and "pause" in first_text(body)  # the tools the steps may use

    def told_the_problems(body):
        assert "tools" not in body
        last = body["messages"][-1]["content"][-1]["text"]
        assert "cycle: a -> b -> a" in last or "cycle: b -> a -> b" in last
        assert "unknown tool(s) Telepathy" in last

    steps = [reply(fenced(bad), expect=no_tools), reply(fenced(DIAMOND), expect=told_the_problems)]
    with ScriptedServer(steps) as server:
        plan = await make_plan(Agent(model=model_for(server), tools=[pause, note], cwd=tmp_path), "write a report")
    assert plan.ids == ["a", "b", "c"] and plan.task == "write a report"


async def test_a_plan_still_wrong_after_the_second_ask_fails_clearly(tmp_path):
    bad = {"steps": [{"id": "a", "goal": "x", "tools": ["Telepathy"]}]}
    with ScriptedServer([reply(fenced(bad)), reply("I cannot plan this.")]) as server:
        with pytest.raises(PlanError, match="(?s)rejected twice.*no JSON object"):
            await make_plan(Agent(model=model_for(server), tools=[note], cwd=tmp_path), "t")


# ---------------------------------------------------------------- running a plan


async def test_independent_steps_run_concurrently_and_dependants_get_their_results(tmp_path):
    def sees_both(body):
        text = first_text(body)
        assert text.startswith("Write the report.")  # the goal, verbatim, first
        assert "Result of step a" in text and "modules: x, y" in text
        assert "Result of step b" in text and "tests: 12 pass" in text

    with ExitStack() as stack:
        servers = {
            i: stack.enter_context(ScriptedServer(s))
            for i, s in {
                "a": [respond([tool_call("pause", {"label": "a", "seconds": 0.6})]), reply("modules: x, y")],
                "b": [respond([tool_call("pause", {"label": "b", "seconds": 0.6})]), reply("tests: 12 pass")],
                "c": [reply("report written", expect=sees_both)],
            }.items()
        }
        plan = Plan.from_json(DIAMOND)
        # step a may only use note: give it pause too so both independent steps wait
        plan = Plan(tuple(s if s.id != "a" else Step("a", s.goal, (), ("pause",), 3) for s in plan.steps))
        result = await apply_plan(plan, agents_for(servers, tmp_path), state_path=tmp_path / "state.json")
    assert result.subtype == "success", result.result
    (_la, sa, ea), (_lb, sb, eb) = sorted(spans)
    assert sa < eb and sb < ea, spans  # the two pauses overlapped
    assert result.result == "report written"
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["status"] == "success" and {n["status"] for n in state["nodes"].values()} == {"done"}
    assert "class s0,s1,s2 done" in result.mermaid()
    assert result.to_json()["nodes"]["a"]["duration_s"] > 0.5


async def test_an_interrupted_plan_resumes_at_the_first_unfinished_node(tmp_path):
    chain = {
        "task": "t",
        "steps": [
            {"id": "a", "goal": "Step one.", "tools": ["note"], "max_turns": 2},
            {"id": "b", "goal": "Step two.", "depends_on": ["a"], "tools": ["pause"], "max_turns": 2},
            {"id": "c", "goal": "Step three.", "depends_on": ["b"], "tools": ["note"], "max_turns": 2},
        ],
    }
    plan, state_path = Plan.from_json(chain), tmp_path / "state.json"
    with ExitStack() as stack:
        servers = {
            "a": stack.enter_context(ScriptedServer([reply("one done")])),
            "b": stack.enter_context(ScriptedServer([respond([tool_call("pause", {"label": "b", "seconds": 30})])])),
            "c": stack.enter_context(ScriptedServer([])),
        }
        task = asyncio.create_task(
            apply_plan(plan, agents_for(servers, tmp_path), state_path=state_path, on_event=lambda e: None)
        )
        while not (
            state_path.exists()
            and json.loads(state_path.read_text())["nodes"]["b"]["status"] == "running"
            and servers["b"].requests
        ):
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # b is inside its tool call now
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    saved = json.loads(state_path.read_text())
    assert saved["status"] == "interrupted"
    assert [saved["nodes"][i]["status"] for i in "abc"] == ["done", "pending", "pending"]

    def sees_one(body):
        assert first_text(body).startswith("Step two.") and "one done" in first_text(body)

    with ExitStack() as stack:  # a's server has no steps: running a again would fail the test
        servers = {
            "a": stack.enter_context(ScriptedServer([])),
            "b": stack.enter_context(ScriptedServer([reply("two done", expect=sees_one)])),
            "c": stack.enter_context(ScriptedServer([reply("three done")])),
        }
        result = await apply_plan(plan, agents_for(servers, tmp_path), state_path=state_path, resume=True)
    assert result.subtype == "success" and result.nodes["a"].attempts == 1
    assert result.run_id == saved["run_id"]


async def test_a_failing_check_escalates_retry_then_replan_then_fails_the_plan_cleanly(tmp_path):
    plan = Plan.from_json(
        {
            "task": "make flag",
            "steps": [
                {
                    "id": "a",
                    "goal": "Create the flag file.",
                    "tools": ["note"],
                    "max_turns": 2,
                    "check": "test -f flag || { echo 'flag is missing'; exit 3; }",
                },
                {"id": "b", "goal": "Use the flag.", "depends_on": ["a"], "tools": ["note"], "max_turns": 2},
            ],
        }
    )

    def told_the_failure(body):
        last = body["messages"][-1]["content"][-1]["text"]
        assert "exited with 3" in last and "flag is missing" in last
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]  # the same history, going on

    def asked_to_replan(body):
        assert "tools" not in body
        text = first_text(body)
        assert "Step a failed" in text and "flag is missing" in text and '"id": "b"' in text

    replacement = {
        "steps": [
            {
                "id": "a2",
                "goal": "Create the flag file, really.",
                "tools": ["note"],
                "max_turns": 2,
                "check": "test -f flag",
            }
        ]
    }
    steps = [
        reply("created it"),
        reply("created it now", expect=told_the_failure),
        reply(fenced(replacement), expect=asked_to_replan),
        reply("made it"),
        reply("made it, promise"),
    ]
    events = []
    with ScriptedServer(steps) as server:
        servers = {"a": server, "a2": server}
        result = await apply_plan(
            plan, agents_for(servers, tmp_path), state_path=tmp_path / "s.json", on_event=events.append
        )
    assert result.is_error and result.subtype == "error_plan_failed"
    assert result.plan.ids == ["a2"]  # b was the failed step's dependant: replaced with it
    node = result.nodes["a2"]
    assert node.status == "failed" and node.escalations == ["retry", "ask"] and node.attempts == 2
    assert "step a2 failed" in result.result and "exited with 1" in result.result
    assert [(e.step_id, e.data["level"]) for e in events if e.kind == "escalation"] == [
        ("a", "retry"),
        ("a", "replan"),
        ("a2", "retry"),
        ("a2", "ask"),
    ]
    saved = json.loads((tmp_path / "s.json").read_text())
    assert saved["status"] == "failed" and saved["nodes"]["a2"]["check"]["exit_code"] == 1


async def test_the_person_is_asked_last_and_their_guidance_goes_to_the_step(tmp_path):
    plan = Plan.from_json(
        {
            "steps": [
                {"id": "a", "goal": "Make flag.", "tools": ["note"], "max_turns": 2, "check": "test -f flag"},
                {"id": "b", "goal": "After.", "depends_on": ["a"], "max_turns": 1},
            ]
        }
    )
    asked = []

    def ask(step, failure):
        asked.append((step.id, failure))
        (tmp_path / "flag").write_text("")  # the person fixes it
        return "I created the flag for you; just confirm."

    def has_guidance(body):
        assert "I created the flag for you" in body["messages"][-1]["content"][-1]["text"]

    steps = [reply("done"), reply("done again"), reply("confirmed", expect=has_guidance)]
    with ScriptedServer(steps) as server, ScriptedServer([reply("after")]) as after:
        result = await apply_plan(
            plan,
            agents_for({"a": server, "b": after}, tmp_path),
            state_path=tmp_path / "s.json",
            ask=ask,
            replan_failed=False,
        )
    assert result.subtype == "success" and [a for a, _ in asked] == ["a"]
    assert result.nodes["a"].escalations == ["retry", "ask"] and result.nodes["a"].attempts == 3


async def test_a_failed_step_skips_its_dependants_but_not_independent_steps(tmp_path):
    plan = Plan.from_json(
        {
            "steps": [
                {"id": "a", "goal": "Fail.", "max_turns": 1, "check": "false"},
                {"id": "b", "goal": "After a.", "depends_on": ["a"], "max_turns": 1},
                {"id": "c", "goal": "On its own.", "max_turns": 1},
            ]
        }
    )
    with ScriptedServer([reply("x"), reply("y")]) as sa, ScriptedServer([]) as sb, ScriptedServer([reply("z")]) as sc:
        result = await apply_plan(
            plan,
            agents_for({"a": sa, "b": sb, "c": sc}, tmp_path),
            state_path=tmp_path / "s.json",
            replan_failed=False,
            concurrency=1,
        )
    assert result.statuses() == {"a": "failed", "b": "skipped", "c": "done"}
    assert "class s1 skipped" in result.mermaid()


# ---------------------------------------------------------------- the CLI, as subprocesses


def cli_env(server):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    return {
        **env,
        "PYTHONPATH": os.pathsep.join(filter(None, [SRC, env.get("PYTHONPATH")])),
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": "sk-test",
        "ANTHROPIC_MODEL": "claude-sonnet-4-6",
    }


def drivetrain(*args, server, cwd, **kw):
    return cli_process.run(
        [sys.executable, "-m", "drivetrain", *args],
        cwd=cwd,
        env=cli_env(server),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        **kw,
    )


def state_files():
    return list((Path(os.environ["DRIVETRAIN_HOME"]) / "plans").glob("*/*.json"))


def test_cli_plan_then_run_end_to_end(tmp_path):
    report = str(tmp_path / "report.txt")
    planned = {
        "steps": [
            {"id": "a", "goal": "List the modules.", "tools": ["Read"], "max_turns": 3},
            {"id": "b", "goal": "Summarise the tests.", "tools": ["Grep"], "max_turns": 3},
            {
                "id": "c",
                "goal": "Write report.txt.",
                "depends_on": ["a", "b"],
                "tools": ["Write"],
                "max_turns": 3,
                "check": "grep -q modules report.txt",
            },
        ]
    }

    def plan_request(body):
        assert "tools" not in body and "Write" in first_text(body) and "Bash" in first_text(body)

    def own_tools(body):
        assert [t["name"] for t in body["tools"]] in (["Read"], ["Grep"])

    def sees_both(body):
        assert [t["name"] for t in body["tools"]] == ["Write"]
        text = first_text(body)
        assert text.startswith("Write report.txt.") and "first answer" in text and "second answer" in text

    steps = [
        reply(fenced(planned), expect=plan_request),
        reply("first answer", expect=own_tools),
        reply("second answer", expect=own_tools),
        respond([tool_call("Write", {"file_path": report, "content": "modules: a, b\n"})], expect=sees_both),
        reply("report written"),
    ]
    with ScriptedServer(steps) as server:
        made = drivetrain("plan", "write a report", "-o", "plan.json", server=server, cwd=tmp_path)
        assert made.returncode == 0, made.stderr
        assert "1. a: List the modules." in made.stdout and "flowchart TD" in made.stdout
        assert json.loads((tmp_path / "plan.json").read_text())["version"] == 1
        ran = drivetrain(
            "apply",
            "plan.json",
            "-p",
            "--output-format",
            "stream-json",
            "--permission-mode",
            "acceptEdits",
            "--html",
            "report.html",
            server=server,
            cwd=tmp_path,
        )
    assert ran.returncode == 0, ran.stderr
    lines = [json.loads(line) for line in ran.stdout.splitlines()]
    result = lines[-1]
    assert result["type"] == "result" and result["subtype"] == "success" and result["result"] == "report written"
    assert {i: n["status"] for i, n in result["nodes"].items()} == {"a": "done", "b": "done", "c": "done"}
    assert result["nodes"]["c"]["check"]["exit_code"] == 0 and "class s0,s1,s2 done" in result["mermaid"]
    started = [x["step_id"] for x in lines if x.get("subtype") == "node_started"]
    assert sorted(started[:2]) == ["a", "b"] and started[2] == "c"
    assert {x["step_id"] for x in lines if x["type"] == "assistant"} == {"a", "b", "c"}
    assert (tmp_path / "report.txt").read_text() == "modules: a, b\n"
    page = (tmp_path / "report.html").read_text()
    assert "flowchart TD" in page and "<script" not in page and "http" not in page.replace("http://www.w3.org", "")
    assert page.count('<g class="step done">') == 3 and page.count("<line ") == 2  # a, b → c: three done, two arrows


def test_cli_apply_under_its_old_name_rejects_an_invalid_plan_with_its_problems(tmp_path):
    (tmp_path / "plan.json").write_text(
        json.dumps(
            {
                "steps": [
                    {"id": "a", "goal": "x", "depends_on": ["b"], "tools": ["Telepathy"]},
                    {"id": "b", "goal": "y", "depends_on": ["a"]},
                ]
            }
        )
    )
    with ScriptedServer([]) as server:
        proc = drivetrain("run", "plan.json", "-p", server=server, cwd=tmp_path)
    assert proc.returncode == 1
    assert "cycle: " in proc.stderr and "unknown tool(s) Telepathy" in proc.stderr
    assert "`drivetrain run PLAN` is now `drivetrain apply PLAN`" in proc.stderr


def test_cli_a_killed_plan_resumes_at_the_first_unfinished_node(tmp_path):
    (tmp_path / "plan.json").write_text(
        json.dumps(
            {
                "task": "t",
                "steps": [
                    {"id": "a", "goal": "Find the answer.", "tools": ["Read"], "max_turns": 2},
                    {"id": "b", "goal": "Use the answer.", "depends_on": ["a"], "tools": ["Read"], "max_turns": 2},
                ],
            }
        )
    )
    with ScriptedServer([reply("the answer is 42"), reply("never sent", delay=60)]) as server:
        proc = cli_process.Popen(
            [sys.executable, "-m", "drivetrain", "apply", "plan.json", "-p"],
            cwd=tmp_path,
            env=cli_env(server),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 60
            while len(server.requests) < 2:  # b's request is out: a is done and checkpointed
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
                time.sleep(0.05)
            [path] = state_files()
            killed = json.loads(path.read_text())
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            proc.kill()
            proc.stdout.close()
            proc.stderr.close()
    assert killed["status"] == "running"  # nothing ran after the kill: what is on disk is what resumes
    assert (killed["nodes"]["a"]["status"], killed["nodes"]["b"]["status"]) == ("done", "running")

    def sees_a(body):
        assert first_text(body).startswith("Use the answer.") and "the answer is 42" in first_text(body)

    with ScriptedServer([reply("used 42", expect=sees_a)]) as server:  # a is not asked again
        proc = drivetrain(
            "apply", "plan.json", "--resume", "-p", "--output-format", "json", server=server, cwd=tmp_path
        )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["subtype"] == "success" and result["result"] == "used 42"
    assert result["nodes"]["a"]["session_ids"] == killed["nodes"]["a"]["session_ids"]
    assert state_files() == [path] and json.loads(path.read_text())["status"] == "success"
    with ScriptedServer([]) as server:  # nothing left to resume
        proc = drivetrain("apply", "plan.json", "--resume", "-p", server=server, cwd=tmp_path)
    assert proc.returncode == 1 and "no unfinished run" in proc.stderr

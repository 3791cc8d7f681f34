"""Nodes added to the loop without forking it: Verify at end_turn, Plan at start, and the graph that shows them."""

import json
import subprocess
import sys

import pytest

import cli_process
from drivetrain import Agent, tool
from drivetrain.loop.graph import edges
from drivetrain.loop.nodes import PlanFirst, Proceed, Verify
from drivetrain.messages import lint
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.testing import ScriptedServer, reply, respond, tool_call


def agent_for(server, tmp_path, **kw):
    m = AnthropicModel.from_env(
        "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, backoff=0.01
    )

    @tool
    def touch(name: str) -> str:
        """Create an empty file."""
        (tmp_path / name).write_text("")
        return f"created {name}"

    return Agent(model=m, tools=[touch], cwd=tmp_path, strict=True, **kw)


def last_text(body):
    return body["messages"][-1]["content"][-1]["text"]


async def test_verify_sends_the_model_back_with_the_failure_until_the_check_passes(tmp_path):
    def sent_back(body):
        assert "`test -f done.txt` failed (exit 1)" in last_text(body)

    steps = [
        reply("All done."),
        respond([tool_call("touch", {"name": "done.txt"})], expect=sent_back),
        reply("Now it is done."),
    ]
    with ScriptedServer(steps) as server:
        agent = agent_for(server, tmp_path, nodes=[Verify("test -f done.txt")])
        run = agent.start("make done.txt")
        result = await run.finish()
    assert result.subtype == "success" and result.result == "Now it is done."
    assert run.value.node_visits == {"Verify": 2}
    assert set(zip(run.path, run.path[1:])) <= set(edges()) and "RunNode" in run.path
    assert not lint(result.history)


async def test_verify_runs_at_most_its_limit_then_lets_the_run_end(tmp_path):
    steps = [reply("Done."), reply("Really done."), reply("Still done.")]
    with ScriptedServer(steps) as server:
        result = await agent_for(server, tmp_path, nodes=[Verify("false", limit=2)]).run("go")
    assert result.subtype == "success" and result.result == "Still done." and result.num_turns == 3


async def test_a_send_back_for_the_answer_alone_asks_for_it_without_tools(tmp_path):
    """A 1.5B asked only to say what it did answered with a call that appended the file it had fixed to itself."""
    from drivetrain.loop.nodes import SendBack

    class AnswerAgain:
        name, at, limit = "AnswerAgain", "end_turn", 1

        async def run(self, ctx):
            return SendBack("Say which file you created.", tool_choice="none")

    def no_tools(body):
        assert body["tool_choice"] == {"type": "none"} and last_text(body) == "Say which file you created."

    steps = [
        respond([tool_call("touch", {"name": "a.txt"})]),
        reply("Done."),
        reply("I created a.txt.", expect=no_tools),
    ]
    with ScriptedServer(steps) as server:
        result = await agent_for(server, tmp_path, nodes=[AnswerAgain()]).run("make a.txt")
    assert result.subtype == "success" and result.result == "I created a.txt." and not lint(result.history)


async def test_plan_asks_for_a_plan_without_tools_then_the_model_acts_on_it(tmp_path):
    def plan_request(body):
        assert body["tool_choice"] == {"type": "none"} and "numbered plan" in last_text(body)

    def sees_plan(body):
        texts = [b["text"] for b in body["messages"][0]["content"]]
        assert texts[0] == "make a.txt" and texts[-1].startswith("Your plan:\n1. touch a.txt")

    steps = [
        reply("1. touch a.txt\n2. report", expect=plan_request),
        respond([tool_call("touch", {"name": "a.txt"})], expect=sees_plan),
        reply("made a.txt"),
    ]
    with ScriptedServer(steps) as server:
        agent = agent_for(server, tmp_path, nodes=[PlanFirst()])
        run = agent.start("make a.txt")
        result = await run.finish()
    assert result.result == "made a.txt" and (tmp_path / "a.txt").exists()
    assert run.path[:3] == ["SubmitPrompt", "RunNode", "CallModel"]


async def test_a_node_of_ones_own(tmp_path):
    class Count:
        name, at, limit = "Count", "end_turn", 5
        seen: list = []

        async def run(self, ctx):
            self.seen.append(ctx.answer)
            return Proceed()

    with ScriptedServer([reply("42")]) as server:
        result = await agent_for(server, tmp_path, nodes=[Count()]).run("answer")
    assert result.result == "42" and Count.seen == ["42"]


def test_nodes_need_their_own_names_and_a_known_point(tmp_path):
    with pytest.raises(ValueError, match="own name"):
        Agent(model=None, nodes=[Verify("true"), Verify("true")]).start("x")
    with pytest.raises(ValueError, match="point"):
        Agent(model=None, nodes=[PlanFirst(at="middle")]).start("x")


def test_graph_draws_the_node_edges():
    e = set(edges())
    assert {
        ("SubmitPrompt", "RunNode"),
        ("CallModel", "RunNode"),
        ("RunNode", "CallModel"),
        ("RunNode", "RunNode"),
        ("RunNode", "Done"),
    } <= e


def test_cli_verify_flag(tmp_path):
    import os

    steps = [reply("done"), respond([tool_call("Write", {"file_path": "ok.txt", "content": "yes"})]), reply("fixed")]
    with ScriptedServer(steps) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
        env.update({"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k", "ANTHROPIC_MODEL": "claude-sonnet-4-6"})
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "drivetrain",
                "-p",
                "write ok.txt",
                "--verify",
                "grep -q yes ok.txt",
                "--permission-mode",
                "acceptEdits",
                "--output-format",
                "json",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert json.loads(proc.stdout)["result"] == "fixed", proc.stderr


async def test_sessions_show_graph_counts_each_edge_the_run_took(tmp_path):
    import os

    from drivetrain.sessions.file import FileStore

    home = tmp_path / "home"
    steps = [respond([tool_call("touch", {"name": "a"})]), respond([tool_call("touch", {"name": "b"})]), reply("Done.")]
    with ScriptedServer(steps) as server:
        agent = agent_for(server, tmp_path, nodes=[Verify("test -f b", limit=1)], store=FileStore(home))
        result = await agent.run("make a and b")
    env = {**os.environ, "DRIVETRAIN_HOME": str(home)}
    out = cli_process.run(
        [sys.executable, "-m", "drivetrain", "sessions", "show", result.session_id[:8], "--graph"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "CallModel -->|2| RunTools" in out and "RunTools -->|2| CallModel" in out
    assert "CallModel -->|1| RunNode" in out and "RunNode -->|1| Done" in out
    assert "Recover -.-> CallModel" in out  # never taken: dotted

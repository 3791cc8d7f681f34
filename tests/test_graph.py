import typing

from drivetrain import Agent
from drivetrain.loop import step as loop
from drivetrain.loop.graph import edges, mermaid
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from drivetrain.tools import Glob


def test_every_state_is_in_the_graph():
    states = {t.__name__ for t in typing.get_args(loop.State)}
    drawn = {n for edge in edges() for n in edge}
    assert drawn == states
    assert "Recover --> CallModel" in mermaid() and "AwaitApproval --> RunTools" in mermaid()


async def test_a_real_run_only_walks_declared_edges(tmp_path):
    steps = [
        respond([tool_call("Glob", {"pattern": "*"})], stop_reason="max_tokens"),
        respond([tool_call("Glob", {"pattern": "*"})]),
        reply("done"),
    ]
    with ScriptedServer(steps) as server:
        model = AnthropicModel.from_env(None, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"})
        run = Agent(model=model, tools=[Glob()], cwd=tmp_path, strict=True).start("go")
        await run.finish()
    assert run.path == ["SubmitPrompt", "CallModel", "Recover", "CallModel", "RunTools", "CallModel", "Done"]
    assert set(zip(run.path, run.path[1:])) <= set(edges())


def test_graph_subcommand_prints_mermaid():
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run([str(Path(sys.executable).parent / "drivetrain"), "graph"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == mermaid()

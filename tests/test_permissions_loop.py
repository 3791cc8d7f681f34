"""The real Policy in a real run: confinement holds even when a folder is swapped for a symlink
between the permission check and the write (here, while the person is being asked)."""

import os

from drivetrain import Agent, Allow
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.permissions import Policy
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from drivetrain.tools import Write


async def test_parent_swapped_for_a_symlink_during_approval_does_not_escape(tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "sub").mkdir(parents=True)
    outside.mkdir()
    (ws / "sub" / "notes.txt").write_text("old\n")

    def swap_then_allow(call):
        os.rename(ws / "sub", ws / "sub.moved")
        os.symlink(outside, ws / "sub")  # sub/… now leads outside the workspace
        return Allow(by="person")

    def check(body):
        (write,) = body["messages"][-1]["content"]
        assert write["is_error"] and "outside the workspace" in write["content"], write

    steps = [respond([tool_call("Write", {"file_path": "sub/new.txt", "content": "pwned"})]), reply("ok", expect=check)]
    with ScriptedServer(steps) as server:
        model = AnthropicModel.from_env(None, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"})
        policy = Policy.load(ws, mode="default", env={"DRIVETRAIN_HOME": str(tmp_path / "home")})
        agent = Agent(model=model, tools=[Write()], cwd=ws, policy=policy, approver=swap_then_allow)
        await agent.run("write")
    assert list(outside.iterdir()) == []


async def test_approved_write_inside_the_workspace_still_works(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    steps = [respond([tool_call("Write", {"file_path": "deep/er/new.txt", "content": "hello\n"})]),
             reply("ok", expect=lambda b: not b["messages"][-1]["content"][0].get("is_error"))]
    with ScriptedServer(steps) as server:
        model = AnthropicModel.from_env(None, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"})
        policy = Policy.load(ws, mode="acceptEdits", env={"DRIVETRAIN_HOME": str(tmp_path / "home")})
        await Agent(model=model, tools=[Write()], cwd=ws, policy=policy).run("write")
    assert (ws / "deep" / "er" / "new.txt").read_text() == "hello\n"

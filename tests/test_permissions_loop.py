"""The real Policy in a real run: confinement holds even when a folder is swapped for a symlink
between the permission check and the write (here, while the person is being asked)."""

import os

from drivetrain import Agent, Allow
from drivetrain.control.permissions import Policy
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from drivetrain.tools import Bash, Glob, Grep, Write


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
    steps = [
        respond([tool_call("Write", {"file_path": "deep/er/new.txt", "content": "hello\n"})]),
        reply("ok", expect=lambda b: not b["messages"][-1]["content"][0].get("is_error")),
    ]
    with ScriptedServer(steps) as server:
        model = AnthropicModel.from_env(None, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"})
        policy = Policy.load(ws, mode="acceptEdits", env={"DRIVETRAIN_HOME": str(tmp_path / "home")})
        await Agent(model=model, tools=[Write()], cwd=ws, policy=policy).run("write")
    assert (ws / "deep" / "er" / "new.txt").read_text() == "hello\n"


def secret_project(tmp_path):
    ws = tmp_path / "ws"
    (ws / ".drivetrain").mkdir(parents=True)
    (ws / ".drivetrain" / "settings.json").write_text(
        '{"permissions": {"deny": ["Read(**/.env)"], "allow": ["Bash(grep:*)", "Bash(cat:*)"]}}'
    )
    (ws / ".env").write_text("API_KEY=sk-live-123\n")
    (ws / "app.py").write_text("key = os.environ['API_KEY']\n")
    return ws


async def run_one(tmp_path, ws, call, tools, check):
    steps = [respond([call]), reply("ok", expect=check)]
    with ScriptedServer(steps) as server:
        model = AnthropicModel.from_env(None, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"})
        policy = Policy.load(
            ws, interactive=False, env={"DRIVETRAIN_HOME": str(tmp_path / "home")}, home=tmp_path / "home"
        )
        await Agent(model=model, tools=tools, cwd=ws, policy=policy).run("find the key")


async def test_grep_skips_a_file_a_read_deny_rule_covers_and_says_so(tmp_path):
    ws = secret_project(tmp_path)

    def check(body):
        (result,) = body["messages"][-1]["content"]
        assert not result.get("is_error")
        assert "sk-live" not in result["content"]
        assert result["content"] == "app.py:1:key = os.environ['API_KEY']\n\n(1 file skipped: denied by Read(**/.env))"

    await run_one(tmp_path, ws, tool_call("Grep", {"pattern": "API_KEY", "output_mode": "content"}), [Grep()], check)


async def test_glob_leaves_out_a_denied_file(tmp_path):
    ws = secret_project(tmp_path)

    def check(body):
        (result,) = body["messages"][-1]["content"]
        assert result["content"] == "app.py\n(1 file skipped: denied by Read(**/.env))"

    await run_one(tmp_path, ws, tool_call("Glob", {"pattern": "*"}), [Glob()], check)


async def test_a_shell_command_reading_a_denied_file_is_denied(tmp_path):
    ws = secret_project(tmp_path)
    for command in ("grep -r API_KEY .", "cat .env", "grep -rn KEY", "cat app.py .e*"):

        def check(body, command=command):
            (result,) = body["messages"][-1]["content"]
            assert result.get("is_error") and "sk-live" not in result["content"], command
            assert "Read(**/.env)" in result["content"], result

        await run_one(tmp_path, ws, tool_call("Bash", {"command": command}), [Bash()], check)

    def allowed(body):  # the same allow rule still runs a grep that reads no denied file
        (result,) = body["messages"][-1]["content"]
        assert not result.get("is_error") and "os.environ" in result["content"], result

    await run_one(tmp_path, ws, tool_call("Bash", {"command": "grep -rn API_KEY app.py"}), [Bash()], allowed)

"""Interactive mode in a real pseudo-terminal: approvals asked and answered at the prompt."""

import json
import os
import sys
from pathlib import Path

import pexpect

from drivetrain.testing import ScriptedServer, reply, respond, tool_call

DRIVETRAIN = str(Path(sys.executable).parent / "drivetrain")


def spawn(server, cwd, home):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update({"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-test", "DRIVETRAIN_HOME": str(home),
                "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"})
    return pexpect.spawn(DRIVETRAIN, cwd=str(cwd), env=env, encoding="utf-8", timeout=20, dimensions=(40, 160))


def test_deny_with_a_message_then_always_allow_for_the_project(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()

    def denied_with_message(body):
        res = body["messages"][-1]["content"][0]
        assert res["is_error"] and "use the staging target" in res["content"]
        return True

    def allowed(body):
        res = body["messages"][-1]["content"][0]
        assert not res.get("is_error"), res
        return True

    steps = [respond([tool_call("Bash", {"command": "make deploy"})]),
             reply("Understood, staging it is.", expect=denied_with_message),
             respond([tool_call("Bash", {"command": "touch made.txt"})]),
             reply("Made it.", expect=allowed)]
    with ScriptedServer(steps) as server:
        child = spawn(server, ws, tmp_path / "home")
        child.expect("/exit to leave")
        child.expect(">")
        child.sendline("deploy it")
        child.expect(r"\$ make deploy")
        child.expect(r"\[n\] deny")
        child.sendline("n")
        child.expect("Message for the model")
        child.sendline("use the staging target")
        child.expect("Understood, staging it is.")
        child.expect(">")
        child.sendline("make a file")
        child.expect(r"\$ touch made.txt")
        child.expect(r"\[n\] deny")
        child.sendline("p")
        child.expect("Made it.")
        child.expect(">")
        child.sendline("/exit")
        child.expect(pexpect.EOF)
        child.close()
    assert child.exitstatus == 0
    settings = json.loads((ws / ".drivetrain" / "settings.local.json").read_text())
    assert settings == {"permissions": {"allow": ["Bash(touch made.txt)"]}}
    assert (ws / "made.txt").exists()


def test_ctrl_d_leaves(tmp_path):
    with ScriptedServer([]) as server:
        child = spawn(server, tmp_path, tmp_path / "home")
        child.expect(">")
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
    assert child.exitstatus == 0

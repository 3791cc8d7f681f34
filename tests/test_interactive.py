"""Interactive mode in a real pseudo-terminal: approvals asked and answered at the prompt.

Every step waits for what the screen shows (the prompt, a question, an answer), never for a fixed time, with
timeouts generous enough for a busy two-core machine to start Python and import the SDKs.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect

from drivetrain.testing import ScriptedServer, reply, respond, tool_call

DRIVETRAIN = str(Path(sys.executable).parent / "drivetrain")
TIMEOUT = 180  # seconds: generous for a busy machine; on an idle one each step takes well under a second
PROMPT = re.compile(r"\n(?:\x1b\[[0-9;?]*[A-Za-z])*>")  # a line that starts (after terminal codes) with ">"
CHOICES_ALL = "[y] allow once  [s] allow for this session  [p] always allow in this project  [n] deny"
CHOICES_ONCE = "[y] allow once  [n] deny"


def env_for(server):
    """The test's own environment (its own HOME and DRIVETRAIN_HOME, from conftest), pointed at the server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update({"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-test", "TERM": "xterm",
                "PROMPT_TOOLKIT_NO_CPR": "1"})
    return env


def spawn(server, cwd):
    child = pexpect.spawn(DRIVETRAIN, cwd=str(cwd), env=env_for(server), encoding="utf-8", timeout=TIMEOUT,
                          dimensions=(40, 160))
    child.delaybeforesend = None  # no fixed pause before typing: each step waits for the screen instead
    child.expect_exact("/exit to leave")
    return child


def answer(child, question: str, line: str, *, prompt: bool = True) -> None:
    """Wait until ``question`` is on the screen and the ``>`` prompt after it is drawn (``prompt=False``: the
    question is the prompt itself), then type ``line``."""
    child.expect_exact(question)
    if prompt:
        child.expect(PROMPT)
    child.sendline(line)


def leave(child) -> int:
    answer(child, "", "/exit")
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


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
        child = spawn(server, ws)
        answer(child, "", "deploy it")
        child.expect_exact("$ make deploy")
        answer(child, CHOICES_ALL, "n")
        answer(child, "Message for the model (optional):", "use the staging target", prompt=False)
        answer(child, "Understood, staging it is.", "make a file")
        child.expect_exact("$ touch made.txt")
        answer(child, CHOICES_ALL, "p")
        child.expect_exact("Made it.")
        assert leave(child) == 0
    settings = json.loads((ws / ".drivetrain" / "settings.local.json").read_text())
    assert settings == {"permissions": {"allow": ["Bash(touch made.txt)"]}}
    assert (ws / "made.txt").exists()


def test_a_command_no_rule_can_express_is_allowed_once_and_the_project_still_starts(tmp_path):
    command = "echo $(whoami) > who.txt"

    def allowed(body):
        res = body["messages"][-1]["content"][0]
        assert not res.get("is_error"), res

    steps = [respond([tool_call("Bash", {"command": command})]), reply("Wrote who.txt.", expect=allowed)]
    with ScriptedServer(steps) as server:
        child = spawn(server, tmp_path)
        answer(child, "", "who am I?")
        child.expect_exact(f"$ {command}")
        child.expect_exact(f"No rule can allow exactly this call again: Bash({command}) is not a valid rule")
        answer(child, CHOICES_ONCE, "p")  # not offered: asked again
        answer(child, "Please answer y or n (got p).", "y")
        child.expect_exact("Wrote who.txt.")
        assert leave(child) == 0
    assert (tmp_path / "who.txt").read_text().strip() and not (tmp_path / ".drivetrain").exists()
    with ScriptedServer([reply("Still here.")]) as server:  # the next start in this project works
        proc = subprocess.run([DRIVETRAIN, "-p", "hello"], cwd=tmp_path, env=env_for(server), capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=TIMEOUT)
    assert proc.returncode == 0 and proc.stdout.strip() == "Still here.", proc.stderr


def test_ctrl_d_leaves(tmp_path):
    with ScriptedServer([]) as server:
        child = spawn(server, tmp_path)
        child.expect(PROMPT)
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
    assert child.exitstatus == 0

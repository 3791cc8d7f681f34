"""Hooks acting on a real run: change input, replace output, refuse a stop, add prompt context."""

import json

from drivetrain import Agent, tool
from drivetrain.control.hooks import Hooks
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.testing import ScriptedServer, reply, respond, tool_call

ran: list[str] = []


@tool
def shell(command: str) -> str:
    """Pretend to run a command."""
    ran.append(command)
    return f"ran {command}"


def agent_for(server, hooks, **kw):
    model = AnthropicModel.from_env("claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"})
    return Agent(model=model, tools=[shell], hooks=hooks, strict=True, **kw)


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


async def test_pre_tool_use_shell_hook_changes_input(tmp_path):
    ran.clear()
    hook = script(
        tmp_path,
        "pre.sh",
        """cat > /dev/null
echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
       "updatedInput": {"command": "make test --dry-run"}}}'
""",
    )
    hooks = Hooks()
    hooks.add_command("PreToolUse", hook, matcher="shell")
    steps = [
        respond([tool_call("shell", {"command": "make test"})]),
        reply("ok", expect=lambda b: b["messages"][-1]["content"][0]["content"] == "ran make test --dry-run"),
    ]
    with ScriptedServer(steps) as server:
        await agent_for(server, hooks).run("test")
    assert ran == ["make test --dry-run"]


async def test_pre_tool_use_exit_2_blocks_with_stderr_fed_back(tmp_path):
    ran.clear()
    hook = script(tmp_path, "block.sh", "cat > /dev/null; echo 'no pushing on Fridays' >&2; exit 2\n")
    hooks = Hooks()
    hooks.add_command("PreToolUse", hook)

    def check(body):
        res = body["messages"][-1]["content"][0]
        assert res["is_error"] and "no pushing on Fridays" in res["content"]

    with ScriptedServer([respond([tool_call("shell", {"command": "git push"})]), reply("ok", expect=check)]) as server:
        await agent_for(server, hooks).run("push")
    assert ran == []


async def test_post_tool_use_replaces_the_result_and_adds_context(tmp_path):
    payloads = []

    def post(payload):
        payloads.append(payload)
        return {
            "hookSpecificOutput": {
                "hookEventName": "PostToolUse",
                "updatedToolOutput": "[output withheld]",
                "additionalContext": "Note: output is confidential.",
            }
        }

    hooks = Hooks()
    hooks.add("PostToolUse", post)

    def check(body):
        assert body["messages"][-1]["content"][0]["content"] == "[output withheld]\n\nNote: output is confidential."

    with ScriptedServer(
        [respond([tool_call("shell", {"command": "cat secrets"})]), reply("ok", expect=check)]
    ) as server:
        await agent_for(server, hooks).run("read")
    assert payloads[0]["tool_response"] == {"content": "ran cat secrets", "is_error": False}
    assert payloads[0]["tool_name"] == "shell" and payloads[0]["tool_input"] == {"command": "cat secrets"}


async def test_stop_hook_refuses_the_stop_until_tests_pass(tmp_path):
    state = tmp_path / "tests_pass"
    hook = script(
        tmp_path,
        "stop.sh",
        f"""payload=$(cat)
if [ -e {state} ]; then exit 0; fi
echo "{{\\"decision\\": \\"block\\", \\"reason\\": \\"tests still fail\\"}}"
""",
    )
    hooks = Hooks()
    hooks.add_command("Stop", hook)

    def fix_tests(body):
        assert body["messages"][-1]["content"][0]["text"] == "A Stop hook refused to let you stop: tests still fail"
        state.touch()
        return True

    steps = [reply("I'm done"), reply("fixed them, now done", expect=fix_tests)]
    with ScriptedServer(steps) as server:
        result = await agent_for(server, hooks).run("fix the tests")
    assert result.result == "fixed them, now done" and result.num_turns == 2


async def test_user_prompt_submit_adds_context_or_blocks(tmp_path):
    hooks = Hooks()
    hooks.add(
        "UserPromptSubmit",
        lambda p: {
            "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "The repo uses pytest."}
        },
    )

    def check(body):
        assert [b["text"] for b in body["messages"][0]["content"]] == ["run the tests", "The repo uses pytest."]

    with ScriptedServer([reply("ok", expect=check)]) as server:
        await agent_for(server, hooks).run("run the tests")

    blocking = Hooks()
    blocking.add("UserPromptSubmit", lambda p: {"decision": "block", "reason": "prompt mentions a password"})
    with ScriptedServer([]) as server:
        result = await agent_for(server, blocking).run("my password is hunter2")
    assert result.subtype == "prompt_blocked" and "password" in result.result and result.num_turns == 0


async def test_a_failing_hook_is_reported_and_the_run_goes_on(tmp_path):
    hooks = Hooks()
    hooks.add_command("PreToolUse", script(tmp_path, "bad.sh", "cat >/dev/null; echo '{not json'\n"))
    seen = []
    with ScriptedServer([respond([tool_call("shell", {"command": "ls"})]), reply("ok")]) as server:
        result = await agent_for(server, hooks, observers=[seen.append]).run("go")
    assert result.result == "ok"
    reports = [e for e in seen if type(e).__name__ == "HookReported"]
    assert reports and reports[0].event == "PreToolUse" and json.dumps(reports[0].errors)


async def test_continue_false_stops_the_run_with_a_valid_history():
    hooks = Hooks()
    hooks.add("PostToolUse", lambda p: {"continue": False, "stopReason": "budget exhausted"})
    with ScriptedServer([respond([tool_call("shell", {"command": "ls"})])]) as server:
        result = await agent_for(server, hooks).run("go")
    assert result.subtype == "stopped_by_hook" and "budget exhausted" in result.result
    assert result.history[-1].role == "user" and result.history[-1].content[0].tool_use_id

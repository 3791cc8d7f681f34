"""The agent loop end to end through the OpenAI-compatible provider and the scripted chat-completions server."""

import json
import sys

from drivetrain import Agent, ToolResultBlock, tool
from drivetrain.models.openai import OpenAIModel
from drivetrain.testing import ScriptedOpenAIServer, reply, respond, text, tool_call
from drivetrain.tools import builtin_tools

touched: list[str] = []


@tool
def touch(name: str = "default.txt") -> str:
    """Record a name. Every argument is optional, so `{}` would be a valid call: it must still never run."""
    touched.append(name)
    return f"touched {name}"


def agent_for(server, **kw):
    model = OpenAIModel.from_env("qwen2.5-coder", {"OPENAI_BASE_URL": server.url}, backoff=0.01)
    return Agent(model=model, strict=True, **kw)


def tool_messages(body):
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


async def test_builtin_tools_through_the_openai_provider(tmp_path):
    def results_are_in(body):
        results = tool_messages(body)
        assert "print('hi')" in results["call_read"] and results["call_run"].strip() == "hi"
        assert body["messages"][0]["role"] == "system" and {t["function"]["name"] for t in body["tools"]} >= {
            "Read",
            "Write",
            "Edit",
            "Bash",
            "Grep",
            "Glob",
        }

    steps = [
        respond(
            [
                text("Writing it."),
                tool_call("Write", {"file_path": "hello.py", "content": "print('hi')\n"}, id="call_write"),
            ]
        ),
        respond(
            [
                tool_call("Read", {"file_path": "hello.py"}, id="call_read"),  # parallel calls
                tool_call("Bash", {"command": f"{sys.executable} hello.py"}, id="call_run"),
            ]
        ),
        reply("hello.py prints hi.", expect=results_are_in),
    ]
    with ScriptedOpenAIServer(steps) as server:
        result = await agent_for(server, tools=builtin_tools(), cwd=tmp_path, system="You are careful.").run(
            "Write hello.py and run it."
        )
    assert (result.subtype, result.result, result.num_turns) == ("success", "hello.py prints hi.", 3)
    assert result.trajectory == ["tool_use", "tool_use", "end_turn"]
    assert (tmp_path / "hello.py").read_text() == "print('hi')\n"
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0


async def test_malformed_arguments_are_answered_with_the_error_and_schema_and_never_run():
    touched.clear()
    raw = '{"name": "a.txt'

    def error_came_back(body):
        content = tool_messages(body)["call_bad"]
        assert content.startswith("Error: ") and "not valid JSON" in content and raw in content
        assert "not run" in content and json.dumps(touch.input_schema) in content

    steps = [
        respond([tool_call("touch", raw, id="call_bad")]),
        respond([tool_call("touch", {"name": "b.txt"}, id="call_good")], expect=error_came_back),
        reply("done"),
    ]
    with ScriptedOpenAIServer(steps) as server:
        result = await agent_for(server, tools=[touch]).run("touch a file")
    assert result.subtype == "success" and touched == ["b.txt"]  # the malformed call never ran, not even as {}
    (bad,) = [
        b for m in result.history for b in m.content if isinstance(b, ToolResultBlock) and b.tool_use_id == "call_bad"
    ]
    assert bad.is_error and "input schema" in bad.text


async def test_a_call_cut_off_at_length_is_retried_with_more_room_not_run():
    touched.clear()
    steps = [
        respond(
            [tool_call("touch", '{"name": "a.t', id="call_cut")],
            stop_reason="length",
            expect=lambda body: body["max_tokens"] == 1000,
        ),
        reply("ok", expect=lambda body: body["max_tokens"] == 2000 and tool_messages(body) == {}),
    ]
    with ScriptedOpenAIServer(steps) as server:
        result = await agent_for(server, tools=[touch], max_tokens=1000).run("touch")
    assert result.result == "ok" and touched == []

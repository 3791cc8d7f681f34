"""The Task tool: child loops against the scripted model server through the real Anthropic SDK, and through the CLI."""

import json
import threading

import cli_process
from drivetrain import Agent
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.sessions.file import FileStore
from drivetrain.subagents.definitions import GENERAL_PURPOSE, load_types, parse_agent_file
from drivetrain.subagents.task import TaskTool
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from drivetrain.tools import Read
from test_cli import DRIVETRAIN, cli


def task(prompt, id, kind="general-purpose"):
    return tool_call("Task", {"description": "a part", "prompt": prompt, "subagent_type": kind}, id=id)


async def test_two_task_calls_run_concurrently_and_the_parent_gets_only_their_answers(tmp_path):
    released = threading.Event()
    safety = threading.Timer(30, released.set)  # if the children ran one after the other, the test ends anyway
    children: dict[str, str] = {}  # prompt -> the answer its child got
    overlapped = []

    def child(answer, release=False):
        def check(body):
            first = body["messages"][0]
            assert len(body["messages"]) == 1 and first["role"] == "user", body["messages"]
            prompt = first["content"] if isinstance(first["content"], str) else first["content"][0]["text"]
            assert "Task" not in [t["name"] for t in body["tools"]] and "Read" in [t["name"] for t in body["tools"]]
            assert "subagent" in json.dumps(body["system"])
            children[prompt] = answer
            if release:  # the second child asks while the first one's answer is still held back
                overlapped.append(not server.requests[1].answered)
                released.set()

        return check

    def parent_results(body):
        results = {r["tool_use_id"]: r["content"] for r in body["messages"][-1]["content"]}
        assert results == {"toolu_a": children["count the a's"], "toolu_b": children["count the b's"]}
        assert [t["name"] for t in body["tools"]] == ["Read", "Task"]

    steps = [
        respond([task("count the a's", "toolu_a"), task("count the b's", "toolu_b")]),
        reply("first child's answer", expect=child("first child's answer"), hold=released),
        reply("second child's answer", expect=child("second child's answer", release=True)),
        reply("both counted", expect=parent_results),
    ]
    store = FileStore(tmp_path / "home")
    safety.start()
    try:
        with ScriptedServer(steps) as server:
            model = AnthropicModel.from_env(
                "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}
            )
            agent = Agent(model=model, tools=[Read()], cwd=tmp_path, store=store, strict=True)
            agent.tools.append(TaskTool(agent, {"general-purpose": GENERAL_PURPOSE}))
            result = await agent.start("count both", session_id="parent").finish()
    finally:
        safety.cancel()
    assert result.result == "both counted" and overlapped == [True]
    # the children's usage is the parent's too: every request's input tokens, in the parent's total
    children_ids = [r["session"] for r in store.read("parent") if r["kind"] == "subagent"]
    assert sorted(children_ids) == ["parent.task-toolu_a", "parent.task-toolu_b"]
    turns = [r for sid in ["parent", *children_ids] for r in store.read(sid) if r["kind"] == "turn"]
    assert len(turns) == 4 and result.usage.input_tokens == sum(t["usage"]["input_tokens"] for t in turns)
    link = next(r for r in store.read("parent.task-toolu_a") if r["kind"] == "subagent_of")
    assert link["session"] == "parent" and link["tool_use_id"] == "toolu_a"


def test_agent_files_and_their_front_matter(tmp_path):
    folder = tmp_path / ".drivetrain" / "agents"
    folder.mkdir(parents=True)
    (folder / "reader.md").write_text(
        "---\nname: reader\ndescription: Reads files. Use to look.\ntools: Read, Grep\n"
        "model: inherit\n---\nYou only read.\n"
    )
    types = load_types(tmp_path)
    assert set(types) == {"general-purpose", "reader"}
    assert types["reader"].tools == ("Read", "Grep") and types["reader"].model is None
    assert types["reader"].prompt == "You only read."
    try:
        parse_agent_file("no front matter", "x.md")
    except Exception as e:
        assert "front matter" in str(e)
    else:
        raise AssertionError("a file without front matter must be refused")


def test_cli_task_with_an_agent_file_and_sessions_show_nests_the_child(tmp_path):
    folder = tmp_path / ".drivetrain" / "agents"
    folder.mkdir(parents=True)
    (folder / "reader.md").write_text("---\nname: reader\ndescription: Reads files.\ntools: Read\n---\nYou read.\n")
    (tmp_path / "notes.txt").write_text("the answer is 41+1\n")

    def child_sees_its_tools(body):
        assert [t["name"] for t in body["tools"]] == ["Read"], body["tools"]
        assert "You read." in json.dumps(body["system"])

    steps = [
        respond([task("read notes.txt and say what it says", "toolu_t", kind="reader")]),
        respond([tool_call("Read", {"file_path": "notes.txt"}, id="toolu_r")], expect=child_sees_its_tools),
        reply("notes.txt says the answer is 41+1"),
        reply("The answer is 42.", expect=lambda b: "41+1" in b["messages"][-1]["content"][0]["content"]),
    ]
    with ScriptedServer(steps) as server:
        proc = cli(server.url, "-p", "what do the notes say?", "--output-format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    session = json.loads(proc.stdout)["session_id"]
    shown = cli_process.run(
        [DRIVETRAIN, "sessions", "show", session[:8]], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  → Task "))
    nested = lines[at + 2 : at + 8]
    assert nested[0].startswith("    session ") and any(line.startswith("      → Read ") for line in nested), lines


def test_a_child_gets_half_of_each_limit_and_still_answers_at_one():
    from drivetrain.loop.budget import Budget
    from drivetrain.subagents.task import share

    budget, turns = share(Budget(usd=1.0, tokens=1000, wall_time_s=60.0, tool_calls=3), 10)
    assert (budget.usd, budget.tokens, budget.wall_time_s, budget.tool_calls, turns) == (0.5, 500, 30.0, 1, 5)
    assert budget.wrap_up and share(Budget(), None) == (Budget(wrap_up=True), None)

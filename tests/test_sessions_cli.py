"""`drivetrain sessions list` and `drivetrain sessions show ID`, as subprocesses, over sessions made by real runs.

The sessions are made by the agent (or the real CLI) against the scripted server, saved in the FileStore
under this test's $DRIVETRAIN_HOME (conftest), and read back by the command as a user would run it.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cli_process
import drivetrain
from drivetrain import Agent, tool
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.sessions.open import open_store
from drivetrain.testing import ScriptedServer, reply, respond, text, tool_call

SRC = str(Path(drivetrain.__file__).parents[1])  # the subprocesses run this very drivetrain
LONG = "".join(f"{i:03d}|" for i in range(60))  # 240 characters, no two 100-character heads alike


@tool
def note(text: str) -> str:
    """Write a note down."""
    return f"noted {text}"


@tool
def inspect(path: str) -> str:
    """Describe a file."""
    return f"{path}: 137 lines, last changed by build_index at line 42"


@tool
def dump() -> str:
    """Print a long table."""
    return LONG


def python_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [SRC, env.get("PYTHONPATH")])), **extra}


def sessions(*args, cwd):
    return cli_process.run(
        [sys.executable, "-m", "drivetrain", "sessions", *args],
        cwd=cwd,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def show_json(sid, cwd):
    proc = sessions("show", sid, "--json", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


async def run_session(tmp_path, steps, prompt="go", session_id=None, **kw):
    kw.setdefault("tools", [note, inspect, dump])
    with ScriptedServer(steps) as server:
        model = AnthropicModel.from_env(
            "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, backoff=0.01
        )
        agent = Agent(model=model, strict=True, store=open_store(), cwd=tmp_path, **kw)
        return await agent.start(prompt, session_id=session_id).finish()


async def test_a_repeated_identical_call_is_reported(tmp_path):
    steps = [
        respond([tool_call("note", {"text": "a"})]),
        respond([tool_call("note", {"text": "a"})]),
        respond([tool_call("note", {"text": "b"})]),
        reply("Noted."),
    ]
    result = await run_session(tmp_path, steps)
    report = show_json(result.session_id, tmp_path)
    assert report["health"]["repeated_calls"] == [{"tool": "note", "input": {"text": "a"}, "count": 2}]
    assert report["trajectory"] == ["tool_use"] * 3 + ["end_turn"]
    assert [c["result_head"].split("\n")[0] for t in report["turns"] for c in t["calls"]] == [
        "noted a",
        "noted a",
        "noted b",
    ]
    out = sessions("show", result.session_id, cwd=tmp_path).stdout
    assert 'repeated identical calls: note {"text": "a"} ×2' in out
    assert "trajectory: tool_use → tool_use → tool_use → end_turn" in out


async def test_an_answer_citing_a_tool_result_and_the_turn_log(tmp_path):
    steps = [
        respond([text("Looking."), tool_call("inspect", {"path": "src/index.py"}), tool_call("dump", {})]),
        reply("src/index.py has 137 lines; build_index is at index.py:42."),
    ]
    result = await run_session(tmp_path, steps, prompt="How long is src/index.py?")
    report = show_json(result.session_id, tmp_path)
    grounding = report["health"]["answer_grounding"]
    assert grounding["verdict"] == "cites tool results"
    assert set(grounding["found"]) == {"src/index.py", "137", "index.py:42"} and grounding["not_found"] == []
    assert report["health"]["ended_at_once"] is False and report["health"]["repeated_calls"] == []
    first, second = report["turns"]
    assert (first["turn"], first["stop_reason"], second["stop_reason"]) == (1, "tool_use", "end_turn")
    assert first["usage"]["input_tokens"] > 0 and first["cost_usd"] > 0
    assert report["session"]["total_cost_usd"] == pytest.approx(first["cost_usd"] + second["cost_usd"])
    dumped = first["calls"][1]
    assert (dumped["tool"], dumped["result_head"], dumped["result_chars"]) == ("dump", LONG[:100], 240)

    out = sessions("show", result.session_id, cwd=tmp_path).stdout.splitlines()
    turn1 = f"[turn 1] tool_use  {first['usage']['input_tokens']} in / {first['usage']['output_tokens']} out  $"
    assert out[2].startswith(turn1), out
    assert '  → inspect {"path": "src/index.py"}' in out
    assert "  ← src/index.py: 137 lines, last changed by build_index at line 42" in out
    assert f"  ← {LONG[:100]}…" in out and LONG[:101] not in "\n".join(out)
    assert "  answer grounding: cites tool results" in out


async def test_an_answer_citing_nothing_the_tools_returned(tmp_path):
    steps = [respond([tool_call("note", {"text": "a"})]), reply("The build has 4213 warnings, mostly in main.c.")]
    result = await run_session(tmp_path, steps)
    grounding = show_json(result.session_id, tmp_path)["health"]["answer_grounding"]
    assert grounding == {"verdict": "cites nothing the tools returned", "found": [], "not_found": ["main.c", "4213"]}
    out = sessions("show", result.session_id, cwd=tmp_path).stdout
    assert "answer grounding: cites nothing the tools returned" in out and "not in any tool output: main.c, 4213" in out


async def test_the_trajectory_signals(tmp_path):
    at_once = await run_session(tmp_path, [reply("Looks fine to me.")], prompt="Fix the failing test.")
    health = show_json(at_once.session_id, tmp_path)["health"]
    assert health["ended_at_once"] is True and health["tool_use_to_cap"] is False
    assert health["answer_grounding"]["verdict"] == "no checkable claims"

    capped = await run_session(
        tmp_path, [respond([tool_call("note", {"text": str(i)})]) for i in range(2)], max_turns=2
    )
    assert capped.subtype == "error_max_turns"
    report = show_json(capped.session_id, tmp_path)
    assert report["health"]["tool_use_to_cap"] is True and report["health"]["ended_at_once"] is False
    assert report["session"]["status"] == "error_max_turns"
    assert "tool_use all the way to the turn cap: yes" in sessions("show", capped.session_id, cwd=tmp_path).stdout


async def test_list_filters_and_ids_by_prefix(tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir(), there.mkdir()
    await run_session(here, [reply("one")], prompt="first task here", session_id="abc-1")
    await run_session(here, [reply("two")], prompt="second task here", session_id="abc-2")
    await run_session(there, [reply("three")], prompt="a task elsewhere", session_id="xyz-3")

    rows = json.loads(sessions("list", "--json", cwd=here).stdout)
    assert [r["session_id"] for r in rows] == ["abc-2", "abc-1"]  # this directory's, newest first
    assert (rows[0]["num_turns"], rows[0]["status"], rows[0]["first_prompt"]) == (1, "success", "second task here")
    assert {r["session_id"] for r in json.loads(sessions("list", "--all", "--json", cwd=here).stdout)} >= {
        "abc-1",
        "abc-2",
        "xyz-3",
    }
    assert [r["session_id"] for r in json.loads(sessions("list", "--cwd", str(there), "--json", cwd=here).stdout)] == [
        "xyz-3"
    ]
    assert [r["session_id"] for r in json.loads(sessions("list", "--query", "FIRST", "--json", cwd=here).stdout)] == [
        "abc-1"
    ]
    assert len(json.loads(sessions("list", "--limit", "1", "--json", cwd=here).stdout)) == 1

    table = sessions("list", cwd=here).stdout.splitlines()
    assert table[0].split() == ["ID", "DIRECTORY", "FIRST", "PROMPT", "TURNS", "COST", "LAST", "ACTIVITY", "STATUS"]
    sid, directory = table[1].split()[:2]
    assert sid == "abc-2" and directory.startswith("…") and str(here).endswith(directory[1:])  # long: its end shown
    assert "second task here" in table[1] and table[1].endswith("success") and len(table) == 3

    assert show_json("xyz", here)["session"]["session_id"] == "xyz-3"  # a unique prefix
    assert show_json("abc-1", here)["session"]["first_prompt"] == "first task here"
    ambiguous = sessions("show", "abc", cwd=here)
    assert ambiguous.returncode == 1 and "names 2 sessions" in ambiguous.stderr and ambiguous.stdout == ""
    unknown = sessions("show", "nope", cwd=here)
    assert unknown.returncode == 1 and "no session 'nope'" in unknown.stderr


def test_a_session_made_by_the_real_cli(tmp_path):
    (tmp_path / "a.py").write_text("import os\nprint(os.getcwd())\n# end\n")
    steps = [
        respond(
            [
                text("Reading it."),
                tool_call("Read", {"file_path": "a.py"}, id="toolu_a"),
                tool_call("Write", {"file_path": "n.txt", "content": "3"}, id="toolu_w"),
            ]
        ),
        reply("a.py has 3 lines; line 2 calls os.getcwd."),
    ]
    with ScriptedServer(steps) as server:
        env = python_env(
            ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="sk-test", ANTHROPIC_MODEL="claude-sonnet-4-6"
        )
        ran = cli_process.run(
            [sys.executable, "-m", "drivetrain", "-p", "How many lines has a.py?"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    assert ran.returncode == 0, ran.stderr

    [row] = json.loads(sessions("list", "--json", cwd=tmp_path).stdout)
    assert (row["cwd"], row["num_turns"], row["status"]) == (str(tmp_path), 2, "success")
    assert row["first_prompt"] == "How many lines has a.py?" and row["total_cost_usd"] > 0
    line = sessions("list", cwd=tmp_path).stdout.splitlines()[1]
    assert line.startswith(row["session_id"][:8]) and "How many lines has a.py?" in line and " 2 " in line

    report = show_json(row["session_id"][:8], tmp_path)
    call, write = report["turns"][0]["calls"]
    assert (call["tool"], call["input"], call["is_error"], call["decision"]) == (
        "Read",
        {"file_path": "a.py"},
        False,
        "allow",
    )  # the audit log's intent record
    assert call["decided_by"] and "import os" in call["result_head"]
    assert (write["tool"], write["decision"], write["is_error"]) == ("Write", "deny", True)  # -p cannot ask
    assert report["health"]["answer_grounding"]["verdict"] == "cites tool results"
    out = sessions("show", row["session_id"], cwd=tmp_path).stdout
    assert f"  ! deny by {write['decided_by']}" in out and "  ✗ " in out
    assert '  → Read {"file_path": "a.py"}' in out and "  ← " in out and "[turn 2] end_turn" in out
    assert "trajectory: tool_use → end_turn" in out

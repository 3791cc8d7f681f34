"""The small-model profile's mechanisms, each driven through the loop against the scripted server."""

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from drivetrain import Agent
from drivetrain.control.hooks import Hooks
from drivetrain.loop.nodes import Proceed
from drivetrain.loop.step import FINAL_ASK
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.small.checks import WorkChecks
from drivetrain.small.checks_work import places
from drivetrain.small.codeact import (
    CodeActionModel,
    denied_programs,
    does_nothing,
    grammar,
    parse_reply,
    render_assistant,
    to_block,
    to_command,
)
from drivetrain.small.profile import FULL, SMALL, equip, is_small, select_profile
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from drivetrain.tools import builtin_tools


class Recording:
    """A real model (over HTTP) whose requests are kept: what the loop asked for, grammar fields included."""

    def __init__(self, inner):
        self.inner, self.name, self.requests = inner, inner.name, []

    async def respond(self, request):
        self.requests.append(request)
        return await self.inner.respond(request)


def anthropic(server):
    return AnthropicModel.from_env(
        "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, backoff=0.01
    )


def small_agent(server, tmp_path, profile=SMALL, codeact=True, record=False, **kw):
    """The library's small agent: the profile equips it when a run starts. ``record``: the loop's own requests are
    kept (the recorder wraps the code-block model, which the profile then does not wrap again)."""
    profile = replace(profile, codeact=codeact)
    model = anthropic(server)
    if record:
        model = Recording(CodeActionModel(model, tmp_path) if codeact else model)
    return Agent(model=model, tools=builtin_tools(), cwd=tmp_path, profile=profile, strict=True, **kw)


def tool_uses(result):
    """The run's tool calls, in order."""
    return [b for m in result.history for b in m.content if getattr(b, "type", "") == "tool_use"]


def texts(body):
    """Each message of a request body as one string."""
    out = []
    for m in body["messages"]:
        content = m["content"]
        out.append(
            content
            if isinstance(content, str)
            else "\n".join(b.get("text", "") or json.dumps(b.get("input", b.get("content", ""))) for b in content)
        )
    return out


# ---------------------------------------------------------------- code as action


async def test_a_code_block_runs_as_a_bash_call_and_the_model_sees_text(tmp_path):
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    steps = [
        reply("Count the lines.\n```bash\nwc -l < a.txt\n```"),
        reply("Say it with python.\n```python\nprint(len(open('a.txt').read().splitlines()) * 10)\n```"),
        reply("DONE: a.txt has 2 lines."),
    ]
    with ScriptedServer(steps) as server:
        result = await small_agent(server, tmp_path, profile=SMALL.without("checks")).run("How many lines in a.txt?")
    assert (result.subtype, result.result) == ("success", "a.txt has 2 lines.")
    uses = tool_uses(result)
    assert [u.name for u in uses] == ["Bash", "Bash"]
    assert uses[0].input == {"command": "wc -l < a.txt"}
    assert uses[1].input["command"].startswith("python3 - <<'PY'\n")
    bodies = [r.body for r in server.requests]
    assert all("tools" not in b for b in bodies)  # the model speaks in blocks, not JSON calls
    second, third = texts(bodies[1]), texts(bodies[2])
    assert second[1] == "Count the lines.\n```bash\nwc -l < a.txt\n```"  # exactly as written: KV reuse holds
    assert second[2].startswith("Output:\n2")
    assert third[4] == "Output:\n20"


async def test_a_python_block_headed_by_a_bare_file_name_changes_that_file(tmp_path):
    """The 1.5B, asked to fix report.py, ran "report.py" and then the fixed script (a NameError) eight times."""
    (tmp_path / "report.py").write_text("def total(rows)\n    return sum(rows)\n\n\nprint(total([1, 2]))\n")
    steps = [
        reply("Fix it.\n```python\nreport.py\ndef total(rows):\n    return sum(rows)\n```"),
        reply("DONE: added the colon."),
    ]
    with ScriptedServer(steps) as server:
        result = await small_agent(server, tmp_path, profile=SMALL.without("checks")).run("Fix report.py.")
    [use] = tool_uses(result)
    assert use.name == "Edit" and use.input["file_path"] == "report.py"
    assert (tmp_path / "report.py").read_text().startswith("def total(rows):\n    return sum(rows)\n")


async def test_a_python_block_holding_a_shell_command_runs_as_that_command(tmp_path):
    """The 1.5B ran "python3 report.py  # add this line …" as python (a SyntaxError) eleven times."""
    (tmp_path / "a.py").write_text("print('hi')\n")
    steps = [
        reply("Run it.\n```python\npython3 a.py  # run the script\n```"),
        reply("Print.\n```python\nprint(2)\n```"),
        reply("DONE: it prints hi."),
    ]
    with ScriptedServer(steps) as server:
        result = await small_agent(server, tmp_path, profile=SMALL.without("checks")).run("What does a.py print?")
    uses = tool_uses(result)
    assert uses[0].input == {"command": "python3 a.py  # run the script"}
    assert uses[1].input == {"command": to_command("python", "print(2)")}  # python stays python
    assert texts(server.requests[1].body)[2].startswith("Output:\nhi")


async def test_an_answer_ends_where_the_model_makes_up_the_next_turn(tmp_path):
    """The 1.5B went on after its answer: a made-up "User:" turn, its answer again and again, a code block. The
    answer is what came before; it is not read as calls described in prose (no nudge), and the run ends."""
    steps = [
        reply(
            "DONE: Counted 271 lines; wrote 271 to lines.txt.\n\nUser: Create a new file\nAssistant: ```bash\nls\n```"
        )
    ]
    with ScriptedServer(steps) as server:
        result = await small_agent(server, tmp_path, profile=SMALL.without("checks")).run("How many lines?")
    assert (result.subtype, result.result) == ("success", "Counted 271 lines; wrote 271 to lines.txt.")
    assert len(server.requests) == 1
    assert server.requests[0].body["stop_sequences"] == ["\nUser:", "\nAssistant:"]
    assert (
        parse_reply("DONE: It is 1198. I wrote it. Done: It is 1198. I wrote it. Done: It")[0]
        == "It is 1198. I wrote it."
    )
    assert parse_reply("DONE: 4 files\n```python\n# placeholder\n```")[0] == "4 files"
    kept = 'DONE: Fixed (checked: `python3 greet.py Ann` prints "Hello, Ann!"). Done: see greet.py'
    assert parse_reply(kept)[0] == 'Fixed (checked: `python3 greet.py Ann` prints "Hello, Ann!").'


async def test_a_block_naming_a_file_is_an_edit_of_it_and_reads_back_as_the_block(tmp_path):
    (tmp_path / "acc.py").write_text(
        "import sys\n\n\ndef largest(xs):\n    return min(xs)\n\n\nprint(largest([1, 3]))\n"
    )
    steps = [
        reply("Fix largest.\n```python acc.py\ndef largest(xs):\n    return max(xs)\n```"),
        reply("Create the notes.\n```text notes.txt\nfixed\n```"),
        reply("Create helpers.py.\n```python\n# helpers.py\ndef twice(x):\n    return 2 * x\n```"),
        reply("Run a check.\n```python\n# check\nprint(1)\n```"),
        reply("Write it.\n```text total.txt\necho 18 > total.txt\n```"),
        reply("DONE: largest now returns the maximum."),
    ]
    with ScriptedServer(steps) as server:
        result = await small_agent(server, tmp_path, profile=SMALL.without("checks")).run("Fix largest in acc.py.")
    assert result.subtype == "success"
    uses = tool_uses(result)
    assert [u.name for u in uses] == ["Edit", "Write", "Write", "Bash", "Bash"]  # ordinary calls, permissions as usual
    assert uses[-1].input == {"command": "echo 18 > total.txt"}  # a block holding the command that writes it: run
    assert uses[0].input == {
        "file_path": "acc.py",
        "old_string": "def largest(xs):\n    return min(xs)",
        "new_string": "def largest(xs):\n    return max(xs)",
    }
    assert (tmp_path / "acc.py").read_text().count("max(xs)") == 1 and (tmp_path / "notes.txt").read_text() == "fixed\n"
    assert (tmp_path / "helpers.py").read_text() == "def twice(x):\n    return 2 * x\n"  # headed "# helpers.py"
    second = texts(server.requests[1].body)
    assert second[1] == "Fix largest.\n```python acc.py\ndef largest(xs):\n    return max(xs)\n```"
    assert second[2] == "Changed acc.py (- old line, + new line):\n-   5|     return min(xs)\n+   5|     return max(xs)"


async def test_a_file_block_that_changes_nothing_says_so_in_words_about_the_block(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    steps = [reply("Fix.\n```python a.py\nx = 1\n```"), reply("DONE: fixed")]
    with ScriptedServer(steps) as server:
        await small_agent(server, tmp_path, profile=SMALL.without("checks")).run("Fix a.py.")
    assert texts(server.requests[1].body)[2] == (
        "Error:\nThe file already holds exactly this block: nothing changed. Write the lines as they must be."
    )


async def test_a_second_block_the_file_already_holds_ends_the_turn_with_it(tmp_path):
    """Its file shown again ("DONE, the file is as follows:"), ten turns of blocks that changed nothing; the second
    one is the model's answer, so the end-of-turn checks can say what is wrong."""
    (tmp_path / "a.ini").write_text("[a]\nx = 1\n")
    steps = [reply("Done:\n```ini a.ini\n[a]\nx = 1\n```"), reply("Done, the file is:\n```ini a.ini\nx = 1\n```")]
    with ScriptedServer(steps) as server:
        result = await small_agent(server, tmp_path, profile=SMALL.without("checks")).run("Set x in a.ini.")
    assert result.subtype == "success" and [u.name for u in tool_uses(result)] == ["Edit"]  # the first: an Edit
    assert result.result == "Done, the file is:\n```ini a.ini\nx = 1\n```"


def test_blocks_and_commands_convert_both_ways():
    for lang, code in [("bash", "ls -la\necho hi"), ("python", "import os\nprint(os.getcwd())")]:
        assert to_block(to_command(lang, code)) == (lang, code)
    raw = "List the files.\n```bash\nls\n```"
    text, block = parse_reply(raw)
    assert (text, block) == ("List the files.", ("bash", "ls", None))
    from drivetrain.messages import Message, TextBlock, ToolUseBlock

    msg = Message("assistant", (TextBlock(text), ToolUseBlock("t1", "Bash", {"command": to_command(*block[:2])})))
    assert render_assistant(msg) == raw
    assert parse_reply("DONE: all good") == ("all good", None)
    assert parse_reply("```python\nx = 1 \t\nprint(x)  \r\n```")[1] == ("python", "x = 1\nprint(x)", None)
    assert parse_reply("Fix it.\n```python greet.py\ndef f():\n    pass\n```") == (
        "Fix it.",
        ("python", "def f():\n    pass", "greet.py"),
    )
    assert parse_reply("```json\n{}\n```\n```bash\nls\n```")[1] == ("bash", "ls", None)  # json without a file: text
    from drivetrain.messages import ToolResultBlock
    from drivetrain.small.codeact import render_result

    assert render_result(ToolResultBlock("t1", "(no output)")) == "(no output, exit code 0)"
    note = "(no output)\n\nCreated t.txt (1 line):\n   1| 2"
    assert render_result(ToolResultBlock("t1", note)) == "(no output, exit code 0)\n\nCreated t.txt (1 line):\n   1| 2"


def test_the_grammar_leaves_out_only_the_echoed_starts():
    g = grammar("auto", echoed=["total 12 files listed"])
    assert "root ::= act | done" in g
    assert grammar("any").startswith("root ::= act\n") and grammar("none").startswith("root ::= done\n")
    # the trie over the starts a body may not have: "sudo", "vi ", "apt …", and the echoed line
    assert re.search(r'bash-body ::= .*"t" bash-body-\d', g) and not re.search(
        r'python-body ::= .*"s" python-body-\d', g
    )
    with pytest.raises(ValueError):
        SMALL.without("nonsense")


# ---------------------------------------------------------------- tool choice


async def test_the_full_profile_sends_no_tool_choice_and_ends_on_narration(tmp_path):
    with ScriptedServer([reply("```bash\nls\n```")]) as server:
        model = anthropic(server)
        result = await Agent(model=model, tools=builtin_tools(), cwd=tmp_path, strict=True).run("run ls")
    assert result.subtype == "success" and "tool_choice" not in server.requests[0].body


# ---------------------------------------------------------------- loops broken


async def test_a_repeated_call_is_collapsed_refused_and_ends_in_an_answer(tmp_path):
    same = "Show it.\n```bash\necho same\n```"
    steps = [reply(same)] * 5 + [reply("DONE: it prints same")]
    with ScriptedServer(steps) as server:
        agent = small_agent(server, tmp_path, profile=SMALL.without("checks"), record=True)
        result = await agent.run("what does echo print?")
    reqs = agent.model.requests  # the loop's requests, before the code-block translation
    # two copies of the same round in the history, one in what the model sees
    seen = texts(server.requests[2].body)
    assert sum(t == same for t in seen) == 1 and seen[-1] == "Output:\nsame" and len(seen) == 3
    # the 4th and 5th identical calls are refused: two strikes, and the run asks for the answer without tools
    assert "Not run" in texts(server.requests[4].body)[-1]
    assert reqs[-1].tool_choice == "none" and FINAL_ASK["stuck"] in texts(server.requests[-1].body)[-1]
    assert (result.subtype, result.result) == ("error_loop_detected", "it prints same")


async def test_a_stuck_models_answer_is_checked_and_can_be_sent_back_to_work(tmp_path):
    """Stuck on a refused call, the model is asked for its answer; the checks see what is left and send it back to
    work, which gets it out of its rut: the run ends in success, not error_loop_detected."""
    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    steps = [reply("Count.\n```bash\nwc -l a.py\n```")] * 5 + [
        reply("DONE: a.py has 2 lines."),  # stuck: the answer without tools, and total.txt is missing
        reply("Write it.\n```text total.txt\n2\n```"),
        reply("DONE: a.py has 2 lines; I wrote 2 to total.txt."),
    ]
    with ScriptedServer(steps) as server:
        agent = small_agent(server, tmp_path, record=True)
        result = await agent.run("Count the lines of a.py, write the total to total.txt and report it.")
    reqs = agent.model.requests
    assert reqs[5].tool_choice == "none" and FINAL_ASK["stuck"] in texts(server.requests[5].body)[-1]
    assert reqs[6].tool_choice is None  # back to work: tools again
    assert "The task asks for total.txt, but it does not exist" in texts(server.requests[6].body)[-1]
    assert (result.subtype, result.result) == ("success", "a.py has 2 lines; I wrote 2 to total.txt.")
    assert (tmp_path / "total.txt").read_text() == "2\n"


async def test_the_last_turn_under_the_cap_asks_for_the_answer_without_tools(tmp_path):
    steps = [reply("One.\n```bash\necho 1\n```"), reply("Two.\n```bash\necho 2\n```"), reply("DONE: got 1 and 2")]
    with ScriptedServer(steps) as server:
        agent = small_agent(server, tmp_path, profile=SMALL.without("checks"), record=True, max_turns=3)
        result = await agent.run("echo things")
    assert [r.tool_choice for r in agent.model.requests] == [None, None, "none"]
    assert FINAL_ASK["turn_limit"] in texts(server.requests[2].body)[-1]
    assert (result.subtype, result.result, result.num_turns) == ("error_max_turns", "got 1 and 2", 3)


async def test_an_empty_answer_is_asked_for_again(tmp_path):
    with ScriptedServer([respond([tool_call("Bash", {"command": "true"})]), reply(""), reply("nothing to do")]) as s:
        agent = small_agent(s, tmp_path, codeact=False, profile=SMALL.without("checks"))
        result = await agent.run("do nothing")
    assert result.result == "nothing to do" and FINAL_ASK["empty"] in texts(s.requests[2].body)[-1]


# ---------------------------------------------------------------- checks before stopping


async def test_an_empty_output_gets_the_code_the_model_only_ran(tmp_path):
    """The 1.5B created utils.py with touch, then "wrote" it by running a python block that only defined the function:
    the file stayed empty, told twice. The block it ran is the file's content: the send-back shows the block that
    writes it."""
    steps = [
        reply("Create it.\n```bash\ntouch utils.py\n```"),
        reply("DONE: utils.py created."),
        reply("Write it.\n```python\ndef dedupe(items):\n    return list(dict.fromkeys(items))\n```"),
        reply("DONE: utils.py created."),
        reply("Write it.\n```python utils.py\ndef dedupe(items):\n    return list(dict.fromkeys(items))\n```"),
        reply("DONE: utils.py defines dedupe."),
    ]
    with ScriptedServer(steps) as server:
        agent = small_agent(server, tmp_path, record=True)
        result = await agent.run("Create utils.py with a function dedupe(items) that drops duplicates.")
    assert result.result == "utils.py defines dedupe."
    code = "def dedupe(items):\n    return list(dict.fromkeys(items))"
    assert texts(server.requests[2].body)[-1].endswith("utils.py is empty. Write the result the task asks for into it.")
    assert texts(server.requests[4].body)[-1].endswith(
        "utils.py is empty. Write the result the task asks for into it. Your last python block only defined it, and "
        f"wrote no file. This writes it:\n```python utils.py\n{code}\n```"
    )
    assert (tmp_path / "utils.py").read_text() == code + "\n"


async def test_a_missing_py_output_gets_the_code_written_to_another_new_file(tmp_path):
    checks = WorkChecks(tmp_path, file_blocks=True)
    await checks.on_prompt({"prompt": "Create utils.py with a function digit_sum(n) that sums the digits of n."})
    (tmp_path / "utils").mkdir()
    code = "def digit_sum(n): return sum(int(d) for d in str(n))"
    (tmp_path / "utils" / "digit_sum.py").write_text(code + "\n")
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": f"mkdir -p utils\necho '{code}' > utils/digit_sum.py"},
            "tool_response": {},
        }
    )

    class Ctx:
        answer = "utils/digit_sum.py:1 line"

        history = []

    sent = await checks.run(Ctx())
    assert sent.text.endswith(
        f"You wrote the code to utils/digit_sum.py, not utils.py. This writes it:\n```python utils.py\n{code}\n```"
    )
    (tmp_path / "utils" / "more.py").write_text("x = 1\n")
    await checks.on_tool({"tool_name": "Bash", "tool_input": {"command": "true"}, "tool_response": {}})
    assert "This writes it" not in (await checks.run(Ctx())).text  # two new files: which one is meant is not known


async def test_checks_send_back_a_missing_output_file_then_a_wrong_value_at_most_twice(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    steps = [
        reply("Count.\n```bash\nwc -l a.py\n```"),
        reply("DONE: the total is 2"),  # total.txt never written
        reply("Write it.\n```bash\necho 3 > total.txt\n```"),
        reply("DONE: the total is 2"),  # the file says 3
        reply("Write it again.\n```bash\necho 4 > total.txt\n```"),
        reply("DONE: the total is 2"),
    ]  # still wrong, but the checks only refuse twice
    with ScriptedServer(steps) as server:
        agent = small_agent(server, tmp_path, record=True)
        result = await agent.run("Count the lines of the .py files and write the total to total.txt")
    assert [r.tool_choice for r in agent.model.requests] == [None] * 6  # sent back to work, with tools
    checks = WorkChecks(tmp_path, file_blocks=True)  # no value said yet: the model may first compute it
    await checks.on_prompt({"prompt": "Sum the units column of a.csv and write the sum to sum.txt."})

    class Ctx:
        answer = "I looked at a.csv."

        history = []

    assert "this writes it" not in (await checks.run(Ctx())).text
    second_try, third_try = texts(server.requests[2].body)[-1], texts(server.requests[4].body)[-1]
    assert "total.txt, but it does not exist" in second_try
    assert second_try.endswith("If your answer is right, this writes it:\n```text total.txt\n2\n```")  # as a file block
    assert "You wrote 3 to total.txt, but your answer says 2" in third_try
    assert result.subtype == "success" and len(server.requests) == 6


async def test_checks_rerun_the_tests_the_model_ran_and_flag_unread_rewrites(tmp_path):
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (tmp_path / "test_calc.py").write_text("from calc import add\nassert add(2, 2) == 4, 'add is wrong'\n")
    steps = [
        reply("Run the test.\n```bash\npython3 test_calc.py\n```"),
        reply("Rewrite calc.py.\n```bash\necho 'def add(a, b): return a * b' > calc.py\n```"),
        reply("DONE: fixed, the tests pass"),
        reply("Fix for real.\n```bash\necho 'def add(a, b): return a + b' > calc.py\n```"),
        reply("DONE: fixed calc.py"),
    ]
    with ScriptedServer(steps) as server:
        # (calc.py not shown with the task: a file named in it would count as seen)
        result = await small_agent(server, tmp_path, profile=SMALL.without("show")).run(
            "The test fails. Fix the bug in calc.py."
        )
    feedback = texts(server.requests[3].body)[-1]
    assert "You rewrote calc.py without looking at its content first" in feedback
    assert "`python3 test_calc.py` fails now" not in feedback  # 2*2 == 4: the test passes with the wrong fix
    assert result.result == "fixed calc.py"
    (tmp_path / "settings.ini").write_text("[a]\nx = 1\ny = 2\nz = 3\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "make test_calc.py pass"})  # (a test file the task names, in any language)
    (tmp_path / "settings.ini").write_text("[a]\nx = 1\ny = 5\nz = 3\n")  # a targeted edit invents nothing
    await checks.on_tool({"tool_name": "Bash", "tool_input": {"command": "sed -i 's/y = 2/y = 5/' settings.ini"}})
    assert await checks.failures("") == [
        "The task is about tests, but you have not run them. Run them and make sure they pass."
    ]


async def test_showing_a_test_file_is_not_running_the_tests(tmp_path):
    (tmp_path / "pricing.py").write_text("def to_f(c):\n    return c * 9 / 5 - 32\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_pricing.py").write_text(
        "from pricing import to_f\n\n\ndef test_f():\n    assert to_f(0) == 32\n"
    )
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "pytest reports failures in tests/test_pricing.py. Fix pricing.py?"})
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "cat -n tests/test_pricing.py"},
            "tool_response": {"content": "1\tfrom pricing import to_f"},
        }
    )
    assert (
        "The task is about tests, but you have not run them. Run them (`pytest`) and make sure they pass."
        in await checks.failures("Nothing to change.")
    )


async def test_tests_whose_last_run_failed_go_back_when_the_run_changed_nothing(tmp_path):
    """Asked (in Chinese) to fix accounts.py, the 1.5B ran the failing test, changed nothing, and answered that the
    tests passed: with nothing changed, the failing run was not looked at again."""
    (tmp_path / "accounts.py").write_text("def clamp(x, lo, hi):\n    return max(lo, min(x, lo))\n")
    (tmp_path / "test_accounts.py").write_text("from accounts import clamp\nassert clamp(5, 0, 10) == 5\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "test_accounts.py 跑不过，帮我看看 accounts.py 哪里写错了并修掉（别改测试）。"})
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "python3 test_accounts.py"},
            "tool_response": {"content": "AssertionError\nExit code: 1", "is_error": True},
        }
    )
    [failure] = await checks.failures("The tests passed.")
    assert (
        failure.startswith(
            "The test command `python3 test_accounts.py` still fails (exit code 1), and this run changed no file:"
        )
        and "AssertionError" in failure
    )
    # once they pass (fixed by hand here), the tests are not what is said
    (tmp_path / "accounts.py").write_text("def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n")
    assert not any("test" in f for f in await checks.failures("Fixed clamp in accounts.py: it used lo for hi."))


async def test_an_unquoted_runner_takes_paths_and_options_not_the_prose_after_it(tmp_path):
    """ "The pytest suite fails. Fix …" named the command `pytest suite fails. Fix alerts.py …`, which the model ran."""
    (tmp_path / "alerts.py").write_text("def is_even(n):\n    return n % 2 == 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_alerts.py").write_text(
        "from alerts import is_even\n\n\ndef test_even():\n    assert is_even(2)\n"
    )
    checks = WorkChecks(tmp_path)
    await checks.on_prompt(
        {
            "prompt": "The pytest suite fails. Fix alerts.py so that the tests pass; do not change "
            "the tests. Or run pytest tests/test_alerts.py::test_even -q for one."
        }
    )
    assert (await checks.facts("")).named_commands == ["pytest", "pytest tests/test_alerts.py::test_even -q"]
    assert await checks.failures("") == [
        "The task is about tests, but you have not run them. Run them (`pytest`) and make sure they pass."
    ]


async def test_a_named_command_never_run_is_sent_back(tmp_path):
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (tmp_path / "test_calc.py").write_text("from calc import add\nassert add(2, 2) == 4\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "python3 test_calc.py fails. Fix the bug in calc.py so the test passes."})

    class Ctx:
        answer = "Fixed."

        history = []

    sent = await checks.run(Ctx())
    assert "Run them (`python3 test_calc.py`) and make sure they pass." in sent.text
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a * b - 1\n")  # a change, still wrong
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "python3 test_calc.py 2>&1"},
            "tool_response": {"content": "AssertionError", "is_error": True},
        }
    )
    sent = await checks.run(Ctx())
    assert "`python3 test_calc.py 2>&1` fails now" in sent.text  # ran: what to change is its call


async def test_an_output_named_in_a_chinese_task_is_checked(tmp_path):
    """The file name is ASCII whatever the language around it; nothing of the check reads the task's words."""
    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "统计a.py的行数，把结果写入total.txt，并告诉我。"})
    [missing] = await checks.failures("a.py 有 2 行，我已经写入 total.txt。")
    assert missing.startswith("The task asks for total.txt, but it does not exist.")
    (tmp_path / "total.txt").write_text("3\n")
    [wrong] = await checks.failures("a.py 有 2 行。")
    assert wrong.startswith("You wrote 3 to total.txt, but your answer says 2")
    await checks.on_prompt({"prompt": "src/utils.py 里 parse 函数在哪一行？"})  # named by its base name: no output
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "utils.py").write_text("def parse():\n    pass\n")
    await checks.on_prompt({"prompt": "utils.py 里 parse 函数在哪一行？"})
    assert await checks.failures("src/utils.py:1") == []


async def test_a_check_the_answer_claims_was_run(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "How many lines do the .py files have?"})
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "wc -l *.py"},
            "tool_response": {"content": "Permission denied: `wc -l *.py`", "is_error": True},
        }
    )
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "cd . && python3 count.py | tail -1"},
            "tool_response": {"content": "7"},
        }
    )
    [claim] = await checks.failures("7 lines (checked: `wc -l *.py` prints 7).")
    assert claim.startswith("Your answer says what `wc -l *.py` showed, but you did not run wc (or it failed).")
    # what the policy denied (read from the history by the node: a denied call never reaches PostToolUse)
    [claim] = await checks.failures("7 lines (checked: `wc -l *.py` prints 7).", denied=frozenset({"wc"}))
    assert claim.startswith(
        "Your answer says what `wc -l *.py` showed, but wc is denied here and never ran. Do not claim it"
    )  # (told to run it, the 1.5B tried "wc," five times)
    [claim] = await checks.failures("7 lines (checked: `grep -c . *.py` prints 7).")
    assert claim.startswith("Your answer says what `grep -c . *.py` showed, but you did not run grep (or it failed).")
    assert await checks.failures("7 lines (checked: `python3 count.py` prints 7, `tail -1` gives 7).") == []
    [unseen] = await checks.failures("7 lines; `total.txt` says 7.")  # not a command, and a file nothing showed
    assert unseen.startswith("Your answer reports total.txt, but no command printed it and no file holds it.")


async def test_a_claimed_output_is_what_the_command_printed(tmp_path):
    """In any language: a command the answer quotes, and the number it says the command gave."""
    (tmp_path / "f.py").write_text("import sys\n\ndef f(n):\n    return n * 2 - 2\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "f.py 里的 f(5) 返回多少？"})
    await checks.on_tool(
        {"tool_name": "Bash", "tool_input": {"command": "python3 f.py 5"}, "tool_response": {"content": "(no output)"}}
    )
    [call, claim] = await checks.failures("f(5) 返回 8（检查：`python3 f.py 5` 返回 8）。")
    assert claim.startswith("Your answer says `python3 f.py 5` gave 8, but it printed '(no output)'.")
    # `python3 f.py 5` never called f: the harness made the call, so the value is seen now, not the claim
    assert call.startswith("The task writes out the call f(5), and no command of yours made it. Run here, it gives")
    assert call.endswith("Exit code 0; it printed:\n8\nUse what it printed.")
    [claim] = await checks.failures("f(5) 返回 8（检查：`python3 f.py 5` 返回 8）。")
    assert claim.startswith("Your answer says `python3 f.py 5` gave 8, but it printed '(no output)'.")
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "python3 -c 'from f import f; print(f(5))'"},
            "tool_response": {"content": "8"},
        }
    )
    assert await checks.failures("f(5) 返回 8（`python3 -c 'from f import f; print(f(5))'` 打印 8）。") == []
    await checks.on_tool(
        {"tool_name": "Bash", "tool_input": {"command": "du -sh ."}, "tool_response": {"content": "56K\t."}}
    )
    assert await checks.failures("f(5) 返回 8；`du -sh .` 显示 56K。") == []  # a number with its unit is the number
    assert (await checks.failures("f(5) 返回 8；`du -sh .` 显示 5。"))[0].startswith(
        "Your answer says `du -sh .` gave 5"
    )


async def test_a_sum_in_the_answer_is_right_and_adds_no_total_to_its_parts(tmp_path):
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "Count the lines of the .py files and report the total."})
    [twice] = await checks.failures("The total is 20 + 5 + 25 = 50.")  # wc's total line added to its parts
    assert twice == (
        "Your answer adds 20 + 5 + 25 = 50, but 25 is already the sum of the other numbers (a total line "
        "counted as a part), so the total is 25. Fix what you wrote and your answer."
    )
    [wrong] = await checks.failures("The total is 12.5 + 4 = 17.")
    assert wrong == "Your answer says 12.5 + 4 = 17, but that sum is 16.5. Fix what you wrote and your answer."
    assert await checks.failures("The total is 20 + 5 = 25; 5 + 5 = 10.") == []


async def test_a_failed_conversion_of_a_csv_column_name_is_called_a_header(tmp_path):
    (tmp_path / "orders.csv").write_text("id,name,amount\n1,a,2.50\n2,b,3\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "Add up the amount column of orders.csv."})
    command = "python3 -c \"import csv; print(sum(float(r[2]) for r in csv.reader(open('orders.csv'))))\""
    error = "Traceback (most recent call last):\nValueError: could not convert string to float: 'amount'\nExit code: 1"
    out = await checks.on_tool(
        {"tool_name": "Bash", "tool_input": {"command": command}, "tool_response": {"content": error, "is_error": True}}
    )
    assert out["hookSpecificOutput"]["additionalContext"] == (
        "Note: 'amount' is a column name: line 1 of orders.csv is its header (id,name,amount). Skip that line "
        "(next(reader) first, or csv.DictReader), then convert the values."
    )
    out = await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": command},
            "tool_response": {"content": "ValueError: could not convert string to float: '2,50'", "is_error": True},
        }
    )
    assert out is None  # a value that is no column name: nothing to say


async def test_an_indentation_error_shows_the_lines_with_their_leading_spaces(tmp_path):
    (tmp_path / "stats.py").write_text(
        "def total(rows):\n    result = 0\n    for v in rows:\n        result += v\n"
        "      return result\n\n\nprint(total([1]))\n"
    )
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "python3 stats.py fails with a syntax error. Fix it so the script runs."})
    shown = (
        "Note: stats.py around line 5, each leading space shown as ·:\n   1| def total(rows):\n   2| ····result = 0"
        "\n   3| ····for v in rows:\n   4| ········result += v\n   5| ······return result\n   6| "
    )
    error = (
        '  File "stats.py", line 5\n    return result\n                 ^\nIndentationError: unindent does not match '
        "any outer indentation level\nExit code: 1"
    )
    out = await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "python3 stats.py"},
            "tool_response": {"content": error, "is_error": True},
        }
    )
    assert out["hookSpecificOutput"]["additionalContext"] == shown
    (tmp_path / "stats.py").write_text((tmp_path / "stats.py").read_text() + "\n")  # a change that fixes nothing
    failures = await checks.failures("Fixed.")  # run again by the check: the same lines come with its output
    assert any(f.startswith("`python3 stats.py` fails now (exit code 1):") and shown in f for f in failures)


async def test_lines_asked_without_duplicates_keeping_their_order_are_not_sent_to_sort(tmp_path):
    """Which order a task wants is in its words; the checks do not guess it (sort -u reordered what was asked kept)."""
    (tmp_path / "hosts.txt").write_text("b.internal\na.internal\nb.internal\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt(
        {"prompt": "Write the lines of hosts.txt to unique_hosts.txt with duplicates removed, keeping their order."}
    )
    (tmp_path / "unique_hosts.txt").write_text("b.internal\na.internal\n")

    class Ctx:
        answer = "Done: 2 lines in unique_hosts.txt."

        history = []

    assert await checks.failures("Done: 2 lines in unique_hosts.txt.") == []
    assert await checks.run(Ctx()) == Proceed()
    (tmp_path / "unique_hosts.txt").write_text("b.internal\na.internal\nb.internal\n")
    # a duplicate left: whatever is said, no sort is proposed
    assert not any("sort" in f for f in await checks.failures("Done: 2 lines in unique_hosts.txt."))


async def test_placeholders_in_written_files_are_sent_back(tmp_path):
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "write the sum to sum.txt"})
    (tmp_path / "sum.txt").write_text("Total: <total>\n")
    assert any("placeholder '<total>'" in f for f in await checks.failures("done"))
    (tmp_path / "sum.txt").write_text("12\n")
    assert await checks.failures("the sum is 12") == []
    (tmp_path / "sum.txt").write_text("12\n")
    (tmp_path / "count.py").write_text('n = 3\nprint(f"{n} lines")\nprint("<b>{total}</b>")\n')  # code, not a value
    assert await checks.failures("the sum is 12") == []
    (tmp_path / "old.py").write_text("def g():\n    pass  # your code here\n")
    await checks.on_prompt({"prompt": "Add a function f to orders.py"})
    (tmp_path / "orders.py").write_text("def f(rows):\n    # Your implementation here\n    pass\n")
    (tmp_path / "old.py").write_text("def g():\n    pass  # your code here\n\n\nX = 1\n")
    assert await checks.failures("done") == [
        "In orders.py, f has no body (a stub) instead of real code. Write the code, or remove what you added if the "
        "task does not need it."
    ]  # read from the code, in any language (old.py's stub was there before the run)
    (tmp_path / "orders.py").write_text("def f(rows):\n    # 在这里实现\n    raise NotImplementedError\n")
    assert "f has no body" in (await checks.failures("done"))[0]
    (tmp_path / "orders.py").write_text("def f(rows):\n    # Your implementation here\n    return len(rows)\n")
    assert not any("no body" in f for f in await checks.failures("done"))  # a comment's words are not a stub
    await checks.on_prompt({"prompt": "把总数写入 总数.txt"})
    (tmp_path / "总数.txt").write_text("总数：<总数>\n")
    assert "placeholder '<总数>'" in (await checks.failures("好了"))[0]


# ---------------------------------------------------------------- profile selection


def test_profile_selection_by_provider_and_model_name():
    assert is_small("local/qwen2.5-coder-1.5b", "local")
    assert is_small("qwen2.5-coder:1.5b", "openai") and is_small("Llama-3.2-3B-Instruct", "openai")
    assert not is_small("qwen2.5-coder:32b", "openai") and not is_small("gpt-4o-mini", "openai")
    assert not is_small("claude-haiku-4-5", "anthropic")
    assert select_profile("x", "anthropic") is FULL and select_profile("x", "anthropic", "small") is SMALL
    assert select_profile("local/q", "local", "full") is FULL
    ablated = select_profile("local/q", "local", env={"DRIVETRAIN_ABLATE": "checks, collapse"})
    assert not ablated.checks and not ablated.collapse and ablated.codeact


def test_cli_profile_flag_and_automatic_choice(tmp_path):
    exe = Path(sys.executable).parent / "drivetrain"
    for flag, expect_choice in ((["--profile", "small", "--attempts", "1"], True), ([], False)):
        with ScriptedServer(
            [reply("Look.\n```bash\necho hi\n```") if flag else reply("hi"), *([reply("DONE: hi")] if flag else [])]
        ) as server:
            env = {
                "PATH": "/usr/bin:/bin",
                "HOME": str(tmp_path),
                "DRIVETRAIN_HOME": str(tmp_path / "home"),
                "ANTHROPIC_BASE_URL": server.url,
                "ANTHROPIC_API_KEY": "k",
            }
            proc = subprocess.run(
                [
                    str(exe),
                    "-p",
                    "say hi",
                    "--output-format",
                    "json",
                    "--permission-mode",
                    "bypassPermissions",
                    "--verbose",
                    *flag,
                ],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert proc.returncode == 0, proc.stderr
            first = server.requests[0].body
        assert json.loads(proc.stdout)["result"] == "hi"
        assert ('  " Look.' in proc.stderr) == expect_choice  # the turn log shows the plan line
        assert ("tools" not in first) == expect_choice  # small: code blocks, no JSON tools
        assert ("working folder" in str(first.get("system"))) == expect_choice


async def test_the_prefix_cache_aid_reaches_the_model_in_each_request_and_changes_no_object_passed_in(tmp_path):
    from drivetrain.models.local import LocalModel

    local = LocalModel("small")  # not loaded: equipping must neither load it nor change it
    agent = Agent(model=local, tools=builtin_tools(), cwd=tmp_path, profile=SMALL)
    tools, nodes = list(agent.tools), list(agent.nodes)
    outfit = SMALL.equip(agent)
    assert isinstance(outfit.model, CodeActionModel) and outfit.model.inner is local
    assert local.prefix_cache is False and agent.model is local and agent.tools == tools and agent.nodes == nodes
    for profile, expected in ((SMALL, True), (SMALL.without("prefixcache"), False)):
        with ScriptedServer([reply("DONE: hi")]) as server:
            agent = small_agent(server, tmp_path, profile=profile, record=True)
            await agent.run("say hi")
        assert [r.keep_prefix for r in agent.model.requests] == [expected]


def test_long_outputs_are_clipped_and_old_rounds_stubbed_a_few_rounds_at_a_time():
    from drivetrain.loop.context import shorten_outputs
    from drivetrain.messages import Message, ToolResultBlock, ToolUseBlock

    def history(n, size):
        out = [Message.user("go")]
        for k in range(n):
            out += [
                Message("assistant", (ToolUseBlock(f"t{k}", "Bash", {"command": f"c{k}"}),)),
                Message("user", (ToolResultBlock(f"t{k}", f"r{k}:" + "x" * size),)),
            ]
        return out

    one = shorten_outputs(history(1, 10_000))[2].content[0].text
    assert one.startswith("r0:") and "characters not shown" in one and len(one) < 3200
    short = history(3, 100)
    assert shorten_outputs(short) == short  # under the budget: nothing changes
    for rounds in (9, 10):  # ~17,000 and ~19,000 characters of results, 12,000 allowed
        view = shorten_outputs(history(rounds, 1900))
        stubs = [k for k in range(rounds) if "older output shortened" in view[2 + 2 * k].content[0].text]
        assert stubs == [0, 1, 2, 3]  # four rounds at once, and the cut stays put as a round is added


# ---------------------------------------------------------------- what a call changed


def test_describe_says_which_lines_changed_which_files_came_and_went_and_when_an_edit_changed_nothing():
    from drivetrain.small.changes import describe, looks_like_edit

    before = {"f.py": b"a = 1\nb = min(xs)\nc = 3\n", "old.txt": b"x\n"}
    after = {"f.py": b"a = 1\nb = max(xs)\nc = 3\n", "total.txt": b"18\n"}
    note = describe(before, after)
    assert "Changed f.py" in note and "-   2| b = min(xs)" in note and "+   2| b = max(xs)" in note
    assert "Created total.txt (1 line):\n   1| 18" in note and "Deleted old.txt." in note
    assert describe(before, before, "sed -i '4s/min/max/' f.py") == "No file changed."
    assert describe(before, before, "cat -n f.py") == ""  # a look changes nothing, and needs no note
    for edit in ("echo 3 > t.txt", "sed -i 's/a/b/' f", "python3 - <<'PY'\nopen('t', 'w').write('1')\nPY", "mv a b"):
        assert looks_like_edit(edit), edit
    for look in ("wc -l a.py 2>&1", "grep -c x f > /dev/null", "python3 - <<'PY'\nprint(open('a.txt').read())\nPY"):
        assert not looks_like_edit(look), look


async def test_the_model_sees_what_its_command_changed_and_that_a_wrong_edit_changed_nothing(tmp_path):
    (tmp_path / "shipping.py").write_text(
        "def parse(rows):\n    return rows\n\n\ndef largest(xs):\n    return min(xs)\n"
    )
    steps = [
        reply("Fix line 4.\n```bash\nsed -i '4s/min(xs)/max(xs)/' shipping.py\n```"),
        reply("Fix line 6.\n```bash\nsed -i '6s/min(xs)/max(xs)/' shipping.py\n```"),
        reply("DONE: fixed calc.py"),
    ]
    with ScriptedServer(steps) as server:
        await small_agent(server, tmp_path, profile=SMALL.without("checks")).run("Make largest return the largest.")
    assert texts(server.requests[1].body)[-1].endswith("No file changed.")
    assert "-   6|     return min(xs)\n+   6|     return max(xs)" in texts(server.requests[2].body)[-1]
    with ScriptedServer([reply("Fix.\n```bash\nsed -i 's/max/min/' shipping.py\n```"), reply("DONE: ok")]) as server:
        await small_agent(server, tmp_path, profile=SMALL.without("checks", "changes")).run("Undo it.")
    assert "Changed shipping.py" not in texts(server.requests[1].body)[-1]  # the aid switched off


async def test_a_python_block_redefining_a_files_function_changes_that_file(tmp_path):
    (tmp_path / "reports.py").write_text("def largest(xs):\n    return min(xs)\n")
    steps = [
        reply("Correct largest.\n```python\n# Corrected largest function\ndef largest(xs):\n    return max(xs)\n```"),
        reply("DONE: fixed calc.py"),
    ]
    with ScriptedServer(steps) as server:
        result = await small_agent(server, tmp_path, profile=SMALL.without("checks")).run("Fix largest.")
    [use] = tool_uses(result)
    assert use.name == "Edit" and use.input["file_path"] == "reports.py"
    assert (tmp_path / "reports.py").read_text() == "def largest(xs):\n    return max(xs)\n"
    assert "```python reports.py\ndef largest(xs):" in texts(server.requests[1].body)[-2]  # shown as what it was


# ---------------------------------------------------------------- checks of what the task names


async def test_a_rename_must_leave_no_old_name_behind(tmp_path):
    (tmp_path / "a.py").write_text("def compute_ticket():\n    return 1\n")
    (tmp_path / "b.py").write_text("from a import compute_ticket\nprint(compute_ticket())\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "把函数 compute_ticket 全部改名为 format_product。"})  # read from the run
    (tmp_path / "a.py").write_text("def format_product():\n    return 1\n")
    [failure] = await checks.failures("Renamed it.")
    assert failure.startswith(
        "You renamed compute_ticket to format_product, but compute_ticket still occurs at b.py:1, b.py:2."
    )
    assert "```bash\nperl -pi -e 's/\\bcompute_ticket\\b/format_product/g' b.py\n```" in failure
    (tmp_path / "b.py").write_text("from a import format_product\nprint(format_product())\n")
    assert await checks.failures("Renamed it in a.py and b.py.") == [  # only the language: the task is Chinese
        "The task is written in Chinese: write the answer in Chinese."
    ]
    assert await checks.failures("已在 a.py 和 b.py 里改名。") == []


async def test_a_rename_of_another_name_than_the_task_names_is_not_finished_for_it(tmp_path):
    """Asked to rename merge_note, the 1.5B renamed report to the new name; the check then forced the rest of it."""
    (tmp_path / "notify.py").write_text("def merge_note(x):\n    return x\n\n\ndef report(rows):\n    return rows\n")
    (tmp_path / "main.py").write_text("from notify import report\nprint(report([1]))\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "项目里的 merge_note 统一改名叫 summarize_order，保证 main.py 还能跑。"})
    (tmp_path / "main.py").write_text("from notify import summarize_order\nprint(report([1]))\n")
    failures = await checks.failures("改好了。")
    assert not any("still occurs" in f for f in failures)  # not finished for it, but said to be the wrong one:
    assert any(f.startswith("You renamed report to summarize_order, but the task does not name it") for f in failures)
    (tmp_path / "main.py").write_text("from notify import report\nprint(report([1]))\n")
    (tmp_path / "notify.py").write_text(
        "def summarize_order(x):\n    return x\n\n\ndef report(rows):\n    return rows\n"
    )
    (tmp_path / "main.py").write_text("from notify import report\nprint(report([1]))\nprint(merge_note(2))\n")
    [failure] = [f for f in await checks.failures("改好了。") if f.startswith("You renamed")]
    assert failure.startswith("You renamed merge_note to summarize_order, but merge_note still occurs at main.py:3")


async def test_a_half_done_rename_is_sent_back_with_the_command_that_finishes_it(tmp_path):
    (tmp_path / "a.py").write_text("def compute_ticket():\n    return 1\n")
    (tmp_path / "b.py").write_text("from a import compute_ticket\nprint(compute_ticket())\n")
    sed = "perl -pi -e 's/\\bcompute_ticket\\b/format_product/g' b.py"
    steps = [
        reply("Rename the definition.\n```bash\nsed -i 's/compute_ticket/format_product/' a.py\n```"),
        reply("DONE: renamed"),
        reply(f"Finish it.\n```bash\n{sed}\n```"),  # what the grammar allows, locally
        reply("DONE: renamed in a.py and b.py"),
    ]
    with ScriptedServer(steps) as server:
        agent = small_agent(server, tmp_path, record=True)
        result = await agent.run("Rename the function compute_ticket to format_product everywhere.")
    assert texts(server.requests[2].body)[-1].endswith(
        f"This changes every one of them:\n```bash\n{sed}\n```\nThen check again."
    )
    assert result.subtype == "success" and "compute_ticket" not in (tmp_path / "b.py").read_text()


async def test_the_files_the_task_names_go_with_it_and_count_as_read(tmp_path):
    (tmp_path / "sales.csv").write_text("id,customer,amount\n1,ann,2.50\n" + "".join(f"{i},x,1\n" for i in range(40)))
    (tmp_path / "blob.txt").write_bytes(b"\x00\x01binary")
    prompt = "Add up the amount column of sales.csv (not blob.txt), write the sum to sum.txt, and tell me."
    steps = [reply("Rewrite it.\n```bash\nprintf 'id,customer,amount\\n' > sales.csv\n```")] + [reply("DONE: 3.5")] * 3
    with ScriptedServer(steps) as server:
        agent = small_agent(server, tmp_path)
        await agent.run(prompt)
    first = texts(server.requests[0].body)[0]
    assert "$ cat -n sales.csv\n     1\tid,customer,amount\n     2\t1,ann,2.50\n" in first
    assert "… 12 more lines" in first and "cat -n blob.txt" not in first and "cat -n sum.txt" not in first
    # sales.csv was rewritten, but its content had been shown: no "without looking at it" complaint
    assert "sum.txt, but it does not exist" in texts(server.requests[2].body)[-1]
    assert "without looking" not in texts(server.requests[2].body)[-1]
    with ScriptedServer([reply("```bash\nls\n```"), reply("DONE: 3.5")]) as server:
        await small_agent(server, tmp_path, profile=SMALL.without("show", "checks")).run(prompt)
    assert "cat -n sales.csv" not in texts(server.requests[0].body)[0]  # the aid off


async def test_a_named_file_a_read_rule_denies_is_not_shown(tmp_path):
    from drivetrain.control.permissions import Policy

    (tmp_path / "secrets.json").write_text('{"token": "abc123"}\n')
    (tmp_path / "notes.txt").write_text("hello\n")
    env = {"DRIVETRAIN_HOME": str(tmp_path / "home")}
    policy = Policy.load(
        tmp_path, mode="acceptEdits", disallowed_tools=["Read(secrets.json)"], interactive=False, env=env
    )
    hooks = Hooks()
    readable = lambda path: policy.decide("Read", {"file_path": path}, tmp_path).behavior == "allow"
    model = AnthropicModel.from_env(
        "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "ANTHROPIC_API_KEY": "k"}
    )  # never asked here
    equip(SMALL, model, builtin_tools(), hooks, tmp_path, readable=readable)
    out = await hooks.run("UserPromptSubmit", {"prompt": "Copy the token of secrets.json into notes.txt."})
    context = "\n".join(out.additional_context)
    assert "cat -n notes.txt" in context and "secrets.json" in context  # listed, not shown
    assert "abc123" not in context and "cat -n secrets.json" not in context


async def test_a_cited_path_line_must_exist_and_mention_what_was_asked(tmp_path):
    (tmp_path / "accounts.py").write_text("import os\n\n\ndef fetch_account(n):\n    return n\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "Which file and line define the function fetch_account? Answer as path:line."})
    # the task's words ("as path:line") ask nothing of the checks: an answer citing no place is not sent back for it
    assert not any("path:line" in f for f in await checks.failures("It is defined in accounts."))
    assert (
        "that line is 'import os', which does not mention fetch_account" in (await checks.failures("accounts.py:1"))[0]
    )
    assert "accounts.py has 5 lines" in (await checks.failures("accounts.py:150"))[0]
    assert "there is no file notify.py" in (await checks.failures("notify.py:12"))[0]
    assert await checks.failures("fetch_account is defined at accounts.py:4") == []
    assert await checks.failures("./accounts.py:4") == []  # as grep -rn . prints it (was "no file ./accounts.py")


async def test_a_question_for_a_path_is_not_taken_for_one_asking_path_line_or_a_number(tmp_path):
    (tmp_path / "big.json").write_text("x" * 2000)
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "Which file is the largest one here? Write its path to answer.txt and tell me."})
    [missing] = await checks.failures("The largest file is big.json (2000 bytes).")
    assert "answer.txt" in missing and "echo" not in missing  # the size is not what the file should hold
    (tmp_path / "answer.txt").write_text("2000\n")  # wrong, but not a path:line list gone wrong
    assert not any("path:line" in f for f in await checks.failures("The largest file is big.json."))


async def test_a_command_the_task_names_is_run_again_or_asked_for_once_the_run_changed_files(tmp_path):
    (tmp_path / "report.py").write_text("def total(rows)\n    return 1\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "python3 report.py fails with a syntax error. Fix it so the script runs."})
    assert (
        await checks.failures("fixed report.py") == []
    )  # nothing changed: it may have been a question about the failure
    (tmp_path / "report.py").write_text("def total(rows)\n    return 2\n")  # a change, still broken
    assert (
        "The task names `python3 report.py`, and you have not run it. Run it to check that it works."
        in await checks.failures("fixed")
    )
    await checks.on_tool({"tool_name": "Bash", "tool_input": {"command": "python report.py"}, "tool_response": {}})
    [failure] = [f for f in await checks.failures("fixed") if "report.py" in f]
    assert failure.startswith("`python3 report.py` fails now (exit code 1)") and "SyntaxError" in failure
    (tmp_path / "report.py").write_text("def total(rows):\n    return 1\n")
    assert await checks.failures("fixed report.py") == []


async def test_a_test_run_chained_after_an_edit_is_run_again_without_the_edit(tmp_path):
    (tmp_path / "test_x.py").write_text("import pathlib\nassert pathlib.Path('log').read_text().count('+') <= 1\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "make the test pass"})
    await checks.on_tool(
        {"tool_name": "Bash", "tool_input": {"command": "echo + >> log && python3 test_x.py"}, "tool_response": {}}
    )
    (tmp_path / "log").write_text("+\n")
    assert await checks.failures("done: test_x.py passes") == []  # the append is not run a second time


async def test_a_missing_list_of_places_is_written_by_the_models_own_search(tmp_path):
    """Read from the run, not the task's words: the model's own grep -n, or the places its answer cites."""
    (tmp_path / "a.py").write_text("x = 1  # TODO: y\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "List every TODO in todo.txt, one per line, as file:line."})
    [failure] = await checks.failures("done")
    assert failure.endswith("Create it with the right content.")  # no search seen yet, no place cited: no hint
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "grep -n TODO *.py"},
            "tool_response": {"content": "a.py:1:x = 1  # TODO: y"},
        }
    )
    [failure] = await checks.failures("done")
    # the model's own search, not reading the list as it is written
    assert failure.endswith(
        "Your search found them; this writes them as path:line:\n```bash\ngrep --exclude=todo.txt "
        "-n TODO *.py | cut -d: -f1,2 > todo.txt\n```"
    )
    (tmp_path / "b.py").write_text("# TODO: z\n")
    [failure] = await checks.failures("The TODOs are at a.py:1 and b.py:1.")
    assert failure.endswith("```bash\nprintf '%s\\n' a.py:1 b.py:1 > todo.txt\n```")
    (tmp_path / "todo.txt").write_text("a.py:1\n")
    assert await checks.failures("done: todo.txt") == []


async def test_an_answer_that_only_lacks_the_value_is_asked_for_again_without_forcing_a_command(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    steps = [
        reply("Write it.\n```bash\nwc -l < a.py > total.txt\n```"),
        reply("DONE: I wrote the total to total.txt."),
        reply("DONE: The total is 2, in total.txt."),
    ]
    with ScriptedServer(steps) as server:
        agent = small_agent(server, tmp_path, record=True)
        result = await agent.run("Count the lines of a.py, write the total to total.txt and tell me")
    assert "Your answer does not give the value you wrote to total.txt (2)" in texts(server.requests[2].body)[-1]
    assert [r.tool_choice for r in agent.model.requests] == [None, None, "none"]  # the answer alone: without tools
    assert result.result == "The total is 2, in total.txt."


async def test_a_question_that_must_change_nothing_is_not_told_nothing_changed(tmp_path):
    (tmp_path / "config.ini").write_text("[server]\nport = 8080\n")
    checks = WorkChecks(tmp_path)
    for prompt in (
        "What port does config.ini set? Do not change anything.",
        "config.ini 设置的端口是多少？不要修改任何文件。",
    ):
        await checks.on_prompt({"prompt": prompt})
        assert await checks.failures("8080") == []


async def test_a_block_that_does_nothing_makes_its_line_the_answer(tmp_path):
    """Shown where the function is defined, the 1.5B wrote the place as its line and then a block of
    "# Your code here", which ran, showed nothing, and was answered "No output, exit code 0."."""
    (tmp_path / "scheduler.py").write_text("import os\n\n\ndef render_payment(values):\n    return values\n")
    steps = [reply("scheduler.py:4:def render_payment(values):\n```python\n# Your code here\n```")]
    with ScriptedServer(steps) as server:
        result = await small_agent(server, tmp_path).run(
            "Question: where is render_payment defined?\nAnswer format: path:line"
        )
    assert tool_uses(result) == [] and result.num_turns == 1
    assert (result.subtype, result.result) == ("success", "scheduler.py:4:def render_payment(values):")
    assert does_nothing("\n# a comment\n  pass\n...\n") and not does_nothing("# show it\nprint(1)")


async def test_a_program_the_policy_denies_leaves_the_grammar(tmp_path):
    from drivetrain.control.permissions import Policy

    (tmp_path / "a.py").write_text("x = 1\n")
    env = {"DRIVETRAIN_HOME": str(tmp_path / "home")}
    policy = Policy.load(tmp_path, mode="acceptEdits", disallowed_tools=["Bash(wc:*)"], interactive=False, env=env)
    steps = [
        reply("Count.\n```bash\nwc -l a.py\n```"),
        reply("Count.\n```python\nprint(len(open('a.py').readlines()))\n```"),
        reply("DONE: 1"),
    ]
    with ScriptedServer(steps) as server:
        inner = Recording(anthropic(server))
        agent = Agent(
            model=CodeActionModel(inner),
            tools=[t for t in builtin_tools() if t.name == "Bash"],
            cwd=tmp_path,
            profile=SMALL,
            policy=policy,
        )
        await agent.run("How many lines has a.py?")
    first, second, third = (r.grammar for r in inner.requests)
    wc = re.compile(r'"w" bash-body-f\d+')  # the automaton's step on the w of wc
    assert not wc.search(first) and wc.search(second)  # wc, after it was denied by a rule
    assert "python-body" in second and "python-body" not in third  # python3: no rule allows it in acceptEdits


async def test_a_claim_about_a_denied_command_and_an_answer_sent_back_after_the_work_ones(tmp_path):
    """A denied call never reaches the PostToolUse hook: the checks learn of it from the history. Sent back to work
    twice, the model may still be asked (without tools) for an answer that gives the value it wrote."""
    from drivetrain.control.permissions import Policy

    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    env = {"DRIVETRAIN_HOME": str(tmp_path / "home")}
    policy = Policy.load(
        tmp_path, mode="bypassPermissions", disallowed_tools=["Bash(wc:*)"], interactive=False, env=env
    )
    steps = [
        reply("Count.\n```bash\nwc -l a.py\n```"),
        reply("Count.\n```python\nprint(len(open('a.py').readlines()))\n```"),
        reply("DONE: 2 lines (checked: `wc -l a.py` prints 2)."),  # total.txt missing, wc never ran
        reply("Write it.\n```text total.txt\n3\n```"),
        reply("DONE: 2 lines."),  # total.txt says 3
        reply("Write it.\n```text total.txt\n2\n```"),
        reply("DONE: total.txt written."),  # no value: the work is done, the answer is not
        reply("DONE: a.py has 2 lines; total.txt holds 2."),
    ]
    with ScriptedServer(steps) as server:
        agent = Agent(
            model=Recording(CodeActionModel(anthropic(server), tmp_path)),
            tools=builtin_tools(),
            cwd=tmp_path,
            profile=SMALL,
            policy=policy,
        )
        result = await agent.run("Count the lines of a.py, write the total to total.txt and report it.")
    sent = [texts(r.body)[-1] for r in server.requests[3:8:2]]
    assert "Your answer says what `wc -l a.py` showed, but wc is denied here and never ran." in sent[0]
    assert "You wrote 3 to total.txt, but your answer says 2" in sent[1]
    assert (
        "Your answer does not give the value you wrote to total.txt (2). Answer again, with the value.\n\n"
        "What I did:\n- I created total.txt, which now holds: '2'" in sent[2]
    )
    assert [r.tool_choice for r in agent.model.requests][3:8:2] == [
        None,
        None,
        "none",
    ]  # the last: answer only, no tools
    assert (result.subtype, result.result) == ("success", "a.py has 2 lines; total.txt holds 2.")
    assert (tmp_path / "total.txt").read_text() == "2\n"  # a text block is the whole file (merged, it held "3\n2")


def test_the_denied_programs_come_from_the_policys_own_messages():
    from drivetrain.control.permissions import Policy
    from drivetrain.messages import Message, ToolResultBlock

    policy = Policy.load(".", mode="acceptEdits", disallowed_tools=["Bash(rm -rf:*)"], interactive=False, env={})
    said = [policy.decide("Bash", {"command": c}, ".").reason for c in ("rm -rf build", "curl -s x", "cat /etc/hosts")]
    results = [ToolResultBlock(f"t{i}", f"Permission denied: {r}", True) for i, r in enumerate(said)]
    assert denied_programs([Message("user", tuple(results))]) == ["rm -rf", "curl"]  # not cat: a path was the reason


async def test_a_fix_written_to_a_new_file_is_sent_back_to_the_file_that_defines_it(tmp_path):
    (tmp_path / "catalog.py").write_text("def countdown(n):\n    return list(range(n, 1, -1))\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "countdown in catalog.py is off by one. Please fix it."})
    (tmp_path / "countdown.py").write_text("def countdown(n):\n    return list(range(n, 0, -1))\n")
    assert any(
        f.startswith("You created countdown.py, but countdown is defined in catalog.py")
        for f in await checks.failures("Fixed.")
    )
    (tmp_path / "countdown.py").unlink()
    (tmp_path / "helpers.py").write_text("def other():\n    return 1\n")  # a new file of its own: fine
    assert not any("You created" in f for f in await checks.failures("Fixed."))


async def test_a_changed_file_that_no_longer_parses_is_sent_back_with_where(tmp_path):
    (tmp_path / "config.json").write_text('{\n  "theme": "dark",\n  "debug": false\n}\n')
    (tmp_path / "old.py").write_text("def f(:\n")  # broken before the run: not the run's doing
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "In config.json, change theme to solarized."})
    (tmp_path / "config.json").write_text('{\n  "theme": "solarized"\n  "debug": false\n}\n')
    (tmp_path / "old.py").write_text("def f(:\n    pass\n")
    failures = await checks.failures("Changed it.")
    assert any(
        f.startswith("config.json no longer parses after your change: Expecting ',' delimiter at line 3")
        for f in failures
    )
    assert not any("old.py" in f for f in failures)
    (tmp_path / "config.json").write_text('{\n  "theme": "solarized",\n  "debug": false\n}\n')
    assert not any("parses" in f for f in await checks.failures("Changed it."))


async def test_a_script_that_only_defined_the_asked_for_module_is_offered_as_its_file_block(tmp_path):
    checks = WorkChecks(tmp_path, file_blocks=True)
    await checks.on_prompt({"prompt": "Create textutils.py with a function digit_sum(n)."})
    code = "def digit_sum(n):\n    return sum(int(d) for d in str(n))"
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": f"python3 - <<'PY'\n{code}\nPY"},
            "tool_response": {"content": "(no output)"},
        }
    )
    [missing] = await checks.failures("Created textutils.py.")
    assert missing.endswith(f"This writes it:\n```python textutils.py\n{code}\n```")
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": f"python3 - <<'PY'\n{code}\nprint(digit_sum(12))\nPY"},
            "tool_response": {"content": "3"},
        }
    )
    assert "This writes it" not in (await checks.failures("Created textutils.py."))[0]  # it ran something: no


async def test_the_hint_for_a_missing_value_file_is_a_command_unless_the_model_writes_file_blocks(tmp_path):
    for file_blocks, hint in ((False, "```bash\necho 18 > total.txt\n```"), (True, "```text total.txt\n18\n```")):
        checks = WorkChecks(tmp_path, file_blocks=file_blocks)
        await checks.on_prompt({"prompt": "Count the lines, write the total to total.txt and report it."})
        [missing] = await checks.failures("The total is 18. I wrote 18 to total.txt.")
        assert missing.endswith("Create it with the right content.")  # no command printed 18: a guess, not handed
        await checks.on_tool(
            {
                "tool_name": "Bash",
                "tool_input": {"command": "wc -l *.py"},
                "tool_response": {"content": "  7 a.py\n 11 b.py\n 18 total"},
            }
        )
        [missing] = await checks.failures("The total is 18. I wrote 18 to total.txt.")
        assert missing.endswith(f"this writes it:\n{hint}")
    failures = await checks.failures("The total is 18 (a.py:7, b.py:11). I wrote 18 to total.txt.")
    assert failures[0].endswith("this writes it:\n```text total.txt\n18\n```")  # the per-file parts are not the value
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "find . -name '*.md'"},
            "tool_response": {"content": "./a.md\n./docs/b.md"},
        }
    )
    [missing] = await checks.failures("There are 2 .md files.")  # as many as the lines it was shown: counted
    assert missing.endswith("this writes it:\n```text total.txt\n2\n```")


def test_a_run_saved_with_calls_a_turn_had_to_choose_from_still_loads():
    """Earlier versions saved the calls a turn had to choose from (``must_call``, before it ``must_write``): such a
    run resumes, without them."""
    from drivetrain.loop.state import CallModel, state_from_json, state_to_json

    for old in (
        {"type": "CallModel", "tool_choice": "any", "must_write": ["total.txt"]},
        {"type": "CallModel", "tool_choice": "any", "must_call": [["Bash", {"command": "ls"}]]},
    ):
        assert state_from_json(old) == CallModel(tool_choice="any")
    assert state_from_json(state_to_json(CallModel(tool_choice="none"))) == CallModel(tool_choice="none")


async def test_a_quoted_output_is_compared_with_what_the_command_prints(tmp_path):
    (tmp_path / "greet.py").write_text('print("Hello, Ada")\n')
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": '让 greet.py 输出 "Hello, Ada."，一个字符都不能差。'})
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "cat greet.py"},
            "tool_response": {"content": 'print("Hello, Ada")'},
        }
    )
    (tmp_path / "greet.py").write_text('print("Hello, Ada!")\n')
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "python3 greet.py"},
            "tool_response": {"content": "Hello, Ada!"},
        }
    )
    assert await checks.failures("完成。") == [
        "The task asks for exactly 'Hello, Ada.', but `python3 greet.py` prints 'Hello, Ada!'. Line 1 of greet.py "
        'prints it: `print("Hello, Ada!")`. Make it print exactly that line, then run it again.'
    ]
    (tmp_path / "greet.py").write_text('print("Hello, Ada.")\n')
    assert await checks.failures("完成：greet.py 现在输出 Hello, Ada.") == []


async def test_a_file_of_test_functions_run_by_a_bare_interpreter_ran_no_test(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n    return 1\n")
    (tmp_path / "test_m.py").write_text("from m import f\n\n\ndef test_f():\n    assert f() == 2\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "让 test_m.py 通过。"})
    out = await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "python3 test_m.py"},
            "tool_response": {"content": "(no output)"},
        }
    )
    assert out["hookSpecificOutput"]["additionalContext"] == (
        "Note: that ran no test. test_m.py only defines test functions, and only a test runner calls them: run "
        "`python3 -m pytest test_m.py`."
    )
    assert await checks.failures("测试通过了。") == [
        "The task is about tests, but you have not run them. Run them and make sure they pass."
    ]


async def test_a_new_prompt_leaves_the_last_prompts_calls_behind(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\ny = 2\nz = 3\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "How many lines has a.py?"})
    await checks.on_tool(
        {"tool_name": "Bash", "tool_input": {"command": "wc -l a.py"}, "tool_response": {"content": "3 a.py"}}
    )
    assert await checks.failures("3 (`wc -l a.py` prints 3)") == []
    (tmp_path / "b.py").write_text("x = 1\n")
    await checks.on_prompt({"prompt": "And b.py?"})
    [claim] = await checks.failures("3 (`wc -l a.py` prints 3)")
    assert claim.startswith("Your answer says what `wc -l a.py` showed, but you did not run wc")


def _check_calls(events):
    return [
        e
        for e in events
        if type(e).__name__ in ("ToolStarted", "ToolFinished") and e.call.id.startswith("drivetrain_check_")
    ]


async def test_a_check_runs_a_test_again_as_the_harness_own_bash_call_in_the_audit_log(tmp_path):
    from drivetrain import AuditLog

    ws = tmp_path / "ws"  # the audit log's home outside it
    ws.mkdir()
    (ws / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (ws / "test_calc.py").write_text("from calc import add\nassert add(2, 2) == 4, 'add is wrong'\n")
    steps = [
        reply(
            "Fix.\n```bash\nprintf 'def add(a, b):\\n    return a + b + 1\\n' > calc.py\n"
            "python3 test_calc.py || true\n```"
        ),
        reply("DONE: the test passes"),
        reply("Fix.\n```bash\nprintf 'def add(a, b):\\n    return a + b\\n' > calc.py\n```"),
        reply("DONE: fixed calc.py"),
    ]
    seen = []
    audit = AuditLog.for_session("s-check", home=tmp_path / "home")
    with ScriptedServer(steps) as server:
        await small_agent(server, ws, profile=SMALL.without("show"), observers=[seen.append, audit.observe]).run(
            "Fix calc.py so that test_calc.py passes."
        )
    audit.close()
    assert "`python3 test_calc.py` fails now (exit code 1)" in texts(server.requests[2].body)[-1]
    started, finished, *_ = _check_calls(seen)
    assert started.input["command"] == "python3 test_calc.py" and finished.meta["exit_code"] == 1
    records = [json.loads(line) for line in (tmp_path / "home" / "sessions" / "s-check.jsonl").read_text().splitlines()]
    assert any(r.get("kind") == "intent" and r.get("call_id") == started.call.id for r in records)
    assert not any(
        b.get("id") == started.call.id
        for body in (r.body for r in server.requests)
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
    )


@pytest.mark.skipif(
    shutil.which("bwrap") is None and not os.environ.get("DRIVETRAIN_NO_SKIP"), reason="bubblewrap is not installed"
)
async def test_a_checks_rerun_runs_inside_the_sandbox_when_the_run_has_one(tmp_path):
    from drivetrain.host.sandbox import Sandbox

    (tmp_path / "test_calc.py").write_text("assert False\n")
    steps = [
        reply("Run it.\n```bash\necho tried > notes.txt; python3 test_calc.py || true\n```"),
        reply("DONE: passes"),
        reply("DONE: fails"),
        reply("DONE: fails"),
    ]
    seen = []
    with ScriptedServer(steps) as server:
        agent = Agent(
            model=anthropic(server),
            tools=builtin_tools(sandbox=Sandbox(tmp_path)),
            cwd=tmp_path,
            profile=SMALL.without("show"),
            observers=[seen.append],
        )
        await agent.run("Does test_calc.py pass?")
    _, finished, *_ = _check_calls(seen)
    assert finished.meta == {"exit_code": 1, "sandboxed": True}


def test_an_answer_that_repeats_itself_is_cut():
    text, block = parse_reply(
        "DONE: The total is 18 (checked: `wc -l *.py`). The total is 18 (checked: `wc -l *.py`)."
        " The total is 18 (checked:"
    )
    assert (text, block) == ("The total is 18 (checked: `wc -l *.py`).", None)
    assert parse_reply("DONE: 总数是 18。已写入 total.txt。总数是 18。")[0] == "总数是 18。已写入 total.txt。"
    assert parse_reply("DONE: Yes. Yes.")[0] == "Yes. Yes."  # too short to be a loop


async def test_a_config_file_that_no_longer_parses_is_said_at_once_and_at_the_end(tmp_path):
    """The 1.5B wrote the new host line and kept the old one: configparser refuses the file (a duplicate option)."""
    (tmp_path / "settings.ini").write_text("[server]\nport = 8000\nhost = localhost\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "settings.ini: host → db.internal"})
    (tmp_path / "settings.ini").write_text("[server]\nport = 8000\nhost = db.internal\nhost = localhost\n")
    note = await checks.on_tool(
        {
            "tool_name": "Write",
            "tool_input": {"file_path": "settings.ini"},
            "tool_response": {"content": "Overwrote settings.ini"},
        }
    )
    said = (
        "settings.ini no longer parses: While reading from 'settings.ini' [line 4]: option 'host' in section "
        "'server' already exists"
    )
    assert said in note["hookSpecificOutput"]["additionalContext"]
    assert any(
        f.startswith(said.replace("parses:", "parses after your change:")) for f in await checks.failures("Done.")
    )


def test_a_file_of_the_folder_named_in_the_task_is_shown_whatever_it_ends_in(tmp_path):
    """ "In app.env, change TIMEOUT to 95": .env is no known extension, so the 1.5B never saw the file, and typed
    `vi(app.env)` until the turn cap."""
    from drivetrain.small.prompts import task_context

    (tmp_path / "app.env").write_text("HOST=x\nTIMEOUT=30\n")
    (tmp_path / "Makefile").write_text("all:\n\techo hi\n")
    (tmp_path / "notes.txt").write_text("n\n")
    shown = task_context(tmp_path, "把 app.env 里的 TIMEOUT 改成 95，别动其他设置；Makefile 不用管。")
    assert "$ cat -n app.env\n     1\tHOST=x\n     2\tTIMEOUT=30" in shown and "$ cat -n Makefile" in shown
    assert shown.index("app.env\n") < shown.index("cat -n Makefile") and "cat -n notes.txt" not in shown
    assert "cat -n app.env" not in task_context(tmp_path, "Change myapp.env.bak and app.envelope")  # not its name


async def test_a_change_the_run_meant_that_changed_nothing_goes_back(tmp_path):
    """Asked to fix page_count, the 1.5B wrote the function as it was (an Edit with nothing to change), looked at the
    file, and answered the Edit's own words: "The file already holds exactly this block: nothing changed"."""
    (tmp_path / "payments.py").write_text("def page_count(total, per_page):\n    return total // per_page + 1\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "Bug: page_count (payments.py) is off by one. Please fix the function."})
    await checks.on_tool(
        {
            "tool_name": "Edit",
            "tool_input": {"file_path": "payments.py", "old_string": "x", "new_string": "x"},
            "tool_response": {
                "content": "old_string and new_string are identical, so there is nothing to change.",
                "is_error": True,
            },
        }
    )
    assert await checks.failures("The file already holds exactly this block: nothing changed.") == [
        "Your change to payments.py wrote what it already held, and this run changed no file. If the task asks for a "
        "change, write the lines of payments.py as they must be (not as they are now)."
    ]
    (tmp_path / "payments.py").write_text("def page_count(total, per_page):\n    return -(-total // per_page)\n")
    assert not any("already held" in f for f in await checks.failures("Fixed page_count in payments.py."))


async def test_a_path_written_to_a_file_names_a_file_that_exists(tmp_path):
    (tmp_path / "storage.txt").write_text("x" * 700)
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "Which file is the largest? Write its path to result.txt and tell me."})
    (tmp_path / "result.txt").write_text("/storage.txt\n")
    await checks.on_tool(
        {
            "tool_name": "Write",
            "tool_input": {"file_path": "result.txt"},
            "tool_response": {"content": "Created result.txt"},
        }
    )
    assert (
        "result.txt holds '/storage.txt', but there is no such file (the folder has storage.txt: a path from the "
        "folder has no leading /). Write the path of a file that exists." in await checks.failures("storage.txt")
    )
    for fine in ("storage.txt", "./storage.txt", "42", "3/4", "https://example.com/a.txt", "2026/12/02", "a.py:3"):
        (tmp_path / "result.txt").write_text(fine + "\n")
        assert not any("no such file" in f for f in await checks.failures(f"It is {fine}.")), fine


async def test_a_number_the_model_typed_into_a_file_is_one_the_run_computed(tmp_path):
    """grep -n printed six ERROR lines; the 1.5B wrote 4 (and its answer, quoting the lines, held 24 numbers)."""
    (tmp_path / "server.log").write_text("".join(f"2024-05-1{i} ERROR x\n2024-05-1{i} INFO y\n" for i in range(6)))
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "How many ERROR lines are in server.log? Write the count to errors.txt."})
    grep = "".join(f"{2 * i + 1}:2024-05-1{i} ERROR x\n" for i in range(6))  # lines 1, 3, …: the count is 6
    await checks.on_tool(
        {"tool_name": "Bash", "tool_input": {"command": "grep -n ERROR server.log"}, "tool_response": {"content": grep}}
    )
    (tmp_path / "errors.txt").write_text("4\n")
    await checks.on_tool(
        {
            "tool_name": "Write",
            "tool_input": {"file_path": "errors.txt", "content": "4\n"},
            "tool_response": {"content": "Created errors.txt"},
        }
    )
    failures = await checks.failures("Four ERROR lines (checked: `grep -n ERROR server.log` prints " + grep + ")")
    assert failures == [
        "You wrote 4 to errors.txt, but no command of this run printed 4, or 4 lines (`grep -n ERROR "
        "server.log` printed 6 lines). Compute it with a command that prints the number, then write "
        "that."
    ]  # and not "your answer says 01, 02, …, 2024": it quotes output
    (tmp_path / "errors.txt").write_text("6\n")
    await checks.on_tool(
        {
            "tool_name": "Write",
            "tool_input": {"file_path": "errors.txt", "content": "6\n"},
            "tool_response": {"content": "Overwrote errors.txt"},
        }
    )
    assert await checks.failures("There are 6 ERROR lines; errors.txt holds 6.") == []


def test_what_the_harness_just_said_is_where_a_plan_or_answer_must_not_start():
    from drivetrain.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
    from drivetrain.small.codeact import said

    task = Message.user("Fix page_count in payments.py so that the tests pass, please.")
    assert said([task]) == []  # the task itself: a plan may restate it
    call = Message(
        "assistant", (ToolUseBlock("t1", "Edit", {"file_path": "p.py", "old_string": "x", "new_string": "x"}),)
    )
    result = Message(
        "user",
        (
            ToolResultBlock("t1", "old_string and new_string are identical, so there is nothing to change.", True),
            TextBlock("Fix page_count in payments.py so that the tests pass, please."),
        ),
    )
    assert said([task, call, result]) == [
        "The file already holds exactly this block: nothing changed. Write the lines as they must be."
    ]  # as the model reads it; the task's line is not


async def test_a_rename_of_another_function_than_the_one_the_task_names_goes_back(tmp_path):
    """Asked (in Chinese) to rename filter_cart, the 1.5B renamed report and too_big to the new name."""
    (tmp_path / "orders.py").write_text(
        "def report(rows):\n    return sum(rows)\n\n\ndef filter_cart(rows):\n    return rows\n"
    )
    (tmp_path / "main.py").write_text("from orders import report\n\nprint(report([5, 3]))\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "项目里的 filter_cart 统一改名叫 summarize_message，保证 main.py 还能跑。"})
    for name in ("orders.py", "main.py"):
        (tmp_path / name).write_text((tmp_path / name).read_text().replace("report", "summarize_message"))
    failures = await checks.failures("Renamed to summarize_message in orders.py and main.py.")
    assert (
        "You renamed report to summarize_message, but the task does not name it: it names filter_cart, which is "
        "still there. Put report back as it was, and make the change the task asks for to filter_cart." in failures
    )
    for name in ("orders.py", "main.py"):  # done right: nothing of the kind
        (tmp_path / name).write_text(
            (tmp_path / name)
            .read_text()
            .replace("summarize_message", "report")
            .replace("filter_cart", "summarize_message")
        )
    assert not any("does not name" in f for f in await checks.failures("Renamed filter_cart in orders.py."))


async def test_places_written_after_a_path_are_that_paths_lines_in_the_file_the_answer_implies(tmp_path):
    """The 1.5B answered "billing.py:9, 13, scheduler.py:4, 8" for four TODOs; the block offered to write todos.txt
    held two places, the model wrote those, and the file lacked the other two."""
    for name in ("billing.py", "scheduler.py"):
        (tmp_path / name).write_text("".join(f"x{i} = {i}  # TODO: {i}\n" for i in range(1, 16)))
    checks = WorkChecks(tmp_path, file_blocks=True)
    await checks.on_prompt({"prompt": "List every TODO in the .py files in todos.txt, one per line, as file:line."})
    grep = "billing.py:9:x9 = 9\nbilling.py:13:x13 = 13\nscheduler.py:4:x4 = 4\nscheduler.py:8:x8 = 8"
    await checks.on_tool(
        {"tool_name": "Bash", "tool_input": {"command": "grep -rn TODO ."}, "tool_response": {"content": grep}}
    )
    [missing] = (await checks.sorted_failures("TODOs at billing.py:9, 13, scheduler.py:4, 8 (4 in all)."))[0]
    assert missing.endswith(
        "this writes it:\n```text todos.txt\nbilling.py:9\nbilling.py:13\nscheduler.py:4\nscheduler.py:8\n```"
    )
    assert places("a.py:3, 4.5 and b.py:2, 7: c.py:1") == ["a.py:3", "b.py:2", "c.py:1"]  # not lines: 4.5, "7:"

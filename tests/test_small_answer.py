"""The final answer agrees with the run (small/answer.py, through WorkChecks): what it reports was seen, and an answer
sent back is written again with the run's facts in front of the model, in the task's language."""

from drivetrain.messages import Message, TextBlock
from drivetrain.small.answer import disagreements, echoes, facts, language, unseen
from drivetrain.small.checks import WorkChecks
from drivetrain.small.selection import harness_words


async def _run(tmp_path, prompt: str, command: str, output: str, write: dict[str, str]) -> WorkChecks:
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": prompt})
    for name, text in write.items():
        (tmp_path / name).write_text(text)
    await checks.on_tool(
        {"tool_name": "Bash", "tool_input": {"command": command}, "tool_response": {"content": output}}
    )
    return checks


async def test_a_file_the_answer_says_it_wrote_must_exist(tmp_path):
    """Asked in Chinese to write a count to a file, the model answered "I wrote it to <file>" and wrote nothing."""
    checks = await _run(tmp_path, "统计 logs 目录里 ERROR 的行数。", "grep -c ERROR app.log", "14", {"app.log": "x\n"})
    [failure] = await checks.failures("共有 14 行，我已写入 errors_count.txt。")
    assert failure.startswith("Your answer reports errors_count.txt, but no command printed it and no file holds it.")
    [failure] = await checks.failures("14 lines, written to errors_count.txt.")  # and in another language
    assert failure.endswith("Write the answer in Chinese, the language of the task.")
    assert await checks.failures("共有 14 行 ERROR（grep -c ERROR app.log）。") == []


async def test_a_number_no_command_printed_goes_back_with_the_facts(tmp_path):
    (tmp_path / "calc.py").write_text("def score(n):\n    return n * 6\n")
    # (no call written out: `score(7)` in the task would first have to be run, effects.named_calls)
    checks = await _run(tmp_path, "What does score return for 7 in calc.py?", "python3 -c 'import calc'", "", {})
    sent = await checks.run(_Ctx("score(7) returns 42."))
    assert "Your answer reports 42, but no command printed it and no file holds it." in sent.text
    assert sent.tool_choice == "none"
    assert (
        "What I did:\n- I created or changed no file\n"
        "- I ran `python3 -c 'import calc'`: it printed nothing" in sent.text
    )
    checks.calls[-1].output = checks.calls[-1].text = "42"
    assert await checks.failures("score(7) returns 42.") == []


async def test_an_answer_that_says_nothing_of_the_changes_is_composed_again(tmp_path):
    checks = await _run(tmp_path, "Fix app.py", "python3 app.py", "ok", {"app.py": "print('ok')\n"})
    [failure] = await checks.failures("Done.")
    assert failure.startswith("Your answer does not say what you did.")
    assert await checks.failures("Done: fixed app.py, `python3 app.py` prints ok.") == []
    readonly = await _run(tmp_path, "Tell me what app.py prints.", "cat app.py", "print('ok')", {})
    assert await readonly.failures("It prints ok.") == []  # nothing changed: nothing to report


def test_facts_list_files_with_what_they_hold_and_commands_with_how_they_exited():
    class Call:
        def __init__(self, command, failed, output):
            self.command, self.failed, self.output, self.text = command, failed, output, output

    before = {"a.py": b"x = 1\n", "old.txt": b"gone"}
    now = {"a.py": b"x = 2\n", "total.txt": b"18\n", "big.py": b"\n".join([b"y = 1"] * 80)}
    text = facts(before, now, [Call("wc -l *.py", False, "18 total\n"), Call("python3 a.py", True, "Traceback")])
    assert text.splitlines() == [
        "What I did:",
        "- I changed a.py, which now holds: 'x = 2'",
        "- I created big.py (80 lines)",
        "- I deleted old.txt",
        "- I created total.txt, which now holds: '18'",
        "- I ran `wc -l *.py`: it printed '18 total'",
        "- I ran `python3 a.py`: it failed, printing 'Traceback'",
    ]
    assert facts({}, {}, []) == ""


def test_what_counts_as_seen():
    files = {"a.py": b"1\n2\n3\n4\n"}
    assert unseen("a.py:4 defines it", "", files) == []  # a line the file has (the citation check reads it)
    assert unseen("./a.py:4 defines it", "", files) == []
    assert unseen("a.py:9 defines it", "a.py", files) == ["a.py:9"]
    assert unseen("20 + 5 = 25", "20 5", files) == []  # a sum written out (the arithmetic check reads it)
    assert unseen("The answer is 1234.", "wc: 1234 total", files) == []
    assert language("把总数写到 total.txt") == "Chinese" and language("total.txt に書いて") == "Japanese"
    assert language("Write the total") == ""
    assert disagreements("Write the total", "It is 77.", "nothing", False, files)[0].endswith("prints it.")


class _Ctx:
    history: list = []

    def __init__(self, answer: str):
        self.answer = answer


async def test_the_aid_switched_off_lets_any_answer_through(tmp_path):
    from drivetrain.small.profile import SMALL

    assert "answer" in SMALL.aids and "answer" not in SMALL.without("answer").aids
    checks = await _run(tmp_path, "Fix app.py", "python3 app.py", "ok", {"app.py": "print('ok')\n"})
    checks.agree = False
    assert await checks.failures("Done, it returns 42.") == []


async def test_a_question_answered_with_nothing_the_run_found(tmp_path):
    """Asked what a function returns, the model ran the module (no output) and answered that it ran."""
    (tmp_path / "notify.py").write_text("def steps(n):\n    return n // 2\n")
    checks = await _run(tmp_path, "notify.py 里 steps 对 76 返回什么？", "python3 notify.py", "", {})
    [failure] = await checks.failures("The script executed successfully without any output.")
    assert failure.startswith("The task asks a question, and your answer does not give what the run found.")
    assert failure.endswith("Write the answer in Chinese, the language of the task.")
    [unseen] = await checks.failures("steps(76) 返回 38。")  # a value nothing printed
    assert unseen.startswith("Your answer reports 38, but no command printed it")
    checks.calls[-1].output = checks.calls[-1].text = "38"
    assert await checks.failures("steps(76) 返回 38。") == []


async def test_an_answer_that_copies_the_harness_note_on_the_last_call_is_asked_for_again(tmp_path):
    """The quick start: after `echo 18 > total.txt` the 1.5B answered "Created totaltxt (1 line): 18" (the note of
    changes.py, its dot dropped: the grammar forbids starting as the note does)."""
    (tmp_path / "app.py").write_text("print(1)\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "Count the lines of each .py file, write the total to total.txt, report it."})
    await checks.on_tool(
        {"tool_name": "Bash", "tool_input": {"command": "wc -l *.py"}, "tool_response": {"content": " 18 total"}}
    )
    (tmp_path / "total.txt").write_text("18\n")
    hook = await checks.on_tool(
        {"tool_name": "Bash", "tool_input": {"command": "echo 18 > total.txt"}, "tool_response": {"content": ""}}
    )
    assert hook["hookSpecificOutput"]["additionalContext"] == "Created total.txt (1 line):\n   1| 18"
    sent = await checks.run(_Ctx("Created totaltxt (1 line): 18"))
    assert sent.tool_choice == "none" and "Your answer copies the note on your last call's result" in sent.text
    assert sent.text.endswith(
        "What I did:\n- I created total.txt, which now holds: '18'\n- I ran `wc -l *.py`: it printed '18 total'\n- I ran `echo 18 > total.txt`: it printed nothing"
    )
    assert await checks.failures("The total is 18 lines; I wrote 18 to total.txt.") == []
    assert await checks.failures("I created total.txt (1 line): 18") != []
    # the record is the agent's own, in the first person: copied or translated, it is an answer, not an echo
    record = sent.text.split("\n\n")[-1]
    assert await checks.failures(record) == []
    assert (
        await checks.failures("我做了：\n- 我创建了 total.txt，内容是 '18'\n- 我运行了 `wc -l *.py`，打印了 '18 total'")
        == []
    )
    assert await checks.failures(sent.text.split("\n\n")[0]) != []  # what it asked is no answer
    history = [Message.user("Count the lines"), Message.assistant(TextBlock("x")), Message.user(sent.text)]
    assert harness_words(history) == [sent.text.split("\n\n")[0]]


async def test_an_answer_that_copies_the_edit_tools_own_report_is_asked_for_again(tmp_path):
    """Runs without `changes` (or on JSON tools) answered with the Edit tool's report: "Replaced 1 instance in
    /…/payments.py. Lines around the (first) change now read:". The tool's words are the harness's too."""
    (tmp_path / "payments.py").write_text("def total(xs):\n    return sum(xs) + 1\n")
    checks = WorkChecks(tmp_path, report_changes=False)
    await checks.on_prompt({"prompt": "payments.py 的 total 多加了 1，改掉。"})
    (tmp_path / "payments.py").write_text("def total(xs):\n    return sum(xs)\n")
    report = (
        f"Replaced 1 occurrence in {tmp_path}/payments.py. Lines around the (first) change now read:\n"
        "   1| def total(xs):\n   2|     return sum(xs)"
    )
    assert (
        await checks.on_tool(
            {"tool_name": "Edit", "tool_input": {"file_path": "payments.py"}, "tool_response": {"content": report}}
        )
        is None
    )  # nothing added to the result
    sent = await checks.run(_Ctx(f"Replaced 1 instance in {tmp_path}/payments.py. Lines around the change now read:"))
    assert sent.tool_choice == "none" and "Your answer copies the note on your last call's result" in sent.text
    assert await checks.failures("已修正 payments.py：total 现在返回 sum(xs)，不再多加 1。") == []


def test_what_counts_as_a_copy_of_the_note():
    note = "Changed greet.py (- old line, + new line):\n-   5|     return 'Hi'\n+   5|     return 'Hello'"
    assert echoes("Changed greet.py (- old line, + new line)", note)  # a long run of the note
    assert not echoes("Fixed greet.py line 5: it returns 'Hello' now.", note)
    assert not echoes("18", "Created total.txt (1 line):\n   1| 18")  # the value alone is an answer
    assert not echoes("共 18 行，已写入 total.txt。", "Created total.txt (1 line):\n   1| 18")
    assert not echoes("Anything", "")


async def test_a_file_name_capitalised_at_the_start_of_the_answer_is_the_file_the_run_changed(tmp_path):
    """ "Recipients.txt has been updated…" after a run that changed recipients.txt was told it reported a file no
    command printed; a name that is not the workspace's, whatever its case, still is."""
    (tmp_path / "recipients.txt").write_text("b\na\nb\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "recipients.txt 里有重复的行，去掉重复。"})
    (tmp_path / "recipients.txt").write_text("b\na\n")
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "awk '!s[$0]++' recipients.txt > t && mv t recipients.txt"},
            "tool_response": {"content": "(no output)"},
        }
    )
    # the file name is no unseen value; the one thing left is the language: the task is in Chinese
    assert await checks.failures("Recipients.txt has been updated to remove duplicate lines.") == [
        "The task is written in Chinese: write the answer in Chinese."
    ]
    assert await checks.failures("Recipients.txt 已去掉重复的行。") == []
    [unseen] = await checks.failures("Contacts.txt has been updated to remove duplicate lines.")
    assert unseen.startswith("Your answer reports Contacts.txt, but no command printed it")


def test_what_counts_as_evidence_in_an_answer_is_read_from_its_shape_not_an_english_word_list():
    from drivetrain.sessions.report import evidence

    got = evidence("See e.g. a.py:3 and/or src/app.py, i.e. /etc/hosts, vs notes.md; src/a/b, x.y and 1234")
    assert got == ["a.py:3", "src/app.py", "/etc/hosts", "notes.md", "src/a/b", "1234"]
    assert evidence("例如 z.q 或 配置/文件") == []  # the same shapes in any language

"""Work the run's own calls show was left half done (small/effects.py), and a literal set apart after a colon
compared like a quoted one — read from the workspace and the calls, in any language."""

from dataclasses import dataclass

from drivetrain.small.checks import WorkChecks
from drivetrain.small.effects import left_behind, shown_not_written


@dataclass
class Call:
    command: str
    output: str
    failed: bool = False


FILE = {"req.txt": b"b\na\nb\nc\nc\n"}


def test_a_deduplicated_version_printed_but_not_written():
    [failure] = shown_not_written(["req.txt"], FILE, FILE, [Call("sort -u req.txt", "a\nb\nc\n")])
    assert failure.startswith(
        "`sort -u req.txt` printed a changed version of req.txt (3 of its 5 lines), but req.txt itself did not change."
    )
    assert shown_not_written(["req.txt"], FILE, FILE, [Call("awk '!s[$0]++' req.txt", "b\na\nc\n")])  # in order
    # what a question reads leaves no such trace: a search, the file itself, a count
    for call in (
        Call("grep b req.txt", "b\nb\n"),
        Call("cat req.txt", "b\na\nb\nc\nc\n"),
        Call("sort -u req.txt | wc -l", "3"),
    ):
        assert shown_not_written(["req.txt"], FILE, FILE, [call]) == []
    changed = {"req.txt": b"b\na\nc\n"}
    assert shown_not_written(["req.txt"], FILE, changed, [Call("sort -u req.txt", "a\nb\nc\n")]) == []


def test_a_moved_function_left_behind_in_its_old_file():
    before = {"app.py": b"def clamp(x):\n    return x\n\nprint(clamp(3))\n"}
    copied = {**before, "utils.py": b"def clamp(x):\n    return x\n"}
    [failure] = left_behind(["utils.py", "app.py"], before, copied)
    assert failure.startswith(
        "clamp is now defined both in utils.py (new) and in app.py. Code lives in one place: "
        "remove it from app.py and import it there (`from utils import clamp`)"
    )
    moved = {"app.py": b"from utils import clamp\n\nprint(clamp(3))\n", "utils.py": copied["utils.py"]}
    assert left_behind(["utils.py", "app.py"], before, moved) == []
    assert left_behind(["app.py"], before, copied) == []  # a new file the task does not name: a stray, not a move


async def test_the_copy_a_move_left_behind_goes_back_until_it_is_gone(tmp_path):
    app = (
        '"""The app."""\nimport sys\n\n\n@functools.cache\ndef clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n'
        '\n\ndef main():\n    print(clamp(2, 0, 3))\n\n\nif __name__ == "__main__":\n    main()\n'
    )
    (tmp_path / "app.py").write_text(app)
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "把 app.py 里的 clamp 函数移到新模块 utils.py，app.py 从那里导入。"})
    (tmp_path / "utils.py").write_text("def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n")
    await checks.on_tool({"tool_name": "Write", "tool_input": {"file_path": "utils.py"}, "tool_response": {}})
    work, _ = await checks.sorted_failures("")
    assert any(w.startswith("clamp is now defined both in utils.py (new) and in app.py") for w in work)
    (tmp_path / "app.py").write_text(
        '"""The app."""\nimport sys\nfrom utils import clamp\n\n\ndef main():\n'
        '    print(clamp(2, 0, 3))\n\n\nif __name__ == "__main__":\n    main()\n'
    )
    assert not any("defined both" in w for w in (await checks.sorted_failures(""))[0])


async def test_a_line_set_apart_after_a_colon_is_the_exact_output(tmp_path):
    (tmp_path / "summary.py").write_text('print("debug")\nprint("Total orders:  4")\n')
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "让 summary.py 只输出这一行：\nTotal orders: 4"})
    [failure] = await checks.failures("完成：summary.py")  # never run by the model: the check runs it
    assert failure == (
        "The task asks for exactly 'Total orders: 4', but `python3 summary.py` prints 'debug\\nTotal "
        'orders:  4\'. Line 2 of summary.py prints it: `print("Total orders:  4")`. Make it print '
        "exactly that line, then run it again."
    )
    (tmp_path / "summary.py").write_text('print("Total orders: 4")\n')
    assert await checks.failures("完成：summary.py 输出 Total orders: 4") == []
    await checks.on_prompt({"prompt": "Steps:\n1. Run summary.py\n2. Check it prints a total"})  # a list, not a literal
    assert await checks.failures("summary.py prints Total orders: 4") == []


async def test_a_call_the_task_writes_out_is_run_once_and_then_not_asked_again(tmp_path):
    (tmp_path / "reports.py").write_text(
        "def checksum(text):\n    h = 3\n    for ch in text:\n        h = (h * 33 + ord(ch)) % 997\n    return h\n"
    )
    checks = WorkChecks(tmp_path)
    await checks.on_prompt(
        {"prompt": "reports.py 里调用 checksum('falcon')，返回值是什么？checksum(x) 呢？len('ab') 呢？"}
    )
    command = "python3 - <<'PY'\nfrom reports import checksum\nprint(repr(checksum('falcon')))\nPY"

    async def not_run(_command):  # the policy denied the harness's call, or it waits for a person
        return None, ""

    work, _ = await checks.sorted_failures("checksum('falcon') 返回 914。", run=not_run)
    assert work == [
        f"The task writes out the call checksum('falcon'). Run it to see what it returns:\n```bash\n{command}\n```"
    ]  # not checksum(x) (no literal), not len (no file defines it)
    # a command of the model's own that made the call (either quote) and printed counts; one that failed, or that
    # printed nothing (the value left in a variable), does not
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "python3 - <<'PY'\nfrom reports import checksum\nr = checksum('falcon')\nPY"},
            "tool_response": {"content": "(no output)"},
        }
    )
    assert (await checks.sorted_failures("914", run=not_run))[0] == work
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": 'python3 -c "import reports; print(reports.checksum(\\"falcon\\"))"'},
            "tool_response": {"content": "NameError", "is_error": True},
        }
    )
    assert (await checks.sorted_failures("914", run=not_run))[0] == work
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {"command": 'python3 -c "from reports import checksum; print(checksum(\\"falcon\\"))"'},
            "tool_response": {"content": "914"},
        }
    )
    assert (await checks.sorted_failures("914", run=not_run))[0] == []


async def test_a_call_the_task_writes_out_that_the_run_never_made_is_made_by_the_harness(tmp_path):
    """Told to run `from notify import steps; print(repr(steps(76)))`, the 1.5B wrote the function out again, twice,
    and answered that the file lacks it: the harness makes the call itself, and the answer may then report it."""
    (tmp_path / "reports.py").write_text(
        "def checksum(text):\n    h = 3\n    for ch in text:\n        h = (h * 33 + ord(ch)) % 997\n    return h\n"
    )
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "What does checksum('falcon') return? It is in reports.py."})
    ran = []

    async def run(command):
        ran.append(command)
        return await checks._run_here(command)

    [made], _ = await checks.sorted_failures("It returns the checksum of falcon.", run=run)
    command = "python3 - <<'PY'\nfrom reports import checksum\nprint(repr(checksum('falcon')))\nPY"
    assert ran == [command]
    assert made == (
        f"The task writes out the call checksum('falcon'), and no command of yours made it. Run here, it "
        f"gives:\n```bash\n{command}\n```\nExit code 0; it printed:\n914\nUse what it printed."
    )
    assert await checks.sorted_failures("checksum('falcon') returns 914.", run=run) == ([], [])  # seen: not run again
    assert len(ran) == 1


async def test_the_answer_gives_what_a_call_the_task_writes_out_printed(tmp_path):
    """Shown that scramble('gamma') printed 'gmaam', the 1.5B answered that it returns 'agm'."""
    (tmp_path / "scheduler.py").write_text(
        'def scramble(word):\n    return "".join(word[(i * 3) % len(word)] for i in range(len(word)))\n'
    )
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "帮我看看 scheduler.py 里的 scramble('gamma') 会返回什么。"})
    [made], again = await checks.sorted_failures("It returns 'agm'.")  # the harness makes the call
    assert again == []  # what it printed is said once, with the call
    assert made.endswith("Exit code 0; it printed:\n'gmaam'\nUse what it printed.")
    work, [wrong] = await checks.sorted_failures("scramble('gamma') returns 'agm'.")
    command = "python3 - <<'PY'\nfrom scheduler import scramble\nprint(repr(scramble('gamma')))\nPY"
    assert work == [] and wrong == (
        f"`{command}` printed 'gmaam' for scramble('gamma'), but your answer does not "
        "give gmaam. Answer with what it printed."
    )
    assert await checks.sorted_failures("scramble('gamma') 返回 gmaam。") == ([], [])  # without the quotes too
    await checks.on_tool(
        {
            "tool_name": "Bash",
            "tool_input": {
                "command": "python3 -c \"from scheduler import scramble; print(scramble('gamma')); print('done')\""
            },
            "tool_response": {"content": "gmaam\ndone"},
        }
    )
    assert await checks.sorted_failures("It printed something.") == ([], [])  # two lines: which is the value?
    (tmp_path / "scheduler.py").write_text("def scramble(word):\n    return word\n")  # a fix, say: 'gmaam' is stale
    assert not [f for f in (await checks.sorted_failures("scramble('gamma') now returns 'gamma'."))[1] if "gmaam" in f]


def test_an_import_the_run_wrote_that_cannot_work():
    from drivetrain.small.effects import dangling_imports

    before = {
        "storage.py": b"def report(x):\n    return sum(x)\n",
        "ledger.py": b"def too_big(x, n):\n    return x > n\n",
        "main.py": b"import requests\nfrom storage import report\nfrom ledger import too_big\n\nprint(report([1]))\n",
    }
    broken = dict(
        before,
        **{
            "main.py": b"import requests\nfrom ticket_reports import compute\nfrom too_big import too_big\n"
            b"from storage import reportx\n\nprint(compute([1]))\n"
        },
    )
    found = dangling_imports(before, broken)
    assert [t.split(",")[0] for t, _ in found] == [
        "main.py line 2 imports compute from ticket_reports",
        "main.py line 3 imports too_big from too_big",
        "main.py line 4 imports reportx from storage",
    ]
    assert "(before your change that line was `from storage import report`)" in found[0][0]
    assert "too_big is defined in ledger.py" in found[1][0] and "No file here defines reportx" in found[2][0]
    assert [m for _, m in found] == ["ticket_reports", "too_big", ""]  # looked for in the workspace's python3
    # what works is not said: imports kept from before (requests), Python's own, a module the run created,
    # a name the workspace's module defines, an installed module (pytest)
    fine = dict(
        before,
        **{
            "util.py": b"def helper():\n    pass\n",
            "main.py": b"import requests\nimport json, pytest\nfrom util import helper\n"
            b"from storage import report\nfrom ledger import too_big as big\n",
        },
    )
    assert dangling_imports(before, fine) == []
    # a module whose names are not all read (one under `if __name__ == "__main__":`) is not judged
    guarded = {"storage.py": b"def report(x):\n    return x\n\n\nif __name__ == '__main__':\n    print(report(1))\n"}
    assert (
        dangling_imports(
            dict(before, **guarded),
            dict(fine, **guarded, **{"main.py": fine["main.py"] + b"from storage import summary\n"}),
        )
        == []
    )


async def test_a_missing_module_is_looked_for_with_the_workspaces_python_first(tmp_path):
    (tmp_path / "main.py").write_text("from storage import report\n")
    (tmp_path / "storage.py").write_text("def report():\n    pass\n")
    checks = WorkChecks(tmp_path)
    await checks.on_prompt({"prompt": "Rename report to summary; main.py must still run."})
    (tmp_path / "main.py").write_text("from summary import report\nfrom storage import report\nimport math\n")
    assert [f.split(",")[0] for f in await checks.failures("Renamed.")] == [
        "main.py line 1 imports report from summary"
    ]
    ran = []

    async def found_anyway(command: str) -> tuple[int | None, str]:  # the workspace's python3 has the module
        ran.append(command)
        return 0, "False\n"

    assert not any("summary" in f for f in await checks.failures("Renamed.", run=found_anyway))
    assert any('find_spec("summary")' in c for c in ran)


async def test_a_script_the_task_names_twice_is_checked_once(tmp_path):
    (tmp_path / "r.py").write_text('n = 4\nprint("debug")\nprint(f"[OK] {n} reports loaded.")\n')
    checks = WorkChecks(tmp_path)
    await checks.on_prompt(
        {"prompt": "修改 r.py，让 python3 r.py 只输出下面这一行，一个字符都不能差：\n[ok] 4 reports loaded"}
    )
    [failure] = await checks.failures("")
    assert failure.startswith("The task asks for exactly '[ok] 4 reports loaded', but `python3 r.py` prints")


async def test_a_script_the_task_names_is_not_run_unasked_for_a_quoted_name(tmp_path):
    """A rename's names in quotes are no output to compare: the script is not run when the model never ran it (it
    was, at the end of every such run); a quoted line of output still has it run."""
    (tmp_path / "app.py").write_text('def load():\n    return 1\n\nprint("loaded", load())\n')
    ran = []

    async def record(command: str) -> tuple[int | None, str]:
        ran.append(command)
        return 0, "loaded 1\n"

    checks = WorkChecks(tmp_path)
    for prompt in (
        "Rename `load` to `fetch` in app.py.",
        "把 app.py 里的函数 'load' 改名为 'fetch'，端口设为 `8080`。",
    ):
        await checks.on_prompt({"prompt": prompt})
        await checks.failures("Renamed load to fetch in app.py.", run=record)
    assert not any("app.py" in c for c in ran)
    await checks.on_prompt({"prompt": "Make app.py print exactly `loaded: 1`."})
    [failure] = await checks.failures("Done: app.py", run=record)
    assert failure.startswith("The task asks for exactly 'loaded: 1', but `python3 app.py` prints 'loaded 1'.")

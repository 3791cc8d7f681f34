"""A call that failed in the model's own command, read from its result in any language (small/misfires.py)."""

from pathlib import Path

import pytest

from drivetrain.messages import ToolResultBlock
from drivetrain.small.misfires import misfire


def bash(text, code, cwd):
    return misfire("Bash", ToolResultBlock("t", text, code != 0), {"exit_code": code}, cwd)


@pytest.mark.parametrize(
    ("text", "code", "why"),
    [
        ("stderr:\n/bin/bash: line 2: debug:: command not found\nExit code: 127", 127, "a program it named"),
        ("stderr:\n/bin/bash: -c: line 1: unexpected EOF while looking for matching `''\nExit code: 2", 2, "shell"),
        (
            'stderr:\nTraceback (most recent call last):\n  File "<stdin>", line 2, in <module>\n'
            "NameError: name 'x' is not defined\nExit code: 1",
            1,
            "its own code raised: NameError",
        ),
        ("stderr:\ncp: cannot stat 'clamp.py': No such file or directory\nExit code: 1", 1, "`cp` refused it"),
        (f"stderr:\n{Path('/bin/sh').resolve()}: can't open file 'pytest'\nExit code: 2", 2, "refused it"),
    ],
)
def test_the_models_own_command_failing_is_a_misfire(tmp_path, text, code, why):
    assert why in bash(text, code, tmp_path)


def test_the_workspaces_code_failing_is_not_a_misfire(tmp_path):
    (tmp_path / "main.py").write_text("")
    trace = 'stderr:\nTraceback (most recent call last):\n  File "/w/main.py", line 3, in <module>\nValueError\nExit code: 1'
    usage = "stderr:\nusage: main.py [-h] --count N\nmain.py: error: the following arguments are required\nExit code: 2"
    own_usage = "stderr:\nmain.py: error: the following arguments are required: --count\nExit code: 2"
    assert bash(trace, 1, tmp_path) == ""  # reproducing the failure is often the first step
    assert bash(usage, 2, tmp_path) == "" and bash(own_usage, 2, tmp_path) == ""
    assert bash("", 1, tmp_path) == ""  # grep finding nothing
    assert bash("3 files\n", 0, tmp_path) == ""


def test_a_refused_call_is_not_a_misfire_an_edit_the_tool_could_not_make_is(tmp_path):
    refused = ToolResultBlock("t", "Permission to use Bash(wc:*) was denied.", True)
    assert misfire("Bash", refused, None, tmp_path) == ""
    identical = ToolResultBlock("t", "old_string and new_string are identical, so there is nothing to change.", True)
    assert misfire("Edit", identical, {}, tmp_path).startswith("Edit could not be made: old_string and new_string")

"""File blocks (```python FILE): a fragment merged into its file, and the Edit/Write call that applies it."""

from pathlib import Path

from drivetrain.small.fragments import to_call
from drivetrain.tools import builtin_tools
from drivetrain.tools.base import ToolContext

SCRIPT = '''"""Totals."""

ROWS = [('a', 1), ('b', 2)]


def total(rows):
    result = 0
    for name, qty in rows:
        result += qty
    return result


class Shelf:
    def largest(self, xs):
        return min(xs)


print("total:, total(ROWS))
'''


async def apply(tmp_path: Path, fragment: str, name: str = "s.py"):
    """The call the block becomes, run by the real tool: (tool name, result, file text after)."""
    tool_name, call_input = to_call(name, fragment, tmp_path)
    tool = next(t for t in builtin_tools() if t.name == tool_name)
    result = await tool.call(call_input, ToolContext(cwd=tmp_path))
    return tool_name, result, (tmp_path / name).read_text() if (tmp_path / name).exists() else None


async def test_a_function_replaces_the_one_of_the_same_name_and_nothing_else(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    name, result, text = await apply(tmp_path, "def total(rows):\n    return sum(q for _, q in rows)")
    assert name == "Edit" and not result.is_error
    assert text == SCRIPT.replace(
        "    result = 0\n    for name, qty in rows:\n        result += qty\n    return result\n",
        "    return sum(q for _, q in rows)\n",
    )


async def test_a_method_is_matched_by_name_and_indented_like_the_file(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    _, result, text = await apply(tmp_path, "def largest(self, xs):\n    return max(xs)")
    assert not result.is_error
    assert "    def largest(self, xs):\n        return max(xs)\n" in text and "min(xs)" not in text


async def test_a_single_line_replaces_the_most_similar_line(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    _, result, text = await apply(tmp_path, 'print("total:", total(ROWS))')
    assert not result.is_error and text == SCRIPT.replace('print("total:, total(ROWS))', 'print("total:", total(ROWS))')


async def test_a_whole_file_with_blank_lines_dropped_changes_only_what_differs(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    squeezed = "\n".join(line for line in SCRIPT.replace("min(xs)", "max(xs)").splitlines() if line.strip())
    _, result, text = await apply(tmp_path, squeezed)
    assert not result.is_error and text == SCRIPT.replace("min(xs)", "max(xs)")  # the blank lines stay


async def test_a_new_function_goes_at_the_end(tmp_path):
    (tmp_path / "m.py").write_text("def a():\n    return 1\n")
    _, result, text = await apply(tmp_path, "def b():\n    return 2", "m.py")
    assert not result.is_error and text == "def a():\n    return 1\n\n\ndef b():\n    return 2\n"


async def test_a_new_file_is_written_whole(tmp_path):
    name, result, text = await apply(tmp_path, '{"port": 80}', "conf.json")
    assert name == "Write" and not result.is_error and text == '{"port": 80}\n'


async def test_a_line_like_none_of_the_file_is_new_and_goes_after_the_line_before_it(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    _, result, text = await apply(tmp_path, "ROWS = [('a', 1), ('b', 2)]\nLIMIT = 10")
    assert not result.is_error and text == SCRIPT.replace("('b', 2)]\n", "('b', 2)]\nLIMIT = 10\n")
    _, result, text = await apply(tmp_path, "import numpy as np")  # nothing to follow: at the end
    assert not result.is_error and text.endswith("total(ROWS))\nimport numpy as np\n")


async def test_a_block_the_file_already_holds_changes_nothing_and_says_so(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    _, result, text = await apply(tmp_path, "ROWS = [('a', 1), ('b', 2)]")
    assert result.is_error and "identical" in result.content and text == SCRIPT


async def test_a_config_line_is_changed_in_place(tmp_path):
    (tmp_path / "c.ini").write_text("[db]\nhost = x\nport = 5432\ntimeout = 30\n")
    _, result, text = await apply(tmp_path, "port = 6543", "c.ini")
    assert not result.is_error and text == "[db]\nhost = x\nport = 6543\ntimeout = 30\n"


async def test_a_replaced_line_keeps_the_trailing_comma_the_model_dropped(tmp_path):
    (tmp_path / "c.json").write_text('{\n  "theme": "dark",\n  "debug": false\n}\n')
    _, result, text = await apply(tmp_path, '  "theme": "solarized"', "c.json")
    assert not result.is_error and text == '{\n  "theme": "solarized",\n  "debug": false\n}\n'


async def test_a_python_block_that_only_redefines_one_files_functions_is_that_files_change(tmp_path):
    from drivetrain.small.fragments import home_of

    (tmp_path / "reports.py").write_text("def load(v):\n    return v\n\n\ndef largest(xs):\n    return min(xs)\n")
    (tmp_path / "test_reports.py").write_text("from reports import largest\nassert largest([3, 9]) == 9\n")
    block = "# Corrected largest function\nimport math\n\n\ndef largest(xs):\n    return max(xs)\n"
    assert home_of(block, tmp_path) == ("reports.py", "import math\n\ndef largest(xs):\n    return max(xs)")
    assert home_of("def largest(xs):\n    return max(xs)\nprint(largest([1]))\n", tmp_path) is None  # it does something
    assert home_of("def biggest(xs):\n    return max(xs)\n", tmp_path) is None  # defined nowhere: a new function
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "reports.py").write_text("def largest(xs):\n    return xs[0]\n")
    assert home_of(block, tmp_path) is None  # two files define it: which one is meant is not known
    (tmp_path / ".venv").mkdir()
    (tmp_path / "old" / "reports.py").rename(tmp_path / ".venv" / "reports.py")
    assert home_of(block, tmp_path)[0] == "reports.py"  # hidden folders are not the project's


async def test_a_block_that_leaves_lines_out_and_adds_nothing_deletes_them(tmp_path):
    """Asked to print only "Done: 6 payments", the 1.5B wrote the file back without its debug print (and without
    its blank lines): merged as a fragment, that changed nothing, and the Edit tool said the texts were identical."""
    report = (
        '"""Count."""\n\nITEMS = [1, 2]\n\n\ndef count(items):\n    return len(items)\n\n\n'
        'n = count(ITEMS)\nprint("debug:", ITEMS)\nprint("Done:", n)\n'
    )
    (tmp_path / "r.py").write_text(report)
    squeezed = (
        '"""Count."""\nITEMS = [1, 2]\ndef count(items):\n    return len(items)\nn = count(ITEMS)\nprint("Done:", n)'
    )
    name, result, text = await apply(tmp_path, squeezed, "r.py")
    assert name == "Edit" and not result.is_error and text == report.replace('print("debug:", ITEMS)\n', "")
    # a whole definition left out: the gap it leaves is no wider than the file's widest
    (tmp_path / "m.py").write_text(
        "import sys\n\n\ndef a():\n    return 1\n\n\ndef b():\n    return 2\n\n\nprint(a())\n"
    )
    _, result, text = await apply(tmp_path, "import sys\n\n\ndef a():\n    return 1\n\n\nprint(a())", "m.py")
    assert not result.is_error and text == "import sys\n\n\ndef a():\n    return 1\n\n\nprint(a())\n"
    # lines out of the file's order, or nothing left out: not a deletion
    _, result, text = await apply(tmp_path, "print(a())\nimport sys", "m.py")
    assert result.is_error and "identical" in result.content

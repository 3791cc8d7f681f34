"""Grep: both back-ends (Python fallback always, ripgrep when on PATH) give the same results."""

import shutil
from pathlib import Path

import pytest

from drivetrain.tools import Grep, ToolContext
from drivetrain.tools.glob import IgnoreStack, parse_gitignore

BACKENDS = [
    pytest.param(False, id="python"),
    pytest.param(True, id="rg", marks=pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep not installed")),
]


@pytest.fixture(params=BACKENDS)
def grep(request) -> Grep:
    g = Grep(use_ripgrep=request.param)
    assert bool(g.rg) == request.param
    return g


@pytest.fixture
def tree(tmp_path: Path) -> ToolContext:
    files = {
        "app.py": "import os\n\ndef main():\n    print('Hello')\n    return 0\n",
        "lib/util.py": "def helper():\n    return 'hello world'\n",
        "lib/notes.md": "hello from markdown\n",
        "build/gen.py": "hello = 'generated'\n",
        "secret.log": "hello log\n",
        "keep.log": "hello kept\n",
        ".hidden.py": "hello = 'hidden'\n",
        ".git/config": "hello = git internals\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / ".gitignore").write_text("# generated\nbuild/\n*.log\n!keep.log\n")
    (tmp_path / "blob.bin").write_bytes(b"hello\x00\x01\x02")
    return ToolContext(cwd=tmp_path)


async def test_files_with_matches_respects_gitignore(grep, tree):
    r = await grep.call({"pattern": "hello"}, tree)
    assert not r.is_error
    # Not build/ (dir rule), secret.log (*.log), blob.bin (binary) or .git; keep.log (negation).
    assert r.content.splitlines() == ["Found 4 files", ".hidden.py", "keep.log", "lib/notes.md", "lib/util.py"]


async def test_ignore_case(grep, tree):
    r = await grep.call({"pattern": "HELLO", "-i": True, "glob": "*.py"}, tree)
    assert r.content.splitlines() == ["Found 3 files", ".hidden.py", "app.py", "lib/util.py"]
    r = await grep.call({"pattern": "HELLO", "glob": "*.py"}, tree)
    assert r.content.startswith("No matches found: no line in") and "HELLO" in r.content and not r.is_error


async def test_content_mode_with_line_numbers(grep, tree):
    r = await grep.call({"pattern": r"return \d", "output_mode": "content"}, tree)
    assert r.content == "app.py:5:    return 0"
    r = await grep.call({"pattern": "return", "output_mode": "content", "-n": False, "path": "lib"}, tree)
    assert r.content == "lib/util.py:    return 'hello world'"


async def test_content_context(grep, tree):
    r = await grep.call({"pattern": "def", "output_mode": "content", "-A": 1, "type": "py"}, tree)
    assert r.content.splitlines() == [
        "app.py:3:def main():",
        "app.py-4-    print('Hello')",
        "--",
        "lib/util.py:1:def helper():",
        "lib/util.py-2-    return 'hello world'",
    ]
    r = await grep.call({"pattern": "print", "output_mode": "content", "-C": 1, "path": "app.py"}, tree)
    assert r.content.splitlines() == ["app.py-3-def main():", "app.py:4:    print('Hello')", "app.py-5-    return 0"]


async def test_count_mode(grep, tree):
    (tree.cwd / "many.txt").write_text("x hello\nhello hello\nnone\n")
    r = await grep.call({"pattern": "hello", "output_mode": "count"}, tree)
    assert r.content.splitlines() == [
        "Found 6 matching lines in 5 files",
        ".hidden.py:1",
        "keep.log:1",
        "lib/notes.md:1",
        "lib/util.py:1",
        "many.txt:2",
    ]


async def test_glob_with_folder_and_braces(grep, tree):
    r = await grep.call({"pattern": "hello", "glob": "lib/*.{md,txt}"}, tree)
    assert r.content.splitlines() == ["Found 1 file", "lib/notes.md"]


async def test_explicit_ignored_file_is_searched(grep, tree):
    r = await grep.call({"pattern": "generated", "path": "build/gen.py", "output_mode": "content"}, tree)
    assert r.content == "build/gen.py:1:hello = 'generated'"


async def test_head_limit(grep, tree):
    r = await grep.call({"pattern": "hello", "head_limit": 2}, tree)
    lines = r.content.splitlines()
    assert lines[:3] == ["Found 4 files", ".hidden.py", "keep.log"]
    assert "Showing 2 of 4 results" in r.content


async def test_errors(grep, tree):
    r = await grep.call({"pattern": "("}, tree)
    assert r.is_error and "(" in r.content
    r = await grep.call({"pattern": "x", "path": "missing"}, tree)
    assert r.is_error and "does not exist" in r.content
    r = await grep.call({"pattern": "x", "output_mode": "lines"}, tree)
    assert r.is_error and "output_mode" in r.content
    r = await grep.call({"pattern": "x", "-A": -1}, tree)
    assert r.is_error and "-A" in r.content


async def test_nested_gitignore_and_parent_rules(grep, tree):
    (tree.cwd / "lib" / ".gitignore").write_text("notes.md\n")
    r = await grep.call({"pattern": "hello", "path": "lib"}, tree)
    assert r.content.splitlines() == ["Found 1 file", "lib/util.py"]
    (tree.cwd / "lib" / "x.log").write_text("hello\n")  # *.log from the parent folder's file
    r = await grep.call({"pattern": "hello", "path": "lib"}, tree)
    assert r.content.splitlines() == ["Found 1 file", "lib/util.py"]


def test_gitignore_rules():
    stack = IgnoreStack().push("/r", parse_gitignore("/top.txt\ndocs/*.md\n**/tmp\n*.o\n!keep.o\nout/\n"))
    assert stack.ignored("/r/top.txt", False)
    assert not stack.ignored("/r/sub/top.txt", False)  # anchored
    assert stack.ignored("/r/docs/a.md", False)
    assert not stack.ignored("/r/docs/x/a.md", False)  # * stays in one folder
    assert stack.ignored("/r/a/b/tmp", True)
    assert stack.ignored("/r/deep/x.o", False)
    assert not stack.ignored("/r/keep.o", False)  # negation, last rule wins
    assert stack.ignored("/r/out", True) and not stack.ignored("/r/out", False)  # dir only


def guarded(ctx: ToolContext, *deny: str, ask: tuple[str, ...] = ()) -> ToolContext:
    """The tree with the real Policy's search filter, as the loop hands it to the tools."""
    from drivetrain.control.permissions import Policy, parse_rule

    rules = [parse_rule(r, "deny", "test", ctx.cwd, ctx.cwd) for r in deny]
    rules += [parse_rule(r, "ask", "test", ctx.cwd, ctx.cwd) for r in ask]
    return ToolContext(cwd=ctx.cwd, read_filter=Policy(rules=rules, home=ctx.cwd).search_filter(ctx.cwd))


async def test_files_a_read_deny_rule_covers_are_skipped_and_counted(grep, tree):
    (tree.cwd / ".env").write_text("API_KEY=sk-live-123\n")
    (tree.cwd / "lib" / ".env").write_text("OTHER=nothing to see\n")
    ctx = guarded(tree, "Read(**/.env)")
    r = await grep.call({"pattern": "API_KEY|hello|main", "output_mode": "content"}, ctx)
    assert "sk-live" not in r.content and ".env" not in r.content.split("\n\n")[0]
    assert r.content.endswith("\n\n(2 files skipped: denied by Read(**/.env))")
    assert "app.py" in r.content
    # Counted whether or not they match: the count tells nothing of what they hold.
    r = await grep.call({"pattern": "no such text"}, ctx)
    assert r.content.endswith("(2 files skipped: denied by Read(**/.env))")
    r = await grep.call({"pattern": "hello", "path": "lib"}, ctx)
    assert r.content.splitlines()[-1] == "(1 file skipped: denied by Read(**/.env))"
    r = await grep.call({"pattern": "hello"}, guarded(tree, "Read(~/.ssh/**)"))
    assert "skipped" not in r.content


async def test_a_symlink_to_a_denied_file_is_skipped_too(grep, tree):
    (tree.cwd / ".env").write_text("API_KEY=sk-live-123\n")
    (tree.cwd / "lib" / "notes.txt").symlink_to(tree.cwd / ".env")
    r = await grep.call({"pattern": "API_KEY", "output_mode": "content"}, guarded(tree, "Read(**/.env)"))
    assert "sk-live" not in r.content and "skipped: denied by Read(**/.env)" in r.content  # (rg: no symlinks)


async def test_files_an_ask_rule_covers_are_skipped_unless_searched_directly(grep, tree):
    ctx = guarded(tree, ask=("Read(lib/**)",))
    r = await grep.call({"pattern": "hello"}, ctx)
    assert "lib/" not in r.content.split("\n\n")[0] and "2 files skipped: Read(lib/**) asks" in r.content
    r = await grep.call({"pattern": "hello", "path": "lib"}, ctx)  # the person was asked about lib
    assert r.content.splitlines() == ["Found 2 files", "lib/notes.md", "lib/util.py"]

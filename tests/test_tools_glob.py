"""Glob: patterns with ** and braces, newest first, .git and ignored files skipped, capped."""

import os
from pathlib import Path

import pytest

from drivetrain.tools import Glob, ToolContext
from drivetrain.tools.glob import MAX_RESULTS, expand_braces, split_literal_prefix


def make(root: Path, name: str, mtime: float, text: str = "") -> Path:
    p = root / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    os.utime(p, (mtime, mtime))
    return p


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    make(tmp_path, "old.py", 1_000)
    make(tmp_path, "src/new.py", 3_000)
    make(tmp_path, "src/pkg/mid.py", 2_000)
    make(tmp_path, "src/pkg/data.json", 4_000)
    make(tmp_path, ".git/hooks/x.py", 5_000)
    make(tmp_path, "venv/lib/site.py", 6_000)
    make(tmp_path, ".gitignore", 0, "venv/\n")
    return ToolContext(cwd=tmp_path)


async def test_recursive_newest_first(ctx):
    r = await Glob().call({"pattern": "**/*.py"}, ctx)
    assert not r.is_error
    assert r.content.splitlines() == ["src/new.py", "src/pkg/mid.py", "old.py"]


async def test_single_star_stays_in_one_folder(ctx):
    r = await Glob().call({"pattern": "*.py"}, ctx)
    assert r.content.splitlines() == ["old.py"]
    r = await Glob().call({"pattern": "*.py", "path": "src"}, ctx)
    assert r.content.splitlines() == ["src/new.py"]


async def test_literal_prefix_braces_and_absolute(tmp_path, ctx):
    r = await Glob().call({"pattern": "src/**/*.{py,json}"}, ctx)
    assert r.content.splitlines() == ["src/pkg/data.json", "src/new.py", "src/pkg/mid.py"]
    elsewhere = ToolContext(cwd=tmp_path / "venv")  # outside the cwd: absolute paths
    r = await Glob().call({"pattern": f"{tmp_path}/src/pkg/*"}, elsewhere)
    assert r.content.splitlines() == [f"{tmp_path}/src/pkg/data.json", f"{tmp_path}/src/pkg/mid.py"]


async def test_no_match_is_not_an_error(ctx):
    r = await Glob().call({"pattern": "**/*.rs"}, ctx)
    assert not r.is_error and r.content.startswith("No files match")
    r = await Glob().call({"pattern": "nowhere/**/*.rs"}, ctx)
    assert not r.is_error and r.content.startswith("No files match")


async def test_cap_with_omitted_count(tmp_path):
    for i in range(MAX_RESULTS + 7):
        make(tmp_path, f"f{i:03}.txt", 10_000 + i)
    r = await Glob().call({"pattern": "*.txt"}, ToolContext(cwd=tmp_path))
    lines = r.content.splitlines()
    assert lines[0] == f"f{MAX_RESULTS + 6:03}.txt"  # newest
    assert len(lines) == MAX_RESULTS + 1 and "7 more files omitted" in lines[-1]


async def test_bad_input(ctx):
    assert (await Glob().call({}, ctx)).is_error
    r = await Glob().call({"pattern": "*", "path": "old.py"}, ctx)
    assert r.is_error and "not a directory" in r.content
    r = await Glob().call({"pattern": "*", "path": "missing"}, ctx)
    assert r.is_error and "does not exist" in r.content


def test_helpers():
    assert expand_braces("a.{ts,tsx}") == ["a.ts", "a.tsx"]
    assert expand_braces("{a,b{1,2}}x") == ["ax", "b1x", "b2x"]
    assert split_literal_prefix("src/app/**/*.py") == ("src/app", "**/*.py")
    assert split_literal_prefix("/abs/*.py") == ("/abs", "*.py")
    assert split_literal_prefix("README.md") == ("", "README.md")


async def test_files_a_read_deny_rule_covers_are_skipped_and_counted(ctx):
    from drivetrain.control.permissions import Policy, parse_rule

    make(ctx.cwd, "src/.env", 7_000, "API_KEY=x")
    make(ctx.cwd, "src/pkg/.env", 7_000, "API_KEY=y")
    rules = [parse_rule("Read(**/.env)", "deny", "test", ctx.cwd, ctx.cwd)]
    guarded = ToolContext(cwd=ctx.cwd, read_filter=Policy(rules=rules, home=ctx.cwd).search_filter(ctx.cwd))
    r = await Glob().call({"pattern": "src/**/*"}, guarded)
    assert ".env" not in r.content.replace("Read(**/.env)", "")
    assert r.content.splitlines()[-1] == "(2 files skipped: denied by Read(**/.env))"
    r = await Glob().call({"pattern": "**/.env"}, guarded)
    assert r.content == f"No files match **/.env in {ctx.cwd}. (2 files skipped: denied by Read(**/.env))"
    r = await Glob().call({"pattern": "**/.env"}, ctx)  # no policy: nothing is hidden
    assert r.content.splitlines() == ["src/.env", "src/pkg/.env"]

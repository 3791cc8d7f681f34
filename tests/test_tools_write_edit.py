"""Write and Edit: atomic writes, and Edit errors that say why and what to do."""

import os
import stat
from pathlib import Path

import pytest

from drivetrain.tools import Edit, ToolContext, Write
from drivetrain.tools import write as write_module


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(cwd=tmp_path)


# --- Write ---------------------------------------------------------------------------------


async def test_write_creates_parents_and_reports_size(tmp_path, ctx):
    r = await Write().call({"file_path": "a/b/c.txt", "content": "héllo\nworld\n"}, ctx)
    assert not r.is_error
    assert (tmp_path / "a/b/c.txt").read_text() == "héllo\nworld\n"
    assert "Created" in r.content and "13 bytes" in r.content and "2 lines" in r.content


async def test_write_overwrites_keeps_mode_and_leaves_no_temp_files(tmp_path, ctx):
    target = tmp_path / "run.sh"
    target.write_text("old\n")
    target.chmod(0o750)
    r = await Write().call({"file_path": str(target), "content": "#!/bin/sh\necho new"}, ctx)
    assert not r.is_error and "Overwrote" in r.content
    assert target.read_text() == "#!/bin/sh\necho new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert sorted(os.listdir(tmp_path)) == ["run.sh"]


async def test_write_failure_keeps_original_and_cleans_temp(tmp_path, ctx, monkeypatch):
    target = tmp_path / "keep.txt"
    target.write_text("original")

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(write_module.os, "replace", failing_replace)
    r = await Write().call({"file_path": "keep.txt", "content": "new"}, ctx)
    assert r.is_error and "No space left" in r.content
    assert target.read_text() == "original"
    assert os.listdir(tmp_path) == ["keep.txt"]


async def test_write_through_symlink_keeps_link(tmp_path, ctx):
    (tmp_path / "real.txt").write_text("x")
    (tmp_path / "link.txt").symlink_to("real.txt")
    await Write().call({"file_path": "link.txt", "content": "y"}, ctx)
    assert (tmp_path / "link.txt").is_symlink()
    assert (tmp_path / "real.txt").read_text() == "y"


async def test_write_bad_input(tmp_path, ctx):
    (tmp_path / "d").mkdir()
    assert (await Write().call({"file_path": "x.txt"}, ctx)).is_error
    r = await Write().call({"file_path": "d", "content": "x"}, ctx)
    assert r.is_error and "directory" in r.content


# --- Edit ----------------------------------------------------------------------------------

SOURCE = "def f():\n    return 1\n\n\ndef g():\n    return 1\n"


async def test_edit_replaces_once_and_shows_snippet(tmp_path, ctx):
    p = tmp_path / "m.py"
    p.write_text(SOURCE)
    r = await Edit().call(
        {"file_path": "m.py", "old_string": "def g():\n    return 1", "new_string": "def g():\n    return 2"}, ctx
    )
    assert not r.is_error, r.content
    assert p.read_text() == "def f():\n    return 1\n\n\ndef g():\n    return 2\n"
    assert "Replaced 1 occurrence" in r.content
    assert "     6\t    return 2" in r.content
    assert os.listdir(tmp_path) == ["m.py"]


async def test_edit_not_unique_reports_count_and_lines(tmp_path, ctx):
    p = tmp_path / "m.py"
    p.write_text(SOURCE)
    r = await Edit().call({"file_path": "m.py", "old_string": "return 1", "new_string": "return 2"}, ctx)
    assert r.is_error
    assert "2 occurrences" in r.content and "lines 2, 6" in r.content
    assert "replace_all" in r.content
    assert p.read_text() == SOURCE


async def test_edit_replace_all(tmp_path, ctx):
    p = tmp_path / "m.py"
    p.write_text(SOURCE)
    r = await Edit().call(
        {"file_path": "m.py", "old_string": "return 1", "new_string": "return 2", "replace_all": True}, ctx
    )
    assert not r.is_error
    assert "Replaced 2 occurrences" in r.content
    assert p.read_text() == SOURCE.replace("return 1", "return 2")


async def test_edit_not_found(tmp_path, ctx):
    (tmp_path / "m.py").write_text(SOURCE)
    r = await Edit().call({"file_path": "m.py", "old_string": "return 3", "new_string": "x"}, ctx)
    assert r.is_error and "not found" in r.content


async def test_edit_not_found_but_whitespace_differs(tmp_path, ctx):
    (tmp_path / "m.py").write_text(SOURCE)
    r = await Edit().call(
        {"file_path": "m.py", "old_string": "def g():\n  return 1", "new_string": "def g():\n  return 2"}, ctx
    )
    assert r.is_error
    assert "whitespace" in r.content and "lines 5-6" in r.content
    assert "     6\t    return 1" in r.content  # shows the exact text to copy


async def test_edit_not_found_single_line_spacing(tmp_path, ctx):
    (tmp_path / "m.py").write_text("x = f(a,  b)\n")
    r = await Edit().call({"file_path": "m.py", "old_string": "f(a, b)", "new_string": "g"}, ctx)
    assert r.is_error and "match line 1 if whitespace is ignored" in r.content


async def test_edit_identical_strings(tmp_path, ctx):
    (tmp_path / "m.py").write_text(SOURCE)
    r = await Edit().call({"file_path": "m.py", "old_string": "f", "new_string": "f"}, ctx)
    assert r.is_error and "identical" in r.content


async def test_edit_missing_file(tmp_path, ctx):
    r = await Edit().call({"file_path": "gone.py", "old_string": "a", "new_string": "b"}, ctx)
    assert r.is_error and "does not exist" in r.content and "Write" in r.content


async def test_edit_empty_old_string_creates_new_file(tmp_path, ctx):
    r = await Edit().call({"file_path": "new/n.txt", "old_string": "", "new_string": "hi\n"}, ctx)
    assert not r.is_error
    assert (tmp_path / "new/n.txt").read_text() == "hi\n"


async def test_edit_keeps_crlf_line_endings(tmp_path, ctx):
    p = tmp_path / "w.txt"
    p.write_bytes(b"a\r\nb\r\nc\r\n")
    r = await Edit().call({"file_path": "w.txt", "old_string": "a\nb", "new_string": "A\nB"}, ctx)
    assert not r.is_error, r.content
    assert p.read_bytes() == b"A\r\nB\r\nc\r\n"


async def test_edit_keeps_mode(tmp_path, ctx):
    p = tmp_path / "x.sh"
    p.write_text("echo a\n")
    p.chmod(0o755)
    await Edit().call({"file_path": "x.sh", "old_string": "a", "new_string": "b"}, ctx)
    assert p.read_text() == "echo b\n" and stat.S_IMODE(p.stat().st_mode) == 0o755

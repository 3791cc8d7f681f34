"""Read: numbered lines, windows, and the errors a model needs to recover."""

from pathlib import Path

import pytest

from drivetrain.tools import Read, ToolContext


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(cwd=tmp_path)


async def test_numbers_lines_like_cat_n(tmp_path, ctx):
    (tmp_path / "a.txt").write_text("alpha\nbeta\n")
    r = await Read().call({"file_path": "a.txt"}, ctx)
    assert not r.is_error
    assert r.content == "     1\talpha\n     2\tbeta"


async def test_absolute_path_and_crlf(tmp_path, ctx):
    (tmp_path / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    r = await Read().call({"file_path": str(tmp_path / "w.txt")}, ctx)
    assert r.content == "     1\tone\n     2\ttwo"


async def test_offset_and_limit(tmp_path, ctx):
    (tmp_path / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    r = await Read().call({"file_path": "n.txt", "offset": 4, "limit": 3}, ctx)
    assert not r.is_error
    body, note = r.content.split("\n\n")
    assert body.splitlines() == ["     4\tline 4", "     5\tline 5", "     6\tline 6"]
    assert "lines 4-6 of 10" in note and "offset=7" in note


async def test_default_limit_and_long_lines(tmp_path, ctx):
    (tmp_path / "big.txt").write_text("x" * 5000 + "\n" + "".join(f"{i}\n" for i in range(2500)))
    r = await Read().call({"file_path": "big.txt"}, ctx)
    lines = r.content.split("\n\n")[0].splitlines()
    assert len(lines) == 2000
    assert lines[0].startswith("     1\t" + "x" * 2000 + " [... line cut")
    assert "of 2501" in r.content and "offset=2001" in r.content


async def test_offset_past_end(tmp_path, ctx):
    (tmp_path / "s.txt").write_text("a\nb\n")
    r = await Read().call({"file_path": "s.txt", "offset": 9}, ctx)
    assert r.is_error and "past the end" in r.content and "2 lines" in r.content


async def test_missing_file_suggests_similar_names(tmp_path, ctx):
    (tmp_path / "config.yaml").write_text("k: v\n")
    r = await Read().call({"file_path": "config.yml"}, ctx)
    assert r.is_error
    assert "does not exist" in r.content and "config.yaml" in r.content


async def test_missing_parent_directory(tmp_path, ctx):
    r = await Read().call({"file_path": "nope/x.py"}, ctx)
    assert r.is_error and "does not exist" in r.content


async def test_directory_is_reported_with_entries(tmp_path, ctx):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("")
    (tmp_path / "pkg" / "sub").mkdir()
    r = await Read().call({"file_path": "pkg"}, ctx)
    assert r.is_error
    assert "is a directory" in r.content and "mod.py" in r.content and "sub/" in r.content


async def test_binary_file(tmp_path, ctx):
    (tmp_path / "img.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(100))
    r = await Read().call({"file_path": "img.bin"}, ctx)
    assert r.is_error and "binary" in r.content and "116 bytes" in r.content


async def test_undecodable_file_is_binary(tmp_path, ctx):
    (tmp_path / "latin.dat").write_bytes(b"\xff\xfe\xfa abc")
    r = await Read().call({"file_path": "latin.dat"}, ctx)
    assert r.is_error and "binary" in r.content


async def test_empty_file(tmp_path, ctx):
    (tmp_path / "empty.txt").write_text("")
    r = await Read().call({"file_path": "empty.txt"}, ctx)
    assert not r.is_error and "empty" in r.content


@pytest.mark.parametrize(
    "bad", [{}, {"file_path": ""}, {"file_path": "a", "offset": 0}, {"file_path": "a", "limit": "ten"}]
)
async def test_bad_input(ctx, bad):
    r = await Read().call(bad, ctx)
    assert r.is_error and ("file_path" in r.content or "must be an integer" in r.content)

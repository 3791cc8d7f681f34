"""Path confinement: .., ~, absolute paths and symlinks never take a file tool out of the workspace,
and a parent swapped for a symlink between the check and the write makes the write fail."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from drivetrain.control.permissions import ConfinementError, Policy, confined_write, parse_rule, resolve


@pytest.fixture
def box(tmp_path):
    """A workspace, an outside folder with a secret, and a home outside both."""
    ws, out, home = tmp_path / "ws", tmp_path / "outside", tmp_path / "home"
    for d in (ws / "src", out, home / ".ssh"):
        d.mkdir(parents=True)
    (out / "secret.txt").write_text("secret")
    (home / ".ssh" / "id_rsa").write_text("key")
    (ws / "src" / "a.py").write_text("a")
    os.symlink(out, ws / "link_out")  # a symlink leading out
    os.symlink(ws / "src", ws / "link_in")  # a symlink staying in
    os.symlink(out / "secret.txt", ws / "secret_link")
    return ws, out, home


def policy(box, mode="acceptEdits", rules=()):
    ws, _out, home = box
    return Policy(mode=mode, home=home, rules=[parse_rule(r, b, "test", ws, home) for b, r in rules])


ESCAPES = [
    "../outside/secret.txt",
    "src/../../outside/secret.txt",
    "{out}/secret.txt",
    "~/.ssh/id_rsa",
    "link_out/secret.txt",
    "link_out/new.txt",
    "secret_link",
    "link_in/../../outside/secret.txt",
    "src/../link_out/x",
    "/etc/passwd",
    "./../outside/x",
    "link_out/sub/deeper/new.txt",
]


@pytest.mark.parametrize("tool", ["Read", "Edit", "Write"])
def test_no_escape_through_dots_home_absolute_or_symlinks(box, tool):
    ws, out, _home = box
    p = policy(box)
    escapes = []
    for raw in ESCAPES:
        path = raw.format(out=out)
        d = p.decide(tool, {"file_path": path}, ws)
        if d.behavior == "allow":
            escapes.append((path, d.reason))
    assert escapes == []


def test_paths_inside_stay_allowed(box):
    ws, _, _ = box
    p = policy(box)
    for path in ("src/a.py", "link_in/a.py", "./src/../src/a.py", str(ws / "new.txt"), "deep/new/file.txt"):
        assert p.decide("Edit", {"file_path": path}, ws).behavior == "allow", path
        assert p.decide("Read", {"file_path": path}, ws).behavior == "allow", path


def test_resolve_gives_what_the_path_says_and_where_it_leads(box):
    ws, out, home = box
    r = resolve("link_out/secret.txt", ws, home)
    assert r.lexical == ws / "link_out" / "secret.txt" and r.real == out / "secret.txt"
    assert resolve("~/x", ws, home).lexical == home / "x"
    assert resolve("link_out/../src", ws, home).real == out.parent / "src"  # `..` after a symlink is physical


def test_deny_rules_match_the_path_or_where_it_leads(box):
    ws, out, _home = box
    deny_target = policy(box, rules=[("allow", "Read(//**)"), ("deny", f"Read(/{out}/**)")])
    assert deny_target.decide("Read", {"file_path": "secret_link"}, ws).behavior == "deny"
    deny_link = policy(box, rules=[("deny", "Read(secret_link)")])
    assert deny_link.decide("Read", {"file_path": str(out / "secret.txt")}, ws).behavior == "ask"
    assert deny_link.decide("Read", {"file_path": "secret_link"}, ws).behavior == "deny"


def test_allow_rules_extend_the_workspace_by_where_paths_lead(box):
    ws, out, _home = box
    p = policy(box, mode="default", rules=[("allow", "Read(link_out/**)")])
    # the allow rule names the symlink, but the file really lives outside: not allowed by it
    assert p.decide("Read", {"file_path": "link_out/secret.txt"}, ws).behavior == "ask"
    p = policy(box, mode="default", rules=[("allow", f"Read(/{out}/**)")])
    assert p.decide("Read", {"file_path": "link_out/secret.txt"}, ws).behavior == "allow"


def test_additional_directories_join_the_workspace(box):
    ws, out, home = box
    p = Policy(mode="acceptEdits", home=home, additional_dirs=[out])
    assert p.decide("Edit", {"file_path": str(out / "secret.txt")}, ws).behavior == "allow"
    assert p.decide("Edit", {"file_path": "link_out/new.txt"}, ws).behavior == "allow"


# ---------------------------------------------------------------- confined_write


def test_confined_write_writes_inside(box):
    ws, _, _ = box
    assert confined_write([ws], ws / "src" / "a.py", b"new") is True
    assert (ws / "src" / "a.py").read_bytes() == b"new"
    assert confined_write([ws], "made/up/dirs/f.txt", b"x") is False  # relative to the first root
    assert (ws / "made" / "up" / "dirs" / "f.txt").read_bytes() == b"x"
    assert confined_write([ws], ws / "link_in" / "b.py", b"b") is False  # a symlink inside is fine
    assert (ws / "src" / "b.py").read_bytes() == b"b"


def test_confined_write_keeps_the_mode(box):
    ws, _, _ = box
    f = ws / "run.sh"
    f.write_text("#!/bin/sh\n")
    f.chmod(0o755)
    confined_write([ws], f, b"#!/bin/sh\necho\n")
    assert f.stat().st_mode & 0o777 == 0o755
    assert not [p for p in ws.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("target", ["link_out/x.txt", "../outside/x.txt", "secret_link", "link_out/a/b/c.txt"])
def test_confined_write_refuses_paths_leading_out(box, target):
    ws, out, _ = box
    before = sorted(p.name for p in out.rglob("*"))
    with pytest.raises(ConfinementError):
        confined_write([ws], ws / target, b"pwned")
    assert sorted(p.name for p in out.rglob("*")) == before
    assert (out / "secret.txt").read_text() == "secret"


def test_parent_swapped_for_a_symlink_after_the_check_fails_the_write(box):
    ws, out, _ = box
    (ws / "build").mkdir()
    p = policy(box)
    target = ws / "build" / "out.txt"
    assert p.decide("Write", {"file_path": str(target)}, ws).behavior == "allow"  # the check
    (ws / "build").rmdir()  # the swap: build/ now leads outside
    os.symlink(out, ws / "build")
    with pytest.raises(ConfinementError):
        confined_write([ws], target, b"pwned")  # the write
    assert not (out / "out.txt").exists()


def test_parent_swapped_during_the_walk_fails_the_write(box, monkeypatch):
    """The swap happens inside confined_write, after realpath and after the first folder is opened."""
    ws, out, _ = box
    (ws / "a" / "b").mkdir(parents=True)
    real_open, swapped = os.open, []

    def racing_open(path, flags, mode=0o777, *, dir_fd=None):
        if dir_fd is not None and path == "b" and not swapped:  # just before descending into a/b
            swapped.append(True)
            os.rename(ws / "a" / "b", ws / "a" / "b.old")
            os.symlink(out, ws / "a" / "b")
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", racing_open)
    with pytest.raises(ConfinementError):
        confined_write([ws], ws / "a" / "b" / "f.txt", b"pwned")
    assert swapped and not (out / "f.txt").exists()


def test_final_name_swapped_for_a_symlink_is_replaced_not_followed(box, monkeypatch):
    ws, out, _ = box
    target = ws / "src" / "a.py"
    real_rename = os.rename

    def racing_rename(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        os.unlink(target)
        os.symlink(out / "secret.txt", target)
        return real_rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "rename", racing_rename)
    confined_write([ws], target, b"new")
    assert (out / "secret.txt").read_text() == "secret"
    assert not target.is_symlink() and target.read_bytes() == b"new"


def test_a_battery_of_escapes_writes_nothing_outside(box):
    ws, out, home = box
    files = lambda: {p: p.read_bytes() for d in (out, home) for p in d.rglob("*") if p.is_file()}
    before, refused = files(), 0
    for raw in ESCAPES:
        path = raw.format(out=out)
        with pytest.raises(ConfinementError):
            confined_write([ws], home / path[2:] if path.startswith("~/") else Path(path), b"pwned")
        refused += 1
    assert refused == len(ESCAPES) and files() == before


@pytest.mark.parametrize(
    "pattern, path, outcome",
    [
        ("**/*.py", None, "allow"),
        ("src/**/*.py", ".", "allow"),
        ("../outside/*", None, "ask"),
        ("../../*", "src", "ask"),
        ("/etc/*", None, "ask"),
        ("link_out/*", None, "ask"),
        ("*", "link_out", "ask"),
        ("./src/*.py", None, "allow"),
    ],
)
def test_glob_patterns_cannot_walk_out(box, pattern, path, outcome):
    ws, _, _ = box
    input = {"pattern": pattern, **({"path": path} if path else {})}
    assert policy(box, mode="default").decide("Glob", input, ws).behavior == outcome


def test_glob_prefix_matches_the_glob_tool():
    from drivetrain.control.permissions.policy import glob_literal_prefix
    from drivetrain.tools.glob import split_literal_prefix

    for p in ["**/*.py", "src/app/**/*.py", "../../etc/*", "/etc/passwd", "a/b/c", "x", "./a/*", "/", "{a,b}/c"]:
        assert glob_literal_prefix(p) == split_literal_prefix(p.removeprefix("./"))[0], p

"""Rewind against real git and real files: snapshots in a shadow repository, restored by library call and CLI."""

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import cli_process
from drivetrain.errors import HarnessError
from drivetrain.sessions.rewind import Checkpoints, RestoreReport, RewindError

SRC = Path(__file__).resolve().parents[1] / "src"


def git(ws: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "GIT_OPTIONAL_LOCKS": "0"}
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=ws,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def state(ws: Path) -> dict[str, tuple]:
    """Every file below ws except .git: path → ("link", target) or ("file", bytes, executable)."""
    out = {}
    for root, dirs, files in os.walk(ws):
        dirs[:] = [d for d in dirs if d != ".git" or Path(root) != ws]
        for name in files + [d for d in dirs if (Path(root) / d).is_symlink()]:
            p = Path(root) / name
            rel = p.relative_to(ws).as_posix()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            else:
                out[rel] = ("file", p.read_bytes(), bool(p.stat().st_mode & stat.S_IXUSR))
    return out


def dot_git(ws: Path) -> dict[str, str]:
    return {
        p.relative_to(ws).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (ws / ".git").rglob("*")
        if p.is_file()
    }


@pytest.fixture
def ws(tmp_path):
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "a.txt").write_text("alpha\n")
    (ws / "sub" / "b.txt").write_text("one\ntwo\n")
    (ws / "c.txt").write_text("gamma\n")
    (ws / ".gitignore").write_text("*.log\nbuild/\n.env\n")
    git(ws, "init", "-q")
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "init")
    return ws


@pytest.fixture
def cp(ws, tmp_path):
    return Checkpoints(ws, tmp_path / "home")


def test_restores_edits_and_shell_changes_and_removes_created_files(ws, cp):
    before = state(ws)
    commit = cp.snapshot("s1", 1)
    (ws / "a.txt").write_text("alpha, edited\n")  # what Edit does
    subprocess.run(
        "sed -i 's/two/TWO/' sub/b.txt; rm c.txt; echo new > new.txt; mkdir -p made/deep; echo x > made/deep/f.txt",
        shell=True,
        cwd=ws,
        check=True,
    )
    assert state(ws) != before

    report = cp.restore("s1", 1)

    assert state(ws) == before
    assert not (ws / "made").exists()  # the folders the removed files leave empty go too
    assert report.commit == commit
    assert report.restored == ("a.txt", "c.txt", "sub/b.txt")
    assert report.removed == ("made/deep/f.txt", "new.txt")
    assert report.unchanged == 1  # .gitignore
    data = report.to_json()
    assert data["num_restored"] == 3 and data["removed"] == ["made/deep/f.txt", "new.txt"]
    json.dumps(data)


def test_ignored_files_never_snapshotted_are_left_alone(ws, cp):
    (ws / "run.log").write_text("old log\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.bin").write_bytes(b"\x00old")
    (ws / ".git" / "info").mkdir(exist_ok=True)
    (ws / ".git" / "info" / "exclude").write_text("scratch/\n")
    cp.snapshot("s1", 1)
    (ws / "run.log").write_text("new log\n")
    (ws / "build" / "out.bin").write_bytes(b"\x00new")
    (ws / "build" / "later.o").write_text("obj")
    (ws / "scratch").mkdir()
    (ws / "scratch" / "notes").write_text("mine")
    (ws / "tracked-later.txt").write_text("not ignored: created since")

    report = cp.restore("s1", 1)

    assert (ws / "run.log").read_text() == "new log\n"
    assert (ws / "build" / "out.bin").read_bytes() == b"\x00new"
    assert (ws / "build" / "later.o").exists()
    assert (ws / "scratch" / "notes").read_text() == "mine"  # ignored through the workspace's .git/info/exclude
    assert report.removed == ("tracked-later.txt",)


def test_force_added_ignored_file_is_restored_and_removed_when_created_later(ws, cp):
    gen = ws / "build" / "gen.txt"
    cp.snapshot("s1", 1)
    cp.keep("s1", 1, [gen])  # Write is about to create it: the checkpoint learns it was absent
    gen.parent.mkdir()
    gen.write_text("generated v1\n")
    cp.snapshot("s1", 2, also=[gen])
    gen.write_text("generated v2\n")
    cp.snapshot("s1", 3, also=[gen])

    assert cp.restore("s1", 2).restored == ("build/gen.txt",)
    assert gen.read_text() == "generated v1\n"
    assert cp.restore("s1", 1).removed == ("build/gen.txt",)
    assert not gen.exists() and not gen.parent.exists()


def test_an_ignored_file_edited_later_is_not_deleted_by_a_rewind_before_it_was_known(ws, cp):
    env = ws / ".env"
    env.write_text("SECRET=1\n")
    cp.snapshot("s1", 1)
    cp.snapshot("s1", 2)
    env.write_text("SECRET=2\n")  # an Edit in prompt 2 that nobody reported with keep()
    cp.snapshot("s1", 3, also=[env])
    env.write_text("SECRET=3\n")  # and through Bash in prompt 3

    report = cp.restore("s1", 1)

    assert env.read_text() == "SECRET=2\n"  # its nearest known state, not deleted
    assert ".env" in report.restored
    assert ".env" not in report.removed
    cp.keep("s1", 3, [env])  # already known there: nothing changes
    env2 = ws / "other.env"
    (ws / ".gitignore").write_text("*.log\nbuild/\n.env\n*.env\n")
    env2.write_text("A=1\n")
    cp.keep("s1", 3, [env2])  # reported before the first Edit in prompt 3
    env2.write_text("A=2\n")
    cp.snapshot("s1", 4, also=[env, env2])
    cp.restore("s1", 3)
    assert env2.read_text() == "A=1\n"


def test_the_workspace_git_repository_is_untouched(ws, cp):
    (ws / "forced.log").write_text("tracked although ignored\n")
    git(ws, "add", "-f", "forced.log")
    git(ws, "commit", "-qm", "forced")
    git(ws, "tag", "v1")
    status, head, refs, files = (
        git(ws, "status", "--porcelain", "--ignored"),
        git(ws, "rev-parse", "HEAD"),
        git(ws, "for-each-ref"),
        dot_git(ws),
    )
    cp.snapshot("s1", 1)
    (ws / "forced.log").write_text("changed\n")
    subprocess.run("echo more >> a.txt; echo n > untracked.txt", shell=True, cwd=ws, check=True)
    cp.snapshot("s1", 2)
    assert dot_git(ws) == files
    cp.restore("s1", 1)

    assert dot_git(ws) == files  # first: a `git status` of our own may refresh the index
    assert (ws / "forced.log").read_text() == "tracked although ignored\n"  # tracked by the user: snapshotted
    assert git(ws, "status", "--porcelain", "--ignored") == status
    assert git(ws, "rev-parse", "HEAD") == head and git(ws, "for-each-ref") == refs
    assert not cp.repo.is_relative_to(ws)
    assert cp.repo.parent.name == "rewind" and cp.repo.name.endswith(".git")
    assert cp.repo.name == hashlib.sha256(str(ws.resolve()).encode()).hexdigest()[:16] + ".git"


def test_executable_bit_symlinks_and_type_changes_are_restored(ws, cp):
    script = ws / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    (ws / "link").symlink_to("a.txt")
    (ws / "dirlink").symlink_to("sub")
    (ws / "thing").write_text("a file\n")
    before = state(ws)
    cp.snapshot("s1", 1)
    script.chmod(0o644)
    (ws / "link").unlink()
    (ws / "link").write_text("now a plain file\n")
    (ws / "dirlink").unlink()
    (ws / "thing").unlink()
    (ws / "thing").mkdir()
    (ws / "thing" / "inside").write_text("x")
    (ws / "sub" / "b.txt").unlink()
    (ws / "sub").rmdir()
    (ws / "sub").write_text("a file where a folder was\n")

    report = cp.restore("s1", 1)

    assert state(ws) == before
    assert os.access(script, os.X_OK) and (ws / "link").is_symlink() and os.readlink(ws / "dirlink") == "sub"
    assert "run.sh" in report.restored


def test_two_sessions_on_one_workspace_do_not_clash(ws, cp):
    other = Checkpoints(ws / "sub" / "..", cp.repo.parent.parent)  # the same workspace, spelt differently
    assert other.repo == cp.repo
    cp.snapshot("A", 1)
    (ws / "a.txt").write_text("A's edit\n")
    other.snapshot("B", 1)
    (ws / "b-made.txt").write_text("B's file\n")
    cp.snapshot("A", 2)
    other.snapshot("B", 2)

    assert [c.prompt for c in cp.list("A")] == [1, 2] and [c.prompt for c in cp.list("B")] == [1, 2]
    assert cp.list("A")[0].commit != cp.list("B")[0].commit
    other.restore("B", 1)
    assert (ws / "a.txt").read_text() == "A's edit\n" and not (ws / "b-made.txt").exists()
    cp.restore("A", 1)
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert len(list(cp.repo.glob("index-*"))) == 2  # one private index per session, no throwaway ones left


def test_a_rewind_can_be_undone(ws, cp):
    cp.snapshot("s1", 1)
    (ws / "a.txt").write_text("work worth keeping\n")
    (ws / "made.txt").write_text("also\n")
    (ws / "c.txt").unlink()
    after_work = state(ws)

    first = cp.restore("s1", 1)
    assert first.undo == "before-rewind-1"
    undo = cp.restore("s1", first.undo)

    assert state(ws) == after_work
    assert undo.undo == "before-rewind-2" and set(undo.removed) == {"c.txt"}
    assert [c.prompt for c in cp.list("s1")] == [1]  # safety checkpoints are not prompts


def test_large_files_are_skipped_and_left_alone(ws, tmp_path):
    cp = Checkpoints(ws, tmp_path / "home", max_file_bytes=1000)
    (ws / "huge.bin").write_bytes(b"x" * 5000)
    cp.snapshot("s1", 1)
    (ws / "huge.bin").write_bytes(b"y" * 6000)
    (ws / "a.txt").write_text("changed\n")

    report = cp.restore("s1", 1)

    assert report.skipped == ("huge.bin",) and "huge.bin" not in report.removed
    assert (ws / "huge.bin").read_bytes() == b"y" * 6000
    assert (ws / "a.txt").read_text() == "alpha\n"


def test_a_workspace_that_is_not_a_repository(tmp_path):
    ws = tmp_path / "plain"
    ws.mkdir()
    (ws / "f.txt").write_text("1\n")
    cp = Checkpoints(ws, tmp_path / "home")
    cp.snapshot("s", 1)
    (ws / "f.txt").write_text("2\n")
    (ws / "g.txt").write_text("new\n")
    cp.restore("s", 1)
    assert state(ws) == {"f.txt": ("file", b"1\n", False)}
    assert not (ws / ".git").exists()


def test_files_outside_the_workspace_are_out_of_scope(ws, cp, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("before\n")
    cp.snapshot("s1", 1, also=[outside, ws / ".git" / "config"])
    outside.write_text("after\n")
    cp.restore("s1", 1)
    assert outside.read_text() == "after\n"


def test_errors_say_what_to_do(ws, cp, tmp_path, monkeypatch):
    cp.snapshot("s1", 1)
    with pytest.raises(RewindError, match=r"no checkpoint '7'.*it has: 1"):
        cp.restore("s1", 7)
    with pytest.raises(HarnessError, match="not a session id"):
        cp.snapshot("../evil", 1)
    with pytest.raises(RewindError, match="whole number"):
        cp.snapshot("s1", 0)
    with pytest.raises(RewindError, match="no checkpoint for prompt 5"):
        cp.keep("s1", 5, [ws / "a.txt"])
    with pytest.raises(RewindError, match="does not exist"):
        Checkpoints(tmp_path / "gone", tmp_path / "home").snapshot("s1", 1)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(RewindError, match="needs the `git` command"):
        cp.restore("s1", 1)


def test_cli_end_to_end(ws, tmp_path, monkeypatch):
    home = tmp_path / "dt-home"
    monkeypatch.setenv("DRIVETRAIN_HOME", str(home))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    cp = Checkpoints(ws)  # the home comes from DRIVETRAIN_HOME, as it does in the CLI
    assert cp.repo.parent == home / "rewind"
    cp.snapshot("sess-1", 1)
    (ws / "a.txt").write_text("edited\n")
    (ws / "new.txt").write_text("new\n")

    def rewind(*args):
        return cli_process.run(
            [sys.executable, "-m", "drivetrain", "rewind", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    listed = rewind("sess-1", "--cwd", str(ws))
    assert listed.returncode == 0 and listed.stdout.startswith("1\t")
    proc = rewind("sess-1", "--to", "1", "--cwd", str(ws))
    assert proc.returncode == 0, proc.stderr
    assert "restored a.txt" in proc.stdout and "removed  new.txt" in proc.stdout
    assert "--to before-rewind-1" in proc.stderr
    assert (ws / "a.txt").read_text() == "alpha\n" and not (ws / "new.txt").exists()

    undo = rewind("sess-1", "--to", "before-rewind-1", "--cwd", str(ws), "--json")
    assert undo.returncode == 0, undo.stderr
    report = json.loads(undo.stdout)
    assert report["restored"] == ["a.txt", "new.txt"] and report["undo"] == "before-rewind-2"
    assert (ws / "a.txt").read_text() == "edited\n"

    missing = rewind("sess-1", "--to", "9", "--cwd", str(ws))
    assert missing.returncode == 1 and "no checkpoint '9'" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_report_is_a_frozen_value():
    r = RestoreReport("s", "1", "c" * 40, "before-rewind-1", ("a",), (), 3)
    with pytest.raises(Exception):
        r.unchanged = 4
    assert r.to_json()["num_removed"] == 0


def test_nested_repositories_and_dot_git_paths_are_neither_stored_nor_removed(ws, cp):
    nested = ws / "vendor" / "lib"
    nested.mkdir(parents=True)
    (nested / "code.py").write_text("x = 1\n")
    git(nested, "init", "-q")
    commit = cp.snapshot("s1", 1, also=[ws / ".git" / "config", ws / "vendor" / "lib" / ".git" / "HEAD"])
    stored = subprocess.run(
        ["git", "--git-dir", str(cp.repo), "ls-tree", "-r", "--name-only", commit],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert stored == [".gitignore", "a.txt", "c.txt", "sub/b.txt"]
    (ws / "later").mkdir()
    git(ws / "later", "init", "-q")  # a repository cloned during the session: not ours to delete
    cp.restore("s1", 1)
    assert (nested / "code.py").exists() and (nested / ".git" / "HEAD").exists()
    assert (ws / "later" / ".git" / "HEAD").exists()

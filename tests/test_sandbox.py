"""The bubblewrap sandbox: workspace writable, the rest read-only, no network, fail closed."""

import asyncio
import json
import os
import secrets
import shutil
import socket
import tempfile
import time
from pathlib import Path

import pytest

from drivetrain.errors import HarnessError
from drivetrain.host.sandbox import Sandbox, SandboxUnavailable
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from drivetrain.tools import Bash, ToolContext


def _sandbox_problem() -> str:
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    # a folder of its own: each test worker probes at once, and a probe in the shared /tmp saw another's stand-in
    # .git there, then bwrap could not find it once that probe had removed it
    with tempfile.TemporaryDirectory() as folder:
        try:
            Sandbox(Path(folder)).check()
        except SandboxUnavailable as e:
            return str(e)
    return ""


PROBLEM = _sandbox_problem()
# CI can set DRIVETRAIN_REQUIRE_SANDBOX=1 so a broken sandbox fails these tests instead of skipping them.
needs_bwrap = pytest.mark.skipif(
    bool(PROBLEM) and not os.environ.get("DRIVETRAIN_REQUIRE_SANDBOX"), reason=f"no working sandbox here: {PROBLEM}"
)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    return tmp_path / "ws"


@pytest.fixture
def outside():
    # Not under /tmp: the sandbox gives /tmp a private tmpfs, which would hide the directory
    # and make a failed write prove nothing. /var/tmp is read-only inside, like everything else.
    d = Path(tempfile.mkdtemp(prefix="drivetrain-outside-", dir="/var/tmp"))
    (d / "existing.txt").write_text("readable\n")
    yield d
    shutil.rmtree(d, ignore_errors=True)


async def run(sandbox: Sandbox, command: str, cwd: Path, **kw) -> object:
    return await asyncio.wait_for(Bash(**kw, sandbox=sandbox).call({"command": command}, ToolContext(cwd=cwd)), 20)


# ---------------------------------------------------------------- the command line


def test_wrap_command_line(ws, tmp_path, monkeypatch):
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")  # a repository
    (ws / ".drivetrain").mkdir()
    extra = tmp_path / "cache"
    extra.mkdir()
    monkeypatch.setenv("DRIVETRAIN_HOME", str(ws / "dthome"))  # inside the workspace, but absent
    sandbox = Sandbox(ws, extra_writable=[extra, tmp_path / "missing"])
    argv = sandbox.wrap(["/bin/bash", "-c", "ls"])
    text = " ".join(argv[1:])
    assert text.startswith("--ro-bind / / --dev /dev --proc /proc --tmpfs /tmp ")
    assert f"--bind {tmp_path / 'cache'} {tmp_path / 'cache'}" in text and "missing" not in text
    assert text.index(f"--bind {ws} {ws}") < text.index(f"--ro-bind {ws / '.git/hooks'} {ws / '.git/hooks'}")
    assert f"--ro-bind {ws / '.drivetrain'} {ws / '.drivetrain'}" in text
    # absent, so each gets an empty read-only stand-in: a folder for $DRIVETRAIN_HOME, a file for .git/config
    stand_ins = dict(sandbox.protected())
    assert stand_ins[ws / "dthome"] == "dir" and stand_ins[ws / ".git/config"] == "file"
    assert stand_ins[ws / ".git/hooks"] == "bind" and stand_ins[extra / ".git"] == "dir"
    assert f"{ws / 'dthome'}" in text and f"{ws / '.git/config'}" in text
    cache = sandbox.environment()["XDG_CACHE_HOME"]
    assert f"--bind {cache} {cache}" in text
    for flag in ("--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert argv[-6:] == ["--chdir", str(ws), "--", "/bin/bash", "-c", "ls"]
    assert "--unshare-net" not in Sandbox(ws, allow_network=True).wrap(["true"])
    assert Sandbox(ws).wrap(["true"], cwd=ws / "sub")[-3:] == [str(ws / "sub"), "--", "true"]


def test_git_that_is_not_a_repository_is_protected_whole(ws, tmp_path):
    assert dict(Sandbox(ws).protected())[ws / ".git"] == "dir"  # absent
    (ws / ".git").mkdir()
    assert dict(Sandbox(ws).protected())[ws / ".git"] == "bind"  # an empty folder (a stand-in left by bwrap)
    other = tmp_path / "other"
    other.mkdir()
    (other / ".git").write_text("gitdir: /elsewhere\n")  # a linked worktree's pointer
    assert dict(Sandbox(other).protected())[other / ".git"] == "bind"


# ---------------------------------------------------------------- inside the sandbox


@needs_bwrap
async def test_workspace_writable_outside_read_only(ws, outside):
    r = await run(Sandbox(ws), f"echo hi > made.txt && cat {outside}/existing.txt && touch {outside}/new", ws)
    assert (ws / "made.txt").read_text() == "hi\n"
    assert r.is_error and "readable" in r.content and "Read-only file system" in r.content
    assert not (outside / "new").exists()
    assert r.meta == {"exit_code": 1, "sandboxed": True}


@needs_bwrap
async def test_extra_writable_dirs(ws, outside):
    r = await run(Sandbox(ws, extra_writable=[outside]), f"touch {outside}/new", ws)
    assert not r.is_error and (outside / "new").exists()


@needs_bwrap
async def test_private_tmp(ws):
    r = await run(Sandbox(ws), "echo x > /tmp/drivetrain-sandbox-probe && ls /tmp", ws)
    assert not r.is_error and "drivetrain-sandbox-probe" in r.content
    assert not Path("/tmp/drivetrain-sandbox-probe").exists()


@needs_bwrap
async def test_git_hooks_and_settings_are_read_only(ws, monkeypatch):
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / ".drivetrain").mkdir()
    (ws / ".drivetrain" / "settings.json").write_text("{}")
    home = ws / "home"
    (home / "sessions").mkdir(parents=True)
    monkeypatch.setenv("DRIVETRAIN_HOME", str(home))
    sandbox = Sandbox(ws)
    for target in (".git/hooks/pre-commit", ".git/config", ".drivetrain/settings.json", "home/sessions/s.jsonl"):
        r = await run(sandbox, f"echo evil > {target}", ws)
        assert r.is_error and "Read-only file system" in r.content, target
    assert not (ws / ".git/hooks/pre-commit").exists() and (ws / ".git/config").read_text() == "[core]\n"
    assert (ws / ".drivetrain/settings.json").read_text() == "{}"
    r = await run(sandbox, "echo fine > .git/HEAD && echo fine > notes.txt", ws)  # the rest of .git is git's to write
    assert not r.is_error and (ws / ".git/HEAD").read_text() == "fine\n"


@needs_bwrap
async def test_absent_hooks_and_settings_cannot_be_created(ws, tmp_path, monkeypatch):
    monkeypatch.setenv("DRIVETRAIN_HOME", str(ws / "dthome"))
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")  # a repository without hooks/ or config
    attempts = {
        ws: [
            "mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit",
            "git init -q .",
            "mkdir -p .drivetrain && echo '{}' > .drivetrain/settings.json",
            "mkdir -p dthome/sessions",
        ],
        repo: [
            "mkdir -p .git/hooks && touch .git/hooks/pre-commit",
            "printf '[core]\\n\\tfsmonitor = evil\\n' > .git/config",
            "mkdir -p .drivetrain && touch .drivetrain/settings.json",
        ],
    }
    for where, commands in attempts.items():
        sandbox = Sandbox(where)
        for command in commands:
            r = await run(sandbox, command, where)
            assert r.is_error and "Read-only file system" in r.content, (where, command, r.content)
    for path in (
        ws / ".git/hooks",
        ws / ".git/HEAD",
        ws / ".drivetrain/settings.json",
        ws / "dthome/sessions",
        repo / ".git/hooks/pre-commit",
        repo / ".drivetrain/settings.json",
    ):
        assert not path.exists(), path
    # and the empty mount points bubblewrap made for the stand-ins are gone again
    assert sorted(p.name for p in ws.iterdir()) == [] and sorted(p.name for p in (repo / ".git").iterdir()) == ["HEAD"]
    r = await run(Sandbox(ws), "echo fine > notes.txt && mkdir src", ws)  # the rest of the workspace is writable
    assert not r.is_error and (ws / "notes.txt").exists()


@needs_bwrap
async def test_stand_ins_stay_while_any_sandboxed_command_runs(ws):
    sandbox = Sandbox(ws)
    slow = asyncio.create_task(run(sandbox, "sleep 1; mkdir -p .git/hooks", ws))
    await asyncio.sleep(0.3)
    quick = await run(sandbox, "true", ws)  # ends first: the stand-ins must outlive it
    assert not quick.is_error and (ws / ".git").is_dir()
    r = await slow
    assert r.is_error and "Read-only file system" in r.content
    assert not (ws / ".git").exists()


@needs_bwrap
async def test_private_writable_cache_for_the_session(ws):
    sandbox = Sandbox(ws)
    home_cache = Path.home() / ".cache"
    put = (
        'mkdir -p "${XDG_CACHE_HOME:-$HOME/.cache}/drivetrain-probe" && echo hit > "$XDG_CACHE_HOME/drivetrain-probe/f"'
    )
    r = await run(sandbox, put, ws)
    assert not r.is_error, r.content
    r = await run(sandbox, 'cat "$XDG_CACHE_HOME/drivetrain-probe/f"', ws)  # still there for the next command
    assert not r.is_error and r.content == "hit"
    assert not (home_cache / "drivetrain-probe").exists()  # the real cache is untouched
    if shutil.which("npm"):  # a real tool that keeps its cache under $HOME
        r = await asyncio.wait_for(Bash(sandbox=sandbox).call({"command": "npm cache verify"}, ToolContext(cwd=ws)), 60)
        assert not r.is_error, r.content
    folder = Path(sandbox.environment()["XDG_CACHE_HOME"]).parent
    del sandbox
    import gc

    gc.collect()
    assert not folder.exists()  # gone with the Sandbox


@needs_bwrap
async def test_network_is_off_unless_allowed(ws):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        cmd = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
        r = await run(Sandbox(ws), cmd, ws)
        assert r.is_error and "connected" not in r.content
        r = await run(Sandbox(ws, allow_network=True), cmd, ws)  # the same probe does work with network
        assert not r.is_error and r.content == "connected"
    finally:
        server.close()


@needs_bwrap
async def test_timeout_kills_everything_inside(ws):
    # A shell and a child that both ignore SIGTERM, the child writing a heartbeat to the workspace.
    beat = ws / "beat"
    cmd = "trap '' TERM; (trap '' TERM; while true; do date +%s%N > beat; sleep 0.05; done) & echo started; wait"
    start = time.monotonic()
    r = await asyncio.wait_for(
        Bash(kill_grace=0.3, sandbox=Sandbox(ws)).call({"command": cmd, "timeout": 700}, ToolContext(cwd=ws)), 10
    )
    assert r.is_error and r.content.startswith("Command timed out after 700 ms")
    assert "started" in r.content and r.meta["timed_out"] is True and r.meta["sandboxed"] is True
    assert time.monotonic() - start < 5
    last = beat.read_text()
    await asyncio.sleep(0.5)
    assert beat.read_text() == last  # nothing is left running


@needs_bwrap
async def test_background_processes_end_with_the_command(ws):
    r = await run(Sandbox(ws), "(sleep 0.5; touch late) > /dev/null 2>&1 & echo bg", ws)
    assert not r.is_error and r.content == "bg"
    await asyncio.sleep(1)
    assert not (ws / "late").exists()  # its PID namespace went away with the command


# ---------------------------------------------------------------- fail closed


async def test_missing_bwrap_fails_closed(ws, tmp_path, monkeypatch):
    empty = tmp_path / "emptybin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    marker = ws / "ran"
    with pytest.raises(SandboxUnavailable) as e:
        await Bash(sandbox=Sandbox(ws)).call({"command": f"touch {marker}"}, ToolContext(cwd=ws))
    assert isinstance(e.value, HarnessError)
    message = str(e.value)
    assert "apt-get install bubblewrap" in message and "dnf install bubblewrap" in message
    assert "refuses to run Bash unsandboxed" in message
    await asyncio.sleep(0.2)
    assert not marker.exists()


async def test_broken_bwrap_fails_closed_and_is_tried_once(ws, tmp_path, monkeypatch):
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    fake = bindir / "bwrap"
    fake.write_text(
        f"#!/bin/sh\necho \"$@\" >> {calls}\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    marker = ws / "ran"
    bash = Bash(sandbox=Sandbox(ws))
    for _ in range(2):
        with pytest.raises(SandboxUnavailable, match="uid map: Permission denied") as e:
            await bash.call({"command": f"touch {marker}"}, ToolContext(cwd=ws))
        assert "user namespaces" in str(e.value) and "refuses to run Bash unsandboxed" in str(e.value)
    assert not marker.exists()
    tried = calls.read_text().splitlines()
    assert len(tried) == 1 and tried[0].endswith("-- true")  # only the probe, once; never the command


async def test_unsandboxed_bash_reports_exit_code_meta(ws):
    ok = await Bash().call({"command": "true"}, ToolContext(cwd=ws))
    bad = await Bash().call({"command": "exit 4"}, ToolContext(cwd=ws))
    slow = await Bash(kill_grace=0.1).call({"command": "sleep 5", "timeout": 100}, ToolContext(cwd=ws))
    assert ok.meta == {"exit_code": 0} and bad.meta == {"exit_code": 4}
    assert slow.meta["timed_out"] is True and slow.meta["exit_code"] < 0


# ---------------------------------------------------------------- the environment inside


@needs_bwrap
def test_cli_sandboxed_bash_starts_from_an_allow_list(tmp_path):
    from test_cli import cli  # the real `drivetrain` console script, as a subprocess

    key = "sk-ant-api03-" + secrets.token_hex(20)
    ws, home = tmp_path / "ws", tmp_path / "dthome"
    (ws / ".drivetrain").mkdir(parents=True)
    (ws / ".drivetrain" / "settings.local.json").write_text(
        '{"shellEnvironment": {"passthrough": ["GITHUB_TOKEN", "MY_TOOL_*"]}}'
    )
    env = {
        "ANTHROPIC_API_KEY": key,
        "DRIVETRAIN_HOME": str(home),
        "GITHUB_TOKEN": "ghp_sandboxtoken0123456789",
        "MY_TOOL_DIR": "/opt/tool",
        "SOME_PLAIN_SETTING": "not on the list",
        "LANG": "C.UTF-8",
    }

    def check(body):
        result = body["messages"][-1]["content"][0]
        assert not result.get("is_error"), result
        first, *rest = result["content"].splitlines()
        assert first == "key=[]"
        names = {line.split("=", 1)[0] for line in rest if "=" in line}
        assert {"PATH", "HOME", "LANG", "GITHUB_TOKEN", "MY_TOOL_DIR", "XDG_CACHE_HOME"} <= names, names
        assert not names & {"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "SOME_PLAIN_SETTING", "DRIVETRAIN_HOME"}

    steps = [
        respond([tool_call("Bash", {"command": 'echo "key=[$ANTHROPIC_API_KEY]"; env'})]),
        reply("done", expect=check),
    ]
    with ScriptedServer(steps) as server:
        proc = cli(
            server.url,
            "-p",
            "show the key",
            "--output-format",
            "stream-json",
            "--permission-mode",
            "bypassPermissions",
            "--sandbox",
            cwd=ws,
            env_extra=env,
        )
    assert proc.returncode == 0, proc.stderr
    audit = "".join(p.read_text() for p in (home / "sessions").glob("*.jsonl"))
    assert "key=[]" in proc.stdout and audit
    for text in (proc.stdout, proc.stderr, audit, *(json.dumps(r.body) for r in server.requests)):
        assert key not in text

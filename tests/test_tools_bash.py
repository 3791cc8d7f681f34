"""Bash: real subprocesses, exit codes, timeouts that kill the whole group, capped output."""

import asyncio
import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cli_process
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from drivetrain.tools import Bash, ToolContext


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(cwd=tmp_path)


def alive(pid: int) -> bool:
    """Running, not a zombie (an exited child may wait a while for its reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


async def test_stdout_in_cwd(tmp_path, ctx):
    (tmp_path / "marker.txt").write_text("")
    r = await Bash().call({"command": "ls && echo done"}, ctx)
    assert not r.is_error
    assert r.content == "marker.txt\ndone"


async def test_no_output(ctx):
    r = await Bash().call({"command": "true", "description": "does nothing"}, ctx)
    assert not r.is_error and r.content == "(no output)"


async def test_exit_code_and_stderr(ctx):
    r = await Bash().call({"command": "echo out; echo oops >&2; exit 3"}, ctx)
    assert r.is_error
    assert r.content == "out\nstderr:\noops\nExit code: 3"


async def test_stdin_is_closed(ctx):
    r = await Bash().call({"command": "cat; echo after"}, ctx)
    assert not r.is_error and r.content == "after"


async def test_timeout_kills_child_that_ignores_sigterm(ctx):
    cmd = "bash -c 'trap \"\" TERM; sleep 100 & echo child=$!; wait'"
    start = time.monotonic()
    # wait_for: a regression should fail here, not hang the suite.
    r = await asyncio.wait_for(Bash(kill_grace=0.3).call({"command": cmd, "timeout": 500}, ctx), 5)
    elapsed = time.monotonic() - start
    assert r.is_error
    assert r.content.startswith("Command timed out after 500 ms")
    child = int(re.search(r"child=(\d+)", r.content).group(1))  # partial output kept
    assert elapsed < 3
    deadline = time.monotonic() + 2
    while alive(child) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not alive(child)


async def test_returns_promptly_when_background_child_keeps_pipes(ctx):
    start = time.monotonic()
    r = await Bash().call({"command": "sleep 30 & echo pid=$!"}, ctx)
    assert time.monotonic() - start < 3
    assert not r.is_error and r.content.startswith("pid=")
    os.kill(int(r.content.split("=")[1]), 9)  # our own leftover


async def test_cancellation_kills_process_group(ctx):
    marker = ctx.cwd / "pid"
    task = asyncio.create_task(Bash().call({"command": f"echo $$ > {marker}; sleep 100"}, ctx))
    while not marker.exists() or not marker.read_text().strip():
        await asyncio.sleep(0.02)
    pid = int(marker.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline = time.monotonic() + 2
    while alive(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not alive(pid)


async def test_huge_output_is_capped_keeping_head_and_tail(ctx):
    cmd = "echo FIRST; head -c 2000000 /dev/zero | tr '\\0' x; echo; echo LAST"
    r = await Bash().call({"command": cmd}, ctx)
    assert not r.is_error
    assert r.content.startswith("FIRST\n") and r.content.endswith("LAST")
    assert len(r.content) < 30_500
    cut = int(re.search(r"\[\.\.\. (\d+) characters cut \.\.\.\]", r.content).group(1))
    shown = len(r.content) - len(f"\n[... {cut} characters cut ...]\n")
    assert shown + cut == len("FIRST\n") + 2_000_000 + len("\nLAST")  # the count is exact


async def test_stderr_survives_huge_stdout(ctx):
    cmd = "head -c 1000000 /dev/zero | tr '\\0' y; echo; echo important >&2; exit 1"
    r = await Bash().call({"command": cmd}, ctx)
    assert r.is_error and "stderr:\nimportant" in r.content and r.content.endswith("Exit code: 1")


@pytest.mark.parametrize(
    "bad", [{}, {"command": " "}, {"command": "ls", "timeout": -5}, {"command": "ls", "timeout": "soon"}]
)
async def test_bad_input(ctx, bad):
    r = await Bash().call(bad, ctx)
    assert r.is_error and ("command" in r.content or "timeout" in r.content)


# ---------------------------------------------------------------- the environment: no credentials


async def test_credentials_are_withheld_unless_passed_through(ctx, monkeypatch):
    secrets = {
        "ANTHROPIC_API_KEY": "sk-ant-bash-0123456789",
        "ANTHROPIC_BASE_URL": "https://u:p@gw.example",
        "OPENAI_API_KEY": "sk-openai-bash-0123456789",
        "GITHUB_TOKEN": "ghp_bashtoken0123456789",
        "AWS_SECRET_ACCESS_KEY": "awssecret0123456789",
        "PGPASSWORD": "pgpass0123456789",
        "GOOGLE_APPLICATION_CREDENTIALS": "/etc/creds.json",
        "DRIVETRAIN_SESSION_STORE": "postgresql://app:pgstore0123456789@db.example/dt",
    }
    for name, value in {
        **secrets,
        "BASH_PLAIN_SETTING": "visible",
        "SSH_AUTH_SOCK": "/run/agent.sock",
        "TOKENIZERS_PARALLELISM": "false",
    }.items():
        monkeypatch.setenv(name, value)
    r = await Bash().call({"command": "env"}, ctx)
    env = dict(line.split("=", 1) for line in r.content.splitlines() if "=" in line)
    assert env["BASH_PLAIN_SETTING"] == "visible" and env["SSH_AUTH_SOCK"] == "/run/agent.sock"
    assert env["TOKENIZERS_PARALLELISM"] == "false" and "PATH" in env and "HOME" in env
    assert not [name for name in secrets if name in env]
    assert not [v for v in secrets.values() if v in r.content]
    r = await Bash(env_passthrough=["GITHUB_TOKEN", "AWS_*"]).call({"command": "env"}, ctx)
    env = dict(line.split("=", 1) for line in r.content.splitlines() if "=" in line)
    assert {name for name in secrets if name in env} == {"GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY"}


def test_the_harness_environment_is_private_from_its_children():
    # Else `cat /proc/$PPID/environ` in Bash would show the key the environment no longer holds.
    code = (
        "import ctypes, os, subprocess\n"
        "from drivetrain.host.procs import keep_environment_private\n"
        "assert keep_environment_private()\n"
        "print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))\n"  # PR_GET_DUMPABLE
        "print(subprocess.run(['cat', f'/proc/{os.getpid()}/environ'], capture_output=True).returncode)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    dumpable, cat = done.stdout.split()
    assert dumpable == "0", done.stderr
    if os.geteuid() != 0:  # root may read any process's environment anyway
        assert cat != "0"


def test_cli_bash_never_sees_the_api_key(tmp_path):
    from test_cli import cli  # the real `drivetrain` console script, as a subprocess

    key = "sk-ant-api03-" + secrets.token_hex(20)
    ws, home = tmp_path / "ws", tmp_path / "dthome"
    env = {
        "ANTHROPIC_API_KEY": key,
        "DRIVETRAIN_HOME": str(home),
        "GITHUB_TOKEN": "ghp_clitoken0123456789",
        "MY_SERVICE_PASSWORD": "service-pass-0123456789",
    }
    (ws / ".drivetrain").mkdir(parents=True)
    (ws / ".drivetrain" / "settings.local.json").write_text('{"shellEnvironment": {"passthrough": ["GITHUB_TOKEN"]}}')
    command = 'echo "key=[$ANTHROPIC_API_KEY] gh=[$GITHUB_TOKEN]"; env | grep -c -e API_KEY -e PASSWORD'

    def check(body):
        result = body["messages"][-1]["content"][0]
        assert result["content"].splitlines()[0] == "key=[] gh=[ghp_clitoken0123456789]", result
        assert result["content"].splitlines()[1] == "0" and result["is_error"], result  # grep found nothing

    steps = [respond([tool_call("Bash", {"command": command})]), reply("done", expect=check)]
    with ScriptedServer(steps) as server:
        proc = cli(
            server.url,
            "-p",
            "show the key",
            "--output-format",
            "stream-json",
            "--permission-mode",
            "bypassPermissions",
            cwd=ws,
            env_extra=env,
        )
    assert proc.returncode == 0, proc.stderr
    audit = "".join(p.read_text() for p in (home / "sessions").glob("*.jsonl"))
    assert "key=[]" in proc.stdout and audit  # the tool result went out, and the audit log was written
    for text in (proc.stdout, proc.stderr, audit, *(json.dumps(r.body) for r in server.requests)):
        assert key not in text and "service-pass" not in text
    assert server.requests[0].headers["x-api-key"] == key  # the harness itself still has it


def test_cli_malformed_shell_environment_setting_is_a_clear_error(tmp_path):
    from test_cli import cli

    (tmp_path / ".drivetrain").mkdir()
    (tmp_path / ".drivetrain" / "settings.json").write_text('{"shellEnvironment": {"passthrough": "GITHUB_TOKEN"}}')
    with ScriptedServer([]) as server:
        proc = cli(server.url, "-p", "hi", cwd=tmp_path)
    assert proc.returncode == 1 and "shellEnvironment" in proc.stderr and "settings.json" in proc.stderr
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------- dying with the harness


def test_cli_killed_with_sigkill_takes_its_commands_with_it(tmp_path):
    from test_cli import DRIVETRAIN

    # The shell and a backgrounded grandchild, each writing its pid; then the shell sleeps too.
    command = "sleep 300 & echo $! > bg.pid; echo $$ > sh.pid; sleep 300"
    server = ScriptedServer([respond([tool_call("Bash", {"command": command})]), reply("never sent")]).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update(
        {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-test", "DRIVETRAIN_HOME": str(tmp_path / "home")}
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    proc = cli_process.Popen(
        [DRIVETRAIN, "-p", "sleep", "--permission-mode", "bypassPermissions"],
        cwd=ws,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(pids) < 2 and time.monotonic() < deadline:
            pids = [int(p.read_text()) for p in (ws / "bg.pid", ws / "sh.pid") if p.exists() and p.read_text().strip()]
            time.sleep(0.05)
        assert len(pids) == 2 and all(alive(p) for p in pids), "the Bash command did not start"
        proc.kill()  # SIGKILL: no handler of drivetrain's runs
        proc.wait(10)
        deadline = time.monotonic() + 5
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if alive(p)], "the command outlived drivetrain"
    finally:
        proc.kill()
        for p in pids:
            try:
                os.kill(p, 9)
            except ProcessLookupError:
                pass
        server.close()

"""``drivetrain mcp serve`` driven by the ``mcp`` SDK's own client, and ``drivetrain mcp add | get | list | remove``."""

import json
import os
import re
import subprocess
import sys

import pytest
from mcp import Client, StdioServerParameters

import cli_process
from drivetrain.sessions.file import FileStore
from test_cli import DRIVETRAIN
from test_mcp_client import CALC


def mcp_cli(*args, cwd):
    return cli_process.run(
        [DRIVETRAIN, "mcp", *args], cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


async def test_serve_lists_tools_reads_and_denies_bash_by_the_rules(tmp_path):
    (tmp_path / "notes.txt").write_text("hello from the workspace\n")
    (tmp_path / ".drivetrain").mkdir()
    (tmp_path / ".drivetrain" / "settings.json").write_text(json.dumps({"permissions": {"deny": ["Bash(curl:*)"]}}))
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "DRIVETRAIN_HOME", "PYTHONPATH")}
    params = StdioServerParameters(command=DRIVETRAIN, args=["mcp", "serve"], env=env, cwd=tmp_path)
    async with Client(params) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        read = await client.call_tool("Read", {"file_path": "notes.txt"})
        bash = await client.call_tool("Bash", {"command": "curl https://example.com"})
    assert sorted(listed) == ["Bash", "Edit", "Glob", "Grep", "Read", "Write"]
    assert "file_path" in listed["Read"].input_schema["properties"]
    assert not read.is_error and "hello from the workspace" in read.content[0].text
    assert bash.is_error and "Permission denied" in bash.content[0].text and "Bash(curl:*)" in bash.content[0].text
    # both calls are in the audit log of the server's session
    store = FileStore(os.environ["DRIVETRAIN_HOME"])
    [session] = [s for s in store.list() if s.cwd == str(tmp_path)]
    kinds = [(r["kind"], r.get("tool")) for r in store.read(session.session_id) if r["kind"] != "session"]
    assert kinds == [("intent", "Read"), ("outcome", "Read"), ("denied", "Bash")]


def test_add_get_list_remove(tmp_path):
    added = mcp_cli(
        "add", "calc", "-e", "CALC_KEY=${CALC_VALUE:-x}", "--", sys.executable, CALC, "--flag", cwd=tmp_path
    )
    assert added.returncode == 0, added.stderr
    local = json.loads((tmp_path / ".drivetrain" / "settings.local.json").read_text())
    assert local["mcpServers"]["calc"] == {
        "type": "stdio",
        "command": sys.executable,
        "args": [CALC, "--flag"],
        "env": {"CALC_KEY": "${CALC_VALUE:-x}"},
    }
    web = mcp_cli(
        "add",
        "--transport",
        "http",
        "--scope",
        "project",
        "web",
        "http://127.0.0.1:9/mcp",
        "-H",
        "Authorization: Bearer ${TOKEN}",
        cwd=tmp_path,
    )
    assert web.returncode == 0, web.stderr
    assert json.loads((tmp_path / ".mcp.json").read_text())["mcpServers"]["web"]["headers"] == {
        "Authorization": "Bearer ${TOKEN}"
    }
    got = mcp_cli("get", "web", cwd=tmp_path)
    assert got.returncode == 0 and "Type: http" in got.stdout and "Approved: not yet" in got.stdout
    listed = mcp_cli("list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert re.search(
        r"^calc: CALC_KEY=\S+ \S+python\S* \S+mcp_calc_server.py --flag \(local\) - ✓ connected, "
        r"[1-9]\d* tool\(s\)$",
        listed.stdout,
        re.M,
    ), listed.stdout
    assert "web: http http://127.0.0.1:9/mcp (project) - not approved" in listed.stdout
    again = mcp_cli("add", "calc", "--", "true", cwd=tmp_path)
    assert again.returncode == 1 and "already has an MCP server named 'calc'" in again.stderr
    assert mcp_cli("remove", "calc", cwd=tmp_path).returncode == 0
    assert "calc" not in json.loads((tmp_path / ".drivetrain" / "settings.local.json").read_text())["mcpServers"]
    missing = mcp_cli("get", "calc", cwd=tmp_path)
    assert missing.returncode == 1 and "no MCP server named 'calc'" in missing.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["add", "x"], "a stdio server's command goes after --"),
        (["add", "bad name", "--", "true"], "a name may hold only letters"),
        (["add", "--transport", "http", "x"], "takes one URL"),
    ],
)
def test_add_refuses_what_it_cannot_use(tmp_path, args, message):
    proc = mcp_cli(*args, cwd=tmp_path)
    assert proc.returncode == 1 and message in proc.stderr

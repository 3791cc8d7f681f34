"""The MCP client end to end: the real CLI, real MCP servers written with the SDK (tests/mcp_calc_server.py, on stdio
and streamable HTTP), the scripted model server."""

import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import cli_process
from drivetrain.sessions.file import FileStore
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from test_cli import DRIVETRAIN, cli

CALC = str(Path(__file__).with_name("mcp_calc_server.py"))


def calc_config(name="calc", args=(), env=None, **extra):
    entry = {"command": sys.executable, "args": [CALC, *args], **({"env": env} if env else {}), **extra}
    return json.dumps({"mcpServers": {name: entry}})


def tools_of(body):
    return {t["name"]: t for t in body.get("tools", [])}


def results(body):
    return body["messages"][-1]["content"]


def test_stdio_server_tools_offered_called_failing_crashing_and_restarted(tmp_path):
    """One run through every kind of answer: a result, an image, isError, a timeout (MCP_TOOL_TIMEOUT), content
    that cannot be read, a crash mid-call, then a call that works again (the server restarted), with ${VAR}
    expanded in args and env."""

    def offered(body):
        add = tools_of(body)["mcp__calc__add"]
        assert add["description"] == "Add two integers."
        assert add["input_schema"]["properties"]["a"]["type"] == "integer"
        assert add["input_schema"]["required"] == ["a", "b"]
        assert "mcp__calc__hang" in tools_of(body) and "Read" in tools_of(body)

    def answered(body):
        add, picture, fail, hang, garbled = results(body)
        assert add["content"] == "5" and not add.get("is_error")
        assert picture["content"][0]["type"] == "image" and picture["content"][0]["source"]["media_type"] == "image/png"
        assert fail["is_error"] is True and "failed on purpose: no" in str(fail["content"])
        assert hang["is_error"] is True and "did not answer within 1.5 s (MCP_TOOL_TIMEOUT)" in hang["content"]
        assert garbled["is_error"] is True and "returned content drivetrain cannot read" in garbled["content"]

    def crashed(body):
        [r] = results(body)
        assert r["is_error"] is True and "crashed during crash" in r["content"] and "restarted" in r["content"]

    def restarted(body):
        add, who = results(body)
        assert add["content"] == "7" and not add.get("is_error"), add
        assert json.loads(who["content"]) == {"argv": ["from-env", "fallback"], "env": {"CALC_KEY": "from-env/x"}}

    steps = [
        respond(
            [
                tool_call("mcp__calc__add", {"a": 2, "b": 3}),
                tool_call("mcp__calc__picture", {}),
                tool_call("mcp__calc__fail", {"reason": "no"}),
                tool_call("mcp__calc__hang", {}),
                tool_call("mcp__calc__garbled", {}),
            ],
            expect=offered,
        ),
        respond([tool_call("mcp__calc__crash", {})], expect=answered),
        respond([tool_call("mcp__calc__add", {"a": 3, "b": 4}), tool_call("mcp__calc__whoami", {})], expect=crashed),
        reply("done", expect=restarted),
    ]
    config = calc_config(args=["${CALC_ARG}", "${CALC_UNSET:-fallback}"], env={"CALC_KEY": "${CALC_ARG}/x"})
    with ScriptedServer(steps) as server:
        proc = cli(
            server.url,
            "-p",
            "use calc",
            "--mcp-config",
            config,
            "--allowedTools",
            "mcp__calc",
            "--output-format",
            "json",
            cwd=tmp_path,
            env_extra={"CALC_ARG": "from-env", "MCP_TOOL_TIMEOUT": "1500"},
        )
    assert proc.returncode == 0, proc.stderr
    # every call is in the audit log like a built-in one: what ran, who allowed it, how it ended
    records = FileStore(os.environ["DRIVETRAIN_HOME"]).read(json.loads(proc.stdout)["session_id"])
    intents = [(r["tool"], r["decided_by"]) for r in records if r["kind"] == "intent"]
    assert intents[0] == ("mcp__calc__add", "--allowedTools") and len(intents) == 8
    assert [r["is_error"] for r in records if r["kind"] == "outcome"].count(True) == 4  # fail, hang, garbled, crash
    for line in (
        "MCP server 'calc' crashed during crash",
        "MCP server 'calc' restarted",
        "hang did not answer within 1.5 s",
        "returned content drivetrain cannot read",
    ):
        assert line in proc.stderr, proc.stderr


def project_server(tmp_path):
    """A .mcp.json server that leaves a mark when it starts."""
    marker = tmp_path / "started.txt"
    (tmp_path / ".mcp.json").write_text(calc_config(name="proj", args=["--mark", str(marker)]))
    return marker


def test_an_unapproved_project_server_never_starts_and_a_server_denied_whole_is_not_offered(tmp_path):
    """Under bypassPermissions a deny rule for the whole server still holds: its tools are not offered at all (the
    scripted server would reject a history calling a tool the request does not list, as the API does)."""
    marker = project_server(tmp_path)
    (tmp_path / ".drivetrain").mkdir()
    (tmp_path / ".drivetrain" / "settings.json").write_text(json.dumps({"permissions": {"deny": ["mcp__calc"]}}))

    def nothing_offered(body):
        assert not [n for n in tools_of(body) if n.startswith("mcp__")] and "Read" in tools_of(body)

    with ScriptedServer([reply("ok", expect=nothing_offered)]) as server:
        proc = cli(
            server.url,
            "-p",
            "hi",
            "--mcp-config",
            calc_config(),
            "--permission-mode",
            "bypassPermissions",
            cwd=tmp_path,
        )
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()
    assert "skipped MCP server 'proj'" in proc.stderr and '"enabledMcpjsonServers": ["proj"]' in proc.stderr


def test_an_approved_project_server_starts_beside_servers_that_fail_to_and_hooks_match_it(tmp_path):
    """One server's command does not exist, another never answers the handshake (MCP_TIMEOUT): both are said on
    stderr, the approved project server beside them is offered, a PreToolUse hook matching ``mcp__.*`` blocks
    its call and not Read's, and the run goes on."""
    marker = project_server(tmp_path)
    (tmp_path / ".drivetrain").mkdir()
    (tmp_path / ".drivetrain" / "settings.local.json").write_text(json.dumps({"enabledMcpjsonServers": ["proj"]}))
    hook = {"matcher": "mcp__.*", "hooks": [{"type": "command", "command": "echo no mcp today >&2; exit 2"}]}
    (tmp_path / ".drivetrain" / "settings.json").write_text(json.dumps({"hooks": {"PreToolUse": [hook]}}))
    (tmp_path / "a.txt").write_text("a\n")
    config = json.dumps(
        {
            "mcpServers": {
                "missing": {"command": "no-such-mcp-server-here"},
                "silent": {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]},
            }
        }
    )

    def only_proj(body):
        assert "mcp__proj__add" in tools_of(body)
        assert not [n for n in tools_of(body) if n.startswith(("mcp__missing", "mcp__silent"))]

    def blocked(body):
        add, read = results(body)
        assert add["is_error"] is True and "no mcp today" in add["content"]
        assert not read.get("is_error")

    steps = [
        respond(
            [tool_call("mcp__proj__add", {"a": 1, "b": 1}), tool_call("Read", {"file_path": "a.txt"})], expect=only_proj
        ),
        reply("ok", expect=blocked),
    ]
    with ScriptedServer(steps) as server:
        proc = cli(
            server.url,
            "-p",
            "hi",
            "--mcp-config",
            config,
            "--allowedTools",
            "mcp__proj",
            cwd=tmp_path,
            env_extra={"MCP_TIMEOUT": "3000"},
        )
    assert proc.returncode == 0, proc.stderr
    assert marker.exists() and "skipped" not in proc.stderr
    assert "MCP server 'missing' failed to start: command not found" in proc.stderr, proc.stderr
    assert "MCP server 'silent' did not start within 3 s (MCP_TIMEOUT)" in proc.stderr


@pytest.fixture(scope="module", params=["http", "sse"])
def http_calc(request):
    """The calc server on streamable HTTP, then on SSE: (transport, host:port), once for the module each."""
    proc = subprocess.Popen([sys.executable, CALC, f"--{request.param}"], stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:  # uvicorn says where it listens once it does
            if "Uvicorn running on" in line:
                yield request.param, line.split("http://")[1].split()[0]
                break
        else:
            pytest.fail("the HTTP MCP server did not start")
    finally:
        proc.kill()
        proc.wait()


def test_http_and_sse_servers_with_an_expanded_url(tmp_path, http_calc):
    transport, host = http_calc
    path = "mcp" if transport == "http" else "sse"
    config = json.dumps(
        {
            "mcpServers": {
                "web": {
                    "type": transport,
                    "url": f"http://${{CALC_HOST}}/{path}",
                    "headers": {"X-Calc": "${CALC_HOST:-none}"},
                }
            }
        }
    )
    steps = [
        respond([tool_call("mcp__web__add", {"a": 20, "b": 22})], expect=lambda b: "mcp__web__add" in tools_of(b)),
        reply("42", expect=lambda b: results(b)[0]["content"] == "42"),
    ]
    with ScriptedServer(steps) as server:
        proc = cli(
            server.url,
            "-p",
            "add",
            "--mcp-config",
            config,
            "--allowedTools",
            "mcp__web__add",
            cwd=tmp_path,
            env_extra={"CALC_HOST": host},
        )
    assert proc.returncode == 0, proc.stderr


def test_a_killed_run_takes_its_stdio_servers_with_it(tmp_path):
    """SIGKILL runs no handler: the watchdog (host/procs.py) ends the server's process group, a child of the
    server that would not end on the closed stdin included."""
    marker, asked, held = tmp_path / "pid", threading.Event(), threading.Event()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    with ScriptedServer([reply("never read", expect=lambda b: asked.set(), hold=held)]) as server:
        env.update({"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k", "ANTHROPIC_MODEL": "claude-sonnet-4-6"})
        run = cli_process.Popen(
            [DRIVETRAIN, "-p", "hi", "--mcp-config", calc_config(args=["--mark", str(marker)])],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert asked.wait(60), "the run never asked the model"  # the servers have started by then
            pidfds = [os.pidfd_open(int(pid)) for pid in marker.read_text().split()]  # the server and its child
            run.kill()
            run.wait()
            for fd in pidfds:  # readable once the process has ended
                assert select.select([fd], [], [], 15)[0], "the MCP server's process group outlived the killed run"
                os.close(fd)
        finally:
            held.set()
            run.kill()


def test_interactive_mode_asks_before_a_project_server_starts_and_keeps_the_answer(tmp_path):
    """Asked with the full command line; the answer is kept where the approval of a later run is read (the test
    above shows a kept approval starting the server without a question)."""
    import pexpect

    marker = project_server(tmp_path)
    with ScriptedServer([]) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
        env.update(
            {
                "ANTHROPIC_BASE_URL": server.url,
                "ANTHROPIC_API_KEY": "sk-test",
                "TERM": "xterm",
                "PROMPT_TOOLKIT_NO_CPR": "1",
            }
        )
        child = pexpect.spawn(
            DRIVETRAIN, cwd=str(tmp_path), env=env, encoding="utf-8", timeout=180, dimensions=(40, 400)
        )
        child.delaybeforesend = None
        child.expect_exact("wants to start the MCP server 'proj':")
        child.expect_exact(f"{sys.executable} {CALC} --mark {marker}")
        child.expect_exact("[y/N]")
        assert not marker.exists()  # nothing ran before the answer
        child.sendline("y")
        child.expect_exact("/exit to leave")
        child.send("/exit\r")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
    assert marker.exists()
    local = json.loads((tmp_path / ".drivetrain" / "settings.local.json").read_text())
    assert local["enabledMcpjsonServers"] == ["proj"]


def test_expansion_in_every_field_and_a_missing_variable():
    from drivetrain.errors import ConfigError
    from drivetrain.mcp.config import parse_servers

    [web, local] = parse_servers(
        {
            "mcpServers": {
                "web": {
                    "type": "http",
                    "url": "https://${HOST}/mcp",
                    "headers": {"Authorization": "Bearer ${TOKEN:-none}"},
                },
                "local": {"command": "${BIN:-calc}", "args": ["--key=${KEY}"], "env": {"K": "${KEY}"}},
            }
        },
        "test",
        "flag",
    )
    env = {"HOST": "example.com", "KEY": "k1"}
    assert web.expanded(env).url == "https://example.com/mcp"
    assert dict(web.expanded(env).headers) == {"Authorization": "Bearer none"}
    assert (local.expanded(env).command, local.expanded(env).args, dict(local.expanded(env).env)) == (
        "calc",
        ("--key=k1",),
        {"K": "k1"},
    )
    with pytest.raises(ConfigError, match=r"uses \$\{KEY\}, which is not set"):
        local.expanded({})


def test_a_malformed_mcp_config_is_refused_before_anything_runs(tmp_path):
    with ScriptedServer([]) as server:
        proc = cli(server.url, "-p", "hi", "--mcp-config", '{"mcpServers": {"x": {"args": []}}}', cwd=tmp_path)
    assert proc.returncode == 1
    assert "--mcp-config: MCP server 'x': \"type\" must be one of stdio, http, sse" in proc.stderr, proc.stderr

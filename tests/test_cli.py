"""The real `drivetrain` console script, as a subprocess, against the scripted server."""

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import cli_process
from drivetrain.sessions.log import SessionLog
from drivetrain.sessions.open import open_store
from drivetrain.testing import ScriptedServer, http_error, reply, respond, text, tool_call

DRIVETRAIN = str(Path(sys.executable).parent / "drivetrain")


def cli(server_url, *args, cwd, env_extra=None, stdin=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update(
        {"ANTHROPIC_BASE_URL": server_url, "ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_MODEL": "claude-sonnet-4-6"}
    )
    env.update(env_extra or {})
    return cli_process.run(
        [DRIVETRAIN, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )


def seed_workspace(tmp_path):
    (tmp_path / "a.py").write_text("import os\nprint(os.getcwd())\n# end\n")  # 3 lines
    (tmp_path / "b.py").write_text("".join(f"x{i} = {i}\n" for i in range(5)))  # 5 lines
    (tmp_path / "c.py").write_text("".join(f"# line {i}\n" for i in range(7)))  # 7 lines
    return tmp_path


def line_count_script():
    def results_are_real(body):
        results = body["messages"][-1]["content"]
        assert [r["tool_use_id"] for r in results] == ["toolu_a", "toolu_b", "toolu_c"]
        last_lines = [r["content"].rstrip("\n").splitlines()[-1] for r in results]
        assert [int(line.split("\t")[0]) for line in last_lines] == [3, 5, 7], last_lines

    return [
        respond(
            [
                text("Reading the three files."),
                tool_call("Read", {"file_path": "a.py"}, id="toolu_a"),
                tool_call("Read", {"file_path": "b.py"}, id="toolu_b"),
                tool_call("Read", {"file_path": "c.py"}, id="toolu_c"),
            ]
        ),
        respond(
            [tool_call("Write", {"file_path": "total.txt", "content": "15\n"}, id="toolu_w")], expect=results_are_real
        ),
        reply(
            "The three files have 15 lines in total; written to total.txt.",
            expect=lambda b: b["messages"][-1]["content"][0].get("is_error") is not True,
        ),
    ]


def test_seed_line_count_task_end_to_end(tmp_path):
    ws = seed_workspace(tmp_path)
    with ScriptedServer(line_count_script()) as server:
        proc = cli(
            server.url,
            "-p",
            "Count the lines of each .py file, write the total to total.txt, report it.",
            "--permission-mode",
            "acceptEdits",
            cwd=ws,
        )
    assert proc.returncode == 0, proc.stderr
    assert (ws / "total.txt").read_text() == "15\n"
    assert "15 lines" in proc.stdout


def test_stream_json_events(tmp_path):
    ws = seed_workspace(tmp_path)
    with ScriptedServer(line_count_script()) as server:
        proc = cli(server.url, "-p", "count", "--output-format", "stream-json", "--allowedTools", "Write", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    permissions = [e for e in lines if e.get("subtype") == "permission"]
    events = [e for e in lines if e.get("subtype") not in ("permission", "turn_usage")]
    assert [e["type"] for e in events] == ["system", "assistant", "user", "assistant", "user", "assistant", "result"]
    assert [(p["tool_name"], p["decision"]) for p in permissions] == [("Read", "allow")] * 3 + [("Write", "allow")]
    assert permissions[-1]["decided_by"] == "--allowedTools" and "mode:default" in permissions[0]["decided_by"]
    init = events[0]
    assert init["subtype"] == "init" and init["cwd"] == str(ws) and init["model"] == "claude-sonnet-4-6"
    assert init["tools"] == ["Read", "Write", "Edit", "Bash", "Grep", "Glob", "Task"]
    assert init["permissionMode"] == "default"
    assert [b["type"] for b in events[1]["message"]["content"]] == ["text", "tool_use", "tool_use", "tool_use"]
    assert [b["tool_use_id"] for b in events[2]["message"]["content"]] == ["toolu_a", "toolu_b", "toolu_c"]
    result = events[-1]
    assert result["subtype"] == "success" and result["is_error"] is False and result["num_turns"] == 3
    assert result["session_id"] == init["session_id"] and result["stop_reason"] == "end_turn"
    assert result["usage"]["output_tokens"] > 0 and isinstance(result["total_cost_usd"], float)


def test_json_result_object(tmp_path):
    with ScriptedServer([reply("hello")]) as server:
        proc = cli(server.url, "-p", "hi", "--output-format", "json", cwd=tmp_path)
    assert proc.returncode == 0
    result = json.loads(proc.stdout)
    assert {k: result[k] for k in ("type", "subtype", "is_error", "result", "num_turns")} == {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "hello",
        "num_turns": 1,
    }
    assert result["duration_ms"] >= 0 and "session_id" in result


def test_unknown_model_has_null_cost(tmp_path):
    with ScriptedServer([reply("hello")]) as server:
        proc = cli(server.url, "-p", "hi", "--output-format", "json", "--model", "my-own-model", cwd=tmp_path)
    assert json.loads(proc.stdout)["total_cost_usd"] is None
    assert server.requests[0].body["model"] == "my-own-model"


def test_verbose_turn_log(tmp_path):
    ws = seed_workspace(tmp_path)
    with ScriptedServer(line_count_script()) as server:
        proc = cli(server.url, "-p", "count", "--verbose", "--permission-mode", "acceptEdits", cwd=ws)
    err = proc.stderr
    assert "[turn 1] stop_reason=tool_use" in err and "[turn 3] stop_reason=end_turn" in err
    assert '→ Read {"file_path": "a.py"}' in err and "3\\t# end" in err
    assert "trajectory: tool_use → tool_use → end_turn" in err


def test_max_turns_exits_non_zero_with_error_subtype(tmp_path):
    steps = [respond([tool_call("Glob", {"pattern": "*.py"})]) for _ in range(2)]
    with ScriptedServer(steps) as server:
        proc = cli(server.url, "-p", "loop", "--max-turns", "2", "--output-format", "json", cwd=tmp_path)
    assert proc.returncode != 0
    result = json.loads(proc.stdout)
    assert result["subtype"] == "error_max_turns" and result["is_error"] is True and result["num_turns"] == 2


def test_system_prompt_flags(tmp_path):
    def check(body):
        assert body["system"] == "You are terse.\n\nAlways answer in French."

    with ScriptedServer([reply("oui", expect=check)]) as server:
        proc = cli(
            server.url,
            "-p",
            "hi",
            "--system-prompt",
            "You are terse.",
            "--append-system-prompt",
            "Always answer in French.",
            cwd=tmp_path,
        )
    assert proc.returncode == 0 and proc.stdout.strip() == "oui"


def test_default_system_prompt_carries_the_workspace(tmp_path):
    seed_workspace(tmp_path)

    def check(body):
        assert str(tmp_path) in body["system"] and "a.py" in body["system"] and "Read" in body["system"]

    with ScriptedServer([reply("ok", expect=check)]) as server:
        assert cli(server.url, "-p", "hi", cwd=tmp_path).returncode == 0


def test_prompt_from_stdin(tmp_path):
    def check(body):
        assert body["messages"][0]["content"][0]["text"] == "summarise\n\nsome piped text"

    with ScriptedServer([reply("ok", expect=check)]) as server:
        proc = cli(server.url, "-p", "summarise", cwd=tmp_path, stdin="some piped text\n")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("mode", ["default", "acceptEdits", "plan", "bypassPermissions"])
def test_permission_modes_are_accepted(tmp_path, mode):
    with ScriptedServer([reply("ok")]) as server:
        proc = cli(server.url, "-p", "hi", "--permission-mode", mode, "--output-format", "stream-json", cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout.splitlines()[0])["permissionMode"] == mode


def test_rejected_key_is_a_clear_error_and_exit_1(tmp_path):
    with ScriptedServer([http_error(401, "authentication_error", "invalid x-api-key")]) as server:
        proc = cli(server.url, "-p", "hi", cwd=tmp_path)
    assert proc.returncode == 1
    assert "rejected" in proc.stderr and "ANTHROPIC_API_KEY" in proc.stderr and "Traceback" not in proc.stderr


def test_unreachable_server_is_a_clear_error(tmp_path):
    proc = cli("http://127.0.0.1:9", "-p", "hi", cwd=tmp_path, env_extra={"DRIVETRAIN_MAX_RETRIES": "0"})
    assert proc.returncode == 1 and "could not be reached" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_prompt_is_a_usage_error(tmp_path):
    proc = cli("http://127.0.0.1:9", "-p", cwd=tmp_path)
    assert proc.returncode == 2 and "needs a prompt" in proc.stderr


def test_print_mode_denies_what_would_ask_and_the_run_goes_on(tmp_path):
    def check(body):
        res = body["messages"][-1]["content"][0]
        assert res["is_error"] and "denied" in res["content"].lower() and "rm" in res["content"]

    steps = [
        respond([tool_call("Bash", {"command": "git status; rm -rf build"}, id="toolu_rm")]),
        reply("I could not delete it.", expect=check),
    ]
    with ScriptedServer(steps) as server:
        proc = cli(
            server.url, "-p", "clean", "--output-format", "json", "--allowedTools", "Bash(git status:*)", cwd=tmp_path
        )
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["result"] == "I could not delete it."
    assert result["permission_denials"] == [
        {"tool_name": "Bash", "tool_use_id": "toolu_rm", "tool_input": {"command": "git status; rm -rf build"}}
    ]


def test_disallowed_tools_win_even_in_bypass_mode(tmp_path):
    def check(body):
        assert body["messages"][-1]["content"][0]["is_error"]

    steps = [respond([tool_call("Bash", {"command": "git push origin main"})]), reply("ok", expect=check)]
    with ScriptedServer(steps) as server:
        proc = cli(
            server.url,
            "-p",
            "push",
            "--permission-mode",
            "bypassPermissions",
            "--disallowedTools",
            "Bash(git push:*)",
            cwd=tmp_path,
        )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
)
def test_sandboxed_bash_cannot_write_outside_the_workspace(tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir(), outside.mkdir()

    def check(body):
        inside, escape, root = body["messages"][-1]["content"]
        assert root["is_error"] and "Read-only file system" in root["content"]
        assert not inside.get("is_error"), inside
        # the sandbox's /tmp is private, so the outside folder is either absent or read-only in there
        assert escape["is_error"] and (
            "Read-only file system" in escape["content"] or "No such file or directory" in escape["content"]
        )

    steps = [
        respond(
            [
                tool_call("Bash", {"command": "touch made-inside"}),
                tool_call("Bash", {"command": f"touch {outside}/escaped"}),
                tool_call("Bash", {"command": "touch /drivetrain-sandbox-escape"}),
            ]
        ),
        reply("ok", expect=check),
    ]
    with ScriptedServer(steps) as server:
        proc = cli(server.url, "-p", "touch", "--permission-mode", "bypassPermissions", "--sandbox", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    assert (ws / "made-inside").exists() and not (outside / "escaped").exists()
    assert not Path("/drivetrain-sandbox-escape").exists()


def test_malformed_settings_file_is_a_clear_error(tmp_path):
    (tmp_path / ".drivetrain").mkdir()
    (tmp_path / ".drivetrain" / "settings.json").write_text('{"permissions": {"allow": ["Bash(git status"]}}')
    with ScriptedServer([]) as server:
        proc = cli(server.url, "-p", "hi", cwd=tmp_path)
    assert proc.returncode == 1 and "settings.json" in proc.stderr and "Bash(git status" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_default_mode_comes_from_settings_unless_given(tmp_path):
    (tmp_path / ".drivetrain").mkdir()
    (tmp_path / ".drivetrain" / "settings.json").write_text('{"permissions": {"defaultMode": "plan"}}')
    with ScriptedServer([reply("ok"), reply("ok")]) as server:
        from_settings = cli(server.url, "-p", "hi", "--output-format", "stream-json", cwd=tmp_path)
        from_flag = cli(
            server.url, "-p", "hi", "--output-format", "stream-json", "--permission-mode", "acceptEdits", cwd=tmp_path
        )
    assert json.loads(from_settings.stdout.splitlines()[0])["permissionMode"] == "plan"
    assert json.loads(from_flag.stdout.splitlines()[0])["permissionMode"] == "acceptEdits"


def test_no_provider_configured_means_the_local_model_said_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env["DRIVETRAIN_LOCAL_MODEL"] = str(tmp_path / "missing.gguf")  # fails fast after the choice is announced
    proc = subprocess.run(
        [DRIVETRAIN, "-p", "hi"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    lines = [line for line in proc.stderr.splitlines() if "embedded local model" in line]
    assert len(lines) == 1 and "no ANTHROPIC_* or OPENAI_* settings" in lines[0]
    assert proc.returncode == 1 and "missing.gguf" in proc.stderr and "Traceback" not in proc.stderr


def test_the_developers_own_home_does_not_reach_the_tests(tmp_path):
    """A developer's ~/.drivetrain (here a fake one, with a hook that leaves a mark and a rule that would change
    a result) must not change what the tests see, and their audit logs must not land in it: run a CLI test as a
    developer would, in a fresh pytest with HOME set to that home and no DRIVETRAIN_HOME."""
    real_home, mark = tmp_path / "real-home", tmp_path / "hook-ran"
    (real_home / ".drivetrain").mkdir(parents=True)
    (real_home / ".drivetrain" / "settings.json").write_text(
        json.dumps(
            {
                "permissions": {"deny": ["Read"]},
                "hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": f"touch {mark}"}]}]},
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DRIVETRAIN_HOME", "PYTEST_ADDOPTS")}
    env["HOME"] = str(real_home)
    test = f"{__file__}::test_stream_json_events"  # it fails if the Read deny rule applies
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        cwd=Path(__file__).parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not mark.exists(), "the hook in the developer's home ran"
    assert [p.name for p in (real_home / ".drivetrain").iterdir()] == ["settings.json"]  # no audit log there


def test_a_budget_flag_ends_the_run_with_its_subtype(tmp_path):
    steps = [respond([tool_call("Glob", {"pattern": "*.py"})], usage={"input_tokens": 900, "output_tokens": 200})]
    with ScriptedServer(steps) as server:  # a second request would find no step
        proc = cli(server.url, "-p", "loop", "--max-tokens-total", "1000", "--output-format", "json", cwd=tmp_path)
    result = json.loads(proc.stdout)
    assert proc.returncode == 1 and result["subtype"] == "error_max_tokens_total" and result["num_turns"] == 1


def test_resume_continue_fork_and_compact_through_the_cli(tmp_path):
    def sees(*texts):
        def check(body):
            seen = [b.get("text") for m in body["messages"] for b in m["content"] if b.get("type") == "text"]
            assert all(any(t in (s or "") for s in seen) for t in texts), seen

        return check

    with ScriptedServer([reply("one")]) as server:
        first = json.loads(cli(server.url, "-p", "first", "--output-format", "json", cwd=tmp_path).stdout)
    sid = first["session_id"]
    with ScriptedServer([reply("two", expect=sees("first", "second"))]) as server:
        second = json.loads(
            cli(server.url, "-p", "--resume", sid, "second", "--output-format", "json", cwd=tmp_path).stdout
        )
    assert (second["session_id"], second["result"]) == (sid, "two")
    with ScriptedServer([reply("three", expect=sees("first", "second", "third"))]) as server:
        third = json.loads(cli(server.url, "-p", "--continue", "third", "--output-format", "json", cwd=tmp_path).stdout)
    assert third["session_id"] == sid
    with ScriptedServer([reply("four", expect=sees("first", "fourth"))]) as server:
        fork = json.loads(
            cli(server.url, "-p", "-r", sid, "--fork-session", "fourth", "--output-format", "json", cwd=tmp_path).stdout
        )
    assert fork["session_id"] != sid and fork["result"] == "four"
    with ScriptedServer([reply("We said one, two and three.")]) as server:
        proc = cli(server.url, "compact", sid, cwd=tmp_path)
    assert proc.returncode == 0 and f"compacted {sid}" in proc.stdout, proc.stderr
    with ScriptedServer([reply("five", expect=sees("first", "We said one, two and three.", "fifth"))]) as server:
        fifth = json.loads(cli(server.url, "-p", "-r", sid, "fifth", "--output-format", "json", cwd=tmp_path).stdout)
    assert fifth["result"] == "five"
    with ScriptedServer([]) as server:
        proc = cli(server.url, "-p", "--resume", "no-such-session", "x", cwd=tmp_path)
    assert proc.returncode == 1 and "no-such-session" in proc.stderr


def test_resuming_a_session_with_only_its_first_record_sends_no_empty_request(tmp_path):
    sid = str(uuid.uuid4())  # a run killed right after its session record, before its prompt was saved
    SessionLog(open_store(), sid, "claude-sonnet-4-6").begin(cwd=str(tmp_path), model="claude-sonnet-4-6")
    with ScriptedServer([]) as server:
        proc = cli(server.url, "-p", "--resume", sid, cwd=tmp_path)
        assert server.requests == []
    assert proc.returncode == 1 and "cut short before its prompt was saved: give a prompt" in proc.stderr

    def asks_hi(body):
        assert [m["content"][0]["text"] for m in body["messages"]] == ["hi"]

    with ScriptedServer([reply("hello", expect=asks_hi)]) as s:
        proc = cli(s.url, "-p", "--resume", sid, "hi", "--output-format", "json", cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout)["result"] == "hello", proc.stderr


def test_interventions_show_in_the_turn_log_and_in_stream_json(tmp_path):
    same = {"pattern": "*.py"}
    steps = [respond([tool_call("Glob", same)]) for _ in range(5)]
    with ScriptedServer(steps) as server:
        proc = cli(server.url, "-p", "look", "--verbose", "--output-format", "stream-json", cwd=tmp_path)
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    loops = [e for e in events if e.get("subtype") == "loop_detected"]
    assert [(e["pattern"], e["action"]) for e in loops] == [
        ("repeat", "refused"),
        ("repeat", "refused"),
        ("repeat", "ended"),
    ]
    assert "  ! loop (repeat) refused: Glob" in proc.stderr
    assert events[-1]["subtype"] == "error_loop_detected"


def test_a_resumed_session_gets_max_turns_counted_from_its_prompt(tmp_path):
    loop = [respond([tool_call("Glob", {"pattern": f"*.{i}"})]) for i in range(3)]
    with ScriptedServer([*loop, reply("done")]) as server:
        first = json.loads(cli(server.url, "-p", "look", "--output-format", "json", cwd=tmp_path).stdout)
    with ScriptedServer(loop) as server:  # a fourth request would find no step: the server fails it
        proc = cli(
            server.url,
            "-p",
            "--resume",
            first["session_id"],
            "look again",
            "--max-turns",
            "3",
            "--output-format",
            "json",
            cwd=tmp_path,
        )
        sent = len(server.requests)
    result = json.loads(proc.stdout)
    assert sent == 3 and result["subtype"] == "error_max_turns" and proc.returncode == 1, proc.stderr


def test_the_wall_budget_holds_during_a_model_request_too(tmp_path):
    """A local model's long reply is minutes on a CPU: the budget does not wait for it to end."""
    import time

    steps = [
        respond([tool_call("Glob", {"pattern": "*.py"})]),
        respond([tool_call("Glob", {"pattern": "*"})], delay=20),
    ]
    with ScriptedServer(steps) as server:
        started = time.monotonic()
        proc = cli(server.url, "-p", "go", "--max-wall-time", "1.5", "--output-format", "json", cwd=tmp_path)
        took = time.monotonic() - started
        server.take_remaining()
    result = json.loads(proc.stdout)
    assert proc.returncode == 1 and result["subtype"] == "error_max_wall_time" and result["num_turns"] == 1, result
    assert took < 15, took  # not the 20 s the second answer was held back


def test_an_ascii_terminal_gets_the_help_and_errors_with_what_it_cannot_show_replaced(tmp_path):
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}  # a new interpreter: cli_process would not fork this
    shown = subprocess.run([DRIVETRAIN, "--help"], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert shown.returncode == 0 and b"Traceback" not in shown.stderr, shown.stderr[-500:]
    assert b"--max-turns" in shown.stdout and shown.stdout.isascii() and b"?" in shown.stdout  # the "…" in it

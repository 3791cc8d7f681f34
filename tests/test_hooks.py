"""Hooks: real shell scripts in subprocesses and Python callables, merged into one HookOutcome."""

import asyncio
import json
import logging
import time
from pathlib import Path

import pytest

from drivetrain.control.hooks import HOOK_EVENTS, HookOutcome, Hooks


def script(tmp_path: Path, name: str, body: str) -> str:
    """An executable shell script in tmp_path; returns the command that runs it."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def answer(tmp_path: Path, name: str, data: dict) -> str:
    """A hook that reads its stdin and prints ``data`` as JSON."""
    return script(tmp_path, name, f"cat > /dev/null\ncat <<'EOF'\n{json.dumps(data)}\nEOF\n")


def pre(decision: str, reason: str = "", **extra) -> dict:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
            **extra,
        }
    }


def payload(tmp_path: Path, **fields) -> dict:
    return {"session_id": "s1", "cwd": str(tmp_path), **fields}


def bash_call(tmp_path: Path, command: str = "ls") -> dict:
    return payload(tmp_path, tool_name="Bash", tool_input={"command": command}, tool_use_id="toolu_1")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# ---------------------------------------------------------------- PreToolUse


@pytest.mark.parametrize("decision", ["allow", "deny", "ask"])
async def test_pretooluse_json_decision(tmp_path, decision):
    hooks = Hooks()
    cmd = answer(tmp_path, "h.sh", pre(decision, f"because {decision}"))
    hooks.add_command("PreToolUse", cmd)
    out = await hooks.run("PreToolUse", bash_call(tmp_path))
    assert out.decision == decision
    assert out.reason == f"because {decision}"
    assert out.block is (decision == "deny")
    assert out.sources == [cmd] and out.errors == []


async def test_most_restrictive_decision_wins_with_its_reason(tmp_path):
    hooks = Hooks()
    for i, d in enumerate(["allow", "deny", "ask"]):
        hooks.add_command("PreToolUse", answer(tmp_path, f"h{i}.sh", pre(d, f"{d} says so")))
    out = await hooks.run("PreToolUse", bash_call(tmp_path))
    assert out.decision == "deny" and out.block
    assert out.reason == "deny says so"


async def test_legacy_top_level_decision(tmp_path):
    hooks = Hooks()
    hooks.add_command("PreToolUse", answer(tmp_path, "h.sh", {"decision": "approve", "reason": "fine"}))
    out = await hooks.run("PreToolUse", bash_call(tmp_path))
    assert out.decision == "allow" and out.reason == "fine"
    hooks.add_command("PreToolUse", answer(tmp_path, "b.sh", {"decision": "block", "reason": "no rm"}))
    out = await hooks.run("PreToolUse", bash_call(tmp_path))
    assert out.decision == "deny" and out.block and out.reason == "no rm"


async def test_updated_input_last_registered_wins(tmp_path):
    hooks = Hooks()
    hooks.add_command("PreToolUse", answer(tmp_path, "a.sh", pre("allow", updatedInput={"command": "ls -a"})))
    hooks.add_command("PreToolUse", answer(tmp_path, "b.sh", pre("allow", updatedInput={"command": "ls -l"})))
    out = await hooks.run("PreToolUse", bash_call(tmp_path))
    assert out.updated_input == {"command": "ls -l"}


async def test_exit_2_blocks_with_stderr_as_reason(tmp_path):
    hooks = Hooks()
    body = 'echo \'{"decision": "approve"}\'\necho "rm -rf is not allowed" >&2\nexit 2\n'
    hooks.add_command("PreToolUse", script(tmp_path, "h.sh", body))
    out = await hooks.run("PreToolUse", bash_call(tmp_path, "rm -rf /"))
    assert out.block and out.decision == "deny"
    assert out.reason == "rm -rf is not allowed"  # stdout (and its JSON) is ignored on exit 2


async def test_other_exit_code_is_a_non_blocking_error(tmp_path, caplog):
    hooks = Hooks()
    hooks.add_command("PreToolUse", script(tmp_path, "h.sh", "echo 'lint crashed' >&2\nexit 1\n"))
    with caplog.at_level(logging.WARNING, logger="drivetrain.control.hooks"):
        out = await hooks.run("PreToolUse", bash_call(tmp_path))
    assert out.decision is None and not out.block
    assert len(out.errors) == 1 and "exited with code 1" in out.errors[0] and "lint crashed" in out.errors[0]
    assert "lint crashed" in caplog.text  # loud, not only kept


async def test_invalid_json_is_reported(tmp_path):
    hooks = Hooks()
    hooks.add_command("PreToolUse", script(tmp_path, "h.sh", "echo '{\"decision\": '\n"))
    out = await hooks.run("PreToolUse", bash_call(tmp_path))
    assert out.decision is None
    assert len(out.errors) == 1 and "invalid JSON" in out.errors[0]


async def test_bad_fields_are_reported_and_the_rest_applies(tmp_path):
    hooks = Hooks()
    hooks.add(
        "PreToolUse",
        lambda p: {
            "hookSpecificOutput": {"permissionDecision": "maybe", "updatedInput": "ls", "additionalContext": "note"}
        },
    )
    out = await hooks.run("PreToolUse", bash_call(tmp_path))
    assert out.decision is None and out.updated_input is None
    assert out.additional_context == ["note"]
    assert "maybe" in out.errors[0] and "updatedInput" in out.errors[0]


async def test_timeout_kills_the_whole_group_even_if_it_ignores_sigterm(tmp_path):
    hooks = Hooks()
    pidfile = tmp_path / "pids"
    # The shell and its child both ignore SIGTERM (ignored signals survive exec): only SIGKILL ends them.
    cmd = script(tmp_path, "h.sh", f"trap '' TERM\nsleep 30 &\necho $$ $! > {pidfile}\nwait\n")
    hooks.add_command("PreToolUse", cmd, timeout=0.5)
    started = time.monotonic()
    out = await hooks.run("PreToolUse", bash_call(tmp_path))
    assert time.monotonic() - started < 4
    assert len(out.errors) == 1 and "timed out after 0.5s" in out.errors[0]
    assert out.decision is None and not out.block
    pids = [int(p) for p in pidfile.read_text().split()]
    await asyncio.sleep(0.1)
    assert not any(alive(p) for p in pids)


async def test_cancelling_run_kills_the_hook(tmp_path):
    hooks = Hooks()
    pidfile = tmp_path / "pid"
    hooks.add_command("Stop", script(tmp_path, "h.sh", f"echo $$ > {pidfile}\nexec sleep 30\n"))
    task = asyncio.create_task(hooks.run("Stop", payload(tmp_path)))
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.1)
    assert not alive(int(pidfile.read_text()))


# ---------------------------------------------------------------- matching, payload, concurrency


async def test_matcher_is_a_full_regex_on_the_tool_name(tmp_path):
    hooks = Hooks()
    hooks.add("PreToolUse", lambda p: pre("deny", "edits"), matcher="Edit|Write")
    hooks.add("PreToolUse", lambda p: pre("ask", "mcp"), matcher="mcp__.*")
    for matcher in (None, "", "*"):
        hooks.add("PostToolUse", lambda p: {"hookSpecificOutput": {"additionalContext": "seen"}}, matcher=matcher)

    async def decision(tool):
        return (await hooks.run("PreToolUse", payload(tmp_path, tool_name=tool))).decision

    assert await decision("Edit") == "deny" and await decision("Write") == "deny"
    assert await decision("MultiEdit") is None and await decision("Edit2") is None  # fullmatch, not search
    assert await decision("mcp__github__create_issue") == "ask"
    assert await decision("Bash") is None
    out = await hooks.run("PostToolUse", payload(tmp_path), tool_name="Anything")
    assert out.additional_context == ["seen"] * 3


async def test_matcher_is_ignored_for_non_tool_events(tmp_path):
    hooks = Hooks()
    hooks.add("Stop", lambda p: {"decision": "block", "reason": "keep going"}, matcher="Bash")
    out = await hooks.run("Stop", payload(tmp_path, stop_hook_active=False))
    assert out.block


async def test_shell_hook_gets_payload_on_stdin_and_project_dir_env(tmp_path):
    hooks = Hooks()
    seen = tmp_path / "seen.json"
    env = tmp_path / "env"
    hooks.add_command(
        "PreToolUse",
        script(tmp_path, "h.sh", f'cat > {seen}\necho "$CLAUDE_PROJECT_DIR|$DRIVETRAIN_PROJECT_DIR|$(pwd)" > {env}\n'),
    )
    out = await hooks.run("PreToolUse", bash_call(tmp_path))
    assert out == HookOutcome()
    assert json.loads(seen.read_text()) == {**bash_call(tmp_path), "hook_event_name": "PreToolUse"}
    assert env.read_text().strip() == f"{tmp_path}|{tmp_path}|{tmp_path}"


async def test_shell_hook_gets_no_credentials_unless_passed_through(tmp_path, monkeypatch):
    secrets = {
        "ANTHROPIC_API_KEY": "sk-ant-hook-0123456789",
        "OPENAI_API_KEY": "sk-openai-0123456789",
        "GITHUB_TOKEN": "ghp_hooktoken0123456789",
        "DB_PASSWORD": "hunter2hunter2",
    }
    for name, value in {**secrets, "HOOK_PLAIN_SETTING": "visible"}.items():
        monkeypatch.setenv(name, value)
    seen = tmp_path / "env"
    cmd = f"env > {seen}"
    for passthrough, visible in (((), set()), (("GITHUB_TOKEN", "DB_*"), {"GITHUB_TOKEN", "DB_PASSWORD"})):
        hooks = Hooks(env_passthrough=passthrough)
        hooks.add_command("Stop", cmd)
        out = await hooks.run("Stop", payload(tmp_path))
        assert out.errors == []
        env = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
        assert env["HOOK_PLAIN_SETTING"] == "visible"
        assert {name for name in secrets if name in env} == visible
        assert not [v for name, v in secrets.items() if name not in visible and v in seen.read_text()]


def test_from_settings_passes_the_passthrough_on(tmp_path):
    hooks = Hooks.from_settings([(tmp_path / "s.json", {})], ["GITHUB_TOKEN"])
    assert hooks.env_passthrough == ("GITHUB_TOKEN",)


async def test_matching_hooks_run_concurrently(tmp_path):
    # Each hook waits for the other's marker: both succeed only if they run at the same time.
    hooks = Hooks()
    for me, other in (("a", "b"), ("b", "a")):
        hooks.add_command(
            "Stop",
            script(
                tmp_path,
                f"{me}.sh",
                (
                    f"touch {tmp_path}/{me}\n"
                    f"for i in $(seq 50); do [ -f {tmp_path}/{other} ] && exit 2; sleep 0.05; done\nexit 1\n"
                ),
            ),
        )
    out = await hooks.run("Stop", payload(tmp_path))
    assert out.errors == []
    assert out.block and len(out.sources) == 2


async def test_identical_commands_run_once(tmp_path):
    hooks = Hooks()
    counter = tmp_path / "count"
    cmd = f"echo x >> {counter}"
    hooks.add_command("Stop", cmd)
    hooks.add_command("Stop", cmd)
    await hooks.run("Stop", payload(tmp_path))
    assert counter.read_text() == "x\n"


# ---------------------------------------------------------------- other events


async def test_posttooluse_updated_output_and_context(tmp_path):
    hooks = Hooks()
    hooks.add_command(
        "PostToolUse",
        answer(
            tmp_path,
            "h.sh",
            {
                "hookSpecificOutput": {
                    "hookEventName": "PostToolUse",
                    "updatedToolOutput": "[redacted]",
                    "additionalContext": "3 lint warnings",
                }
            },
        ),
    )
    out = await hooks.run("PostToolUse", {**bash_call(tmp_path), "tool_response": {"stdout": "secret"}})
    assert out.updated_output == "[redacted]"
    assert out.additional_context == ["3 lint warnings"]
    assert not out.block


async def test_posttooluse_block_feeds_reason(tmp_path):
    hooks = Hooks()
    hooks.add_command("PostToolUse", answer(tmp_path, "h.sh", {"decision": "block", "reason": "tests fail now"}))
    hooks.add_command("PostToolUse", script(tmp_path, "e.sh", "echo 'format it' >&2; exit 2"))
    out = await hooks.run("PostToolUse", bash_call(tmp_path))
    assert out.block and out.decision is None
    assert out.reason == "tests fail now\nformat it"


async def test_userpromptsubmit_plain_stdout_is_context(tmp_path):
    hooks = Hooks()
    hooks.add_command("UserPromptSubmit", "echo 'Current branch: main'")
    hooks.add_command(
        "UserPromptSubmit",
        answer(
            tmp_path,
            "h.sh",
            {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "Sprint ends Friday"}},
        ),
    )
    hooks.add_command("PreToolUse", "echo 'plain text elsewhere is ignored'")
    out = await hooks.run("UserPromptSubmit", payload(tmp_path, prompt="fix the bug"))
    assert out.additional_context == ["Current branch: main", "Sprint ends Friday"]
    assert not out.block
    assert await hooks.run("PreToolUse", bash_call(tmp_path)) == HookOutcome()


async def test_userpromptsubmit_block(tmp_path):
    hooks = Hooks()
    hooks.add_command("UserPromptSubmit", answer(tmp_path, "h.sh", {"decision": "block", "reason": "has a secret"}))
    out = await hooks.run("UserPromptSubmit", payload(tmp_path, prompt="key=sk-123"))
    assert out.block and out.reason == "has a secret"
    hooks = Hooks()
    hooks.add_command("UserPromptSubmit", "echo 'no prompts today' >&2; exit 2")
    out = await hooks.run("UserPromptSubmit", payload(tmp_path, prompt="hi"))
    assert out.block and out.reason == "no prompts today"


async def test_stop_block_keeps_the_model_working(tmp_path):
    hooks = Hooks()
    seen = tmp_path / "seen.json"
    hooks.add_command(
        "Stop",
        script(
            tmp_path, "h.sh", (f'cat > {seen}\necho \'{{"decision": "block", "reason": "tests are still red"}}\'\n')
        ),
    )
    out = await hooks.run("Stop", payload(tmp_path, stop_hook_active=False))
    assert out.block and out.reason == "tests are still red"
    assert json.loads(seen.read_text())["stop_hook_active"] is False


async def test_continue_false_stops_the_run(tmp_path):
    hooks = Hooks()
    hooks.add_command(
        "PreCompact",
        answer(
            tmp_path,
            "h.sh",
            {"continue": False, "stopReason": "budget spent", "systemMessage": "heads up", "suppressOutput": True},
        ),
    )
    out = await hooks.run("PreCompact", payload(tmp_path, trigger="auto"))
    assert out.stop and out.stop_reason == "budget spent"
    assert out.system_messages == ["heads up"]
    assert not out.block


async def test_wrong_hook_event_name_is_reported(tmp_path):
    hooks = Hooks()
    hooks.add(
        "PostToolUse", lambda p: {"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedToolOutput": "x"}}
    )
    out = await hooks.run("PostToolUse", bash_call(tmp_path))
    assert out.updated_output is None and "not PostToolUse" in out.errors[0]


# ---------------------------------------------------------------- Python callables


async def test_python_callables_sync_and_async(tmp_path):
    hooks = Hooks()
    calls = []

    def sync_hook(p):
        calls.append(p["hook_event_name"])
        p["tool_input"]["command"] = "mutated"  # a copy: no other hook or caller sees this
        return pre("ask", "sync wants a human")

    async def async_hook(p):
        await asyncio.sleep(0)
        calls.append(p["tool_input"]["command"])
        return pre("allow", updatedInput={"command": "ls -la"})

    hooks.add("PreToolUse", sync_hook)
    hooks.add("PreToolUse", async_hook)
    hooks.add("PreToolUse", lambda p: None)
    call = bash_call(tmp_path)
    out = await hooks.run("PreToolUse", call)
    assert sorted(calls) == ["PreToolUse", "ls"]
    assert call["tool_input"] == {"command": "ls"}
    assert out.decision == "ask" and out.reason == "sync wants a human"
    assert out.updated_input == {"command": "ls -la"}
    assert out.errors == []
    assert any("sync_hook" in s for s in out.sources) and any("async_hook" in s for s in out.sources)


async def test_python_callable_that_raises_is_reported(tmp_path, caplog):
    hooks = Hooks()

    def broken(p):
        raise RuntimeError("database is down")

    hooks.add("Stop", broken)
    hooks.add("Stop", lambda p: "not a dict")
    with caplog.at_level(logging.WARNING, logger="drivetrain.control.hooks"):
        out = await hooks.run("Stop", payload(tmp_path))
    assert not out.block
    assert "RuntimeError: database is down" in out.errors[0]
    assert "expected a dict" in out.errors[1]
    assert "database is down" in caplog.text


async def test_python_callables_time_out(tmp_path):
    hooks = Hooks()

    async def slow_async(p):
        await asyncio.sleep(30)

    def slow_sync(p):
        time.sleep(0.6)
        return {"decision": "block"}

    hooks.add("Stop", slow_async, timeout=0.2)
    hooks.add("Stop", slow_sync, timeout=0.2)
    started = time.monotonic()
    out = await hooks.run("Stop", payload(tmp_path))
    assert time.monotonic() - started < 0.55
    assert not out.block
    assert len(out.errors) == 2 and all("timed out after 0.2s" in e for e in out.errors)


# ---------------------------------------------------------------- settings


def test_from_settings_reads_the_claude_code_shape(tmp_path):
    user, project = tmp_path / "user.json", tmp_path / "project.json"
    hooks = Hooks.from_settings(
        [
            (user, {"model": "x"}),
            (
                project,
                {
                    "hooks": {
                        "PreToolUse": [
                            {"matcher": "Bash|Edit", "hooks": [{"type": "command", "command": "a", "timeout": 30}]}
                        ],
                        "Stop": [{"hooks": [{"type": "command", "command": "b"}]}],
                    }
                },
            ),
        ]
    )
    assert hooks
    assert not Hooks() and not Hooks.from_settings([(user, {})])
    [a, b] = hooks._hooks
    assert (a.event, a.command, a.timeout) == ("PreToolUse", "a", 30)
    assert a.matches("Edit") and not a.matches("Read")
    assert (b.event, b.command, b.timeout, b.matcher) == ("Stop", "b", 60, None)


async def test_from_settings_hooks_run(tmp_path):
    cmd = answer(tmp_path, "h.sh", pre("deny", "from settings"))
    hooks = Hooks.from_settings(
        [
            (
                tmp_path / "s.json",
                {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": cmd}]}]}},
            )
        ]
    )
    out = await hooks.run("PreToolUse", bash_call(tmp_path))
    assert out.decision == "deny" and out.reason == "from settings"


@pytest.mark.parametrize(
    "hooks_section, fragment",
    [
        ([], "'hooks' must be an object"),
        ({"PreToolUse": {"matcher": "Bash"}}, "hooks.PreToolUse must be a list"),
        ({"PreToolUse": [{"matcher": "Bash"}]}, "hooks.PreToolUse[0] must be an object with a 'hooks' list"),
        ({"PreToolUse": [{"matcher": 3, "hooks": []}]}, "hooks.PreToolUse[0].matcher must be a string"),
        (
            {"PreToolUse": [{"matcher": "Bash(", "hooks": [{"type": "command", "command": "x"}]}]},
            "hooks.PreToolUse[0]: matcher 'Bash(' is not a valid regular expression",
        ),
        ({"Stop": [{"hooks": [{"type": "prompt", "prompt": "done?"}]}]}, "hooks.Stop[0].hooks[0]: only"),
        ({"Stop": [{"hooks": [{"type": "command"}]}]}, "hooks.Stop[0].hooks[0]: 'command' must be"),
        (
            {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": "30"}]}]},
            "hooks.Stop[0].hooks[0]: 'timeout' must be",
        ),
    ],
)
def test_malformed_settings_name_the_file_and_entry(tmp_path, hooks_section, fragment):
    path = tmp_path / ".claude" / "settings.json"
    with pytest.raises(ValueError) as e:
        Hooks.from_settings([(tmp_path / "ok.json", {}), (path, {"hooks": hooks_section})])
    assert str(e.value).startswith(f"{path}: ")
    assert fragment in str(e.value)


def test_settings_that_are_not_an_object(tmp_path):
    with pytest.raises(ValueError, match="settings.json: settings must be a JSON object"):
        Hooks.from_settings([(tmp_path / "settings.json", [])])


def test_unsupported_claude_code_events_are_skipped_loudly(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="drivetrain.control.hooks"):
        hooks = Hooks.from_settings(
            [
                (
                    tmp_path / "s.json",
                    {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "echo hi"}]}]}},
                )
            ]
        )
    assert not hooks
    assert "SessionStart" in caplog.text and "s.json" in caplog.text


def test_unknown_events_are_rejected():
    hooks = Hooks()
    with pytest.raises(ValueError, match="unknown hook event 'PreToolUsed'"):
        hooks.add("PreToolUsed", lambda p: None)
    with pytest.raises(ValueError, match="not a valid regular expression"):
        hooks.add_command("PreToolUse", "x", matcher="[")
    with pytest.raises(ValueError):
        asyncio.run(hooks.run("SessionStart", {}))
    assert HOOK_EVENTS == ("PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "PreCompact")

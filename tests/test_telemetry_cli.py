"""Telemetry from the command line, as a Claude Code user sets it up: the variables in a settings file's "env" (or
the environment), OTLP over HTTP with JSON bodies to a real receiver, and a message naming the extra when the SDK is
missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cli_process
import drivetrain
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from drivetrain.testing.otlp import OtlpReceiver

WRITTEN = "one\ntwo\nthree\n"


def cli_env(cwd, server_url: str, env_extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "OTEL_", "CLAUDE_"))}
    env.update(
        {
            "ANTHROPIC_BASE_URL": server_url,
            "ANTHROPIC_API_KEY": "sk-test",
            "ANTHROPIC_MODEL": "claude-sonnet-4-6",
            "DRIVETRAIN_HOME": str(cwd / "home"),
            # this checkout's code in the child (a relative PYTHONPATH would not hold in another folder)
            "PYTHONPATH": str(Path(drivetrain.__file__).resolve().parents[1]),
            **(env_extra or {}),
        }
    )
    return env


def cli(cwd, server_url: str, *args: str, env_extra: dict[str, str] | None = None, code: str | None = None):
    env = cli_env(cwd, server_url, env_extra)
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "drivetrain"]
    return cli_process.run(
        [*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def write_script():
    return [
        respond([tool_call("Write", {"file_path": "notes.txt", "content": WRITTEN}, id="toolu_w")]),
        reply("Written."),
    ]


def test_the_settings_files_env_turns_telemetry_on_and_runs_arrive_over_http_json(tmp_path):
    with OtlpReceiver() as receiver, ScriptedServer(write_script()) as server:
        (tmp_path / ".drivetrain").mkdir()
        (tmp_path / ".drivetrain" / "settings.json").write_text(
            json.dumps(
                {
                    "permissions": {"allow": ["Write"]},
                    "env": {
                        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
                        "OTEL_TRACES_EXPORTER": "otlp",
                        "OTEL_METRICS_EXPORTER": "otlp",
                        "OTEL_LOGS_EXPORTER": "otlp",
                        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
                        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                        "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20t0ken",
                    },
                }
            )
        )
        proc = cli(tmp_path, server.url, "-p", "write the notes", "--output-format", "json")
        assert proc.returncode == 0, proc.stderr
        receiver.wait_for(lambda r: len(r.spans()) >= 4 and r.metric_points())
    assert (tmp_path / "notes.txt").read_text() == WRITTEN
    assert set(receiver.received.content_types) == {"application/json"}
    spans = receiver.spans()
    ours = sorted(s.name for s in spans if not s.name.startswith("anthropic."))
    assert ours == ["chat claude-sonnet-4-6", "chat claude-sonnet-4-6", "execute_tool Write", "invoke_agent drivetrain"]
    # the Anthropic SDK's own spans (it traces through the global provider the CLI set) nest under drivetrain's
    chats = {s.span_id for s in spans if s.name.startswith("chat ")}
    sdk = [s for s in spans if s.name.startswith("anthropic.")]
    assert all(s.parent_id in chats for s in sdk)
    session = json.loads(proc.stdout)["session_id"]
    points = receiver.metric_points()
    lines = {p.attributes["type"]: p.value for p in points if p.metric == "claude_code.lines_of_code.count"}
    assert lines == {"added": 3, "removed": 0}
    [decision] = [p for p in points if p.metric == "claude_code.code_edit_tool.decision"]
    assert decision.attributes["tool_name"] == "Write" and decision.attributes["decision"] == "accept"
    assert {p.attributes["session.id"] for p in points if p.metric.startswith("claude_code.")} == {session}


def test_without_the_sdk_the_variables_say_what_to_install_and_the_run_goes_on(tmp_path):
    # the SDK made unimportable in the child, as in an install without the otel extra
    code = "import sys; sys.modules['opentelemetry.sdk'] = None; from drivetrain.cli.main import main; sys.exit(main())"
    with ScriptedServer([reply("Fine.")]) as server:
        proc = cli(
            tmp_path,
            server.url,
            "-p",
            "hello",
            env_extra={"DRIVETRAIN_ENABLE_TELEMETRY": "1", "OTEL_TRACES_EXPORTER": "otlp"},
            code=code,
        )
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'drivetrain[otel]'" in proc.stderr
    assert proc.stdout.strip() == "Fine."


def test_applying_a_plan_from_the_cli_exports_the_plan_its_steps_and_their_runs(tmp_path):
    (tmp_path / "plan.json").write_text(
        json.dumps({"task": "t", "steps": [{"id": "a", "goal": "Find the answer.", "tools": ["Read"], "max_turns": 2}]})
    )
    with OtlpReceiver() as receiver, ScriptedServer([reply("the answer is 42")]) as server:
        env = {
            "DRIVETRAIN_ENABLE_TELEMETRY": "1",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        }
        proc = cli(tmp_path, server.url, "apply", "plan.json", "-p", env_extra=env)
        assert proc.returncode == 0, proc.stderr
        receiver.wait_for(lambda r: len(r.spans()) >= 4)
    spans = {s.name: s for s in receiver.spans() if not s.name.startswith("anthropic.")}
    assert set(spans) == {"plan", "plan_step a", "invoke_agent drivetrain", "chat claude-sonnet-4-6"}
    assert spans["plan_step a"].parent_id == spans["plan"].span_id
    assert spans["invoke_agent drivetrain"].parent_id == spans["plan_step a"].span_id

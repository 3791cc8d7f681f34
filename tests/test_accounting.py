"""Per-turn accounting in the CLI: the --verbose turn log and stream-json's turn_usage events carry each turn's
input, output, cache-write and cache-read tokens, context size and cost."""

import json

import pytest

from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from test_cli import cli

USAGES = [
    {"input_tokens": 1234, "output_tokens": 87, "cache_creation_input_tokens": 2000, "cache_read_input_tokens": 5000},
    {"input_tokens": 40, "output_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 9000},
]


def script():
    return [respond([tool_call("Glob", {"pattern": "*.py"})], usage=USAGES[0]), reply("none", usage=USAGES[1])]


def sonnet_cost(u):  # claude-sonnet-4-6: 3, 15, 3.75, 0.30 USD per million tokens
    return (
        u["input_tokens"] * 3
        + u["output_tokens"] * 15
        + u["cache_creation_input_tokens"] * 3.75
        + u["cache_read_input_tokens"] * 0.30
    ) / 1e6


def test_verbose_turn_log_shows_each_turns_tokens_and_cost(tmp_path):
    with ScriptedServer(script()) as server:
        proc = cli(server.url, "-p", "list", "--verbose", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    turns = [line for line in proc.stderr.splitlines() if line.startswith("[turn ")]
    assert turns == [
        f"[turn 1] stop_reason=tool_use  in 1,234 (+5,000 cached, +2,000 cache write) out 87  "
        f"ctx 8,234/200,000  ${sonnet_cost(USAGES[0]):.4f}",
        f"[turn 2] stop_reason=end_turn  in 40 (+9,000 cached) out 12  ctx 9,040/200,000  "
        f"${sonnet_cost(USAGES[1]):.4f}",
    ]


def test_unknown_model_logs_tokens_and_no_invented_cost(tmp_path):
    with ScriptedServer([reply("hi", usage=USAGES[1])]) as server:
        proc = cli(server.url, "-p", "hi", "--verbose", "--model", "my-own-model", cwd=tmp_path)
    assert "[turn 1] stop_reason=end_turn  in 40 (+9,000 cached) out 12  ctx 9,040  cost unknown" in proc.stderr


def test_stream_json_turn_usage_events(tmp_path):
    with ScriptedServer(script()) as server:
        proc = cli(server.url, "-p", "list", "--output-format", "stream-json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    kinds = [(e["type"], e.get("subtype")) for e in lines if e.get("subtype") != "permission"]
    assert kinds == [
        ("system", "init"),
        ("assistant", None),
        ("system", "turn_usage"),
        ("user", None),
        ("assistant", None),
        ("system", "turn_usage"),
        ("result", "success"),
    ]
    usage_events = [e for e in lines if e.get("subtype") == "turn_usage"]
    for n, (e, u) in enumerate(zip(usage_events, USAGES), 1):
        assert e["turn"] == n and e["usage"] == u and e["model"] == "claude-sonnet-4-6"
        assert e["cost_usd"] == pytest.approx(sonnet_cost(u))
        assert e["context_tokens"] == sum(
            u[k] for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        assert e["context_window"] == 200_000 and e["session_id"] == lines[0]["session_id"]
    assert [e["stop_reason"] for e in usage_events] == ["tool_use", "end_turn"]
    # the assistant events keep Claude Code's shape: the usage stays inside the message
    assert lines[1]["message"]["usage"] == USAGES[0] and set(lines[1]) == {"type", "message", "session_id"}
    assert lines[-1]["total_cost_usd"] == pytest.approx(sum(map(sonnet_cost, USAGES)))

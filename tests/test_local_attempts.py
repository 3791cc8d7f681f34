"""On the real 0.5B model: a seeded run is the same run in a new process, and requests in flight together are
decoded together (models/batched.py), each with its own seed and grammar, the shared prefix evaluated once."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from drivetrain.messages import Message
from drivetrain.models.base import ModelRequest
from drivetrain.sessions.file import FileStore
from drivetrain.sessions.log import load
from test_local_model import BUILTIN_TOOLS, SYSTEM, assert_valid_call

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None,
        reason="llama-cpp-python (drivetrain[local-small]) is not installed",
    ),
    pytest.mark.xdist_group("local_attempts"),
]

DRIVETRAIN = str(Path(sys.executable).parent / "drivetrain")


@pytest.fixture(scope="module")
def engine_model():
    from drivetrain.errors import ConfigError
    from drivetrain.models.local import LocalModel

    m = LocalModel("small", n_ctx=2048, n_threads=1, parallel=3)
    try:
        m.load()
    except ConfigError as exc:
        pytest.skip(f"the 0.5B model is not installed: {exc}")
    return m


def test_a_seeded_run_makes_the_same_calls_and_answer_in_a_new_process(tmp_path):
    ws = tmp_path / "ws"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env["DRIVETRAIN_LOCAL_THREADS"] = "1"  # the suite's workers share the cores: two spinning threads ran ~2x slower
    runs = []
    for _ in range(2):
        shutil.rmtree(ws, ignore_errors=True)
        ws.mkdir()
        (ws / "a.txt").write_text("alpha\nbeta\n")
        (ws / "b.txt").write_text("gamma\n")
        for path in (ws / "a.txt", ws / "b.txt", ws, ws.parent):  # what `ls -la` shows is the same both times
            os.utime(path, (1_700_000_000, 1_700_000_000))
        proc = subprocess.run(
            [
                DRIVETRAIN,
                "-p",
                "How many lines do the .txt files have in all? Write the number to n.txt.",
                "--model",
                "0.5b",
                "--seed",
                "7",
                "--attempts",
                "1",
                "--max-turns",
                "2",  # unseeded runs diverged from their first turns: two show it, a third only costs time
                "--max-wall-time",
                "600",  # a run cut by the clock is cut where the machine's load says
                "--permission-mode",
                "bypassPermissions",
                "--output-format",
                "json",
            ],
            cwd=ws,
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
        assert proc.stdout, proc.stderr
        result = json.loads(proc.stdout)
        history = load(FileStore(), result["session_id"]).value.history
        calls = [(u.name, u.input) for m in history for u in m.tool_uses]
        runs.append((calls, result["result"], result["num_turns"], result["subtype"]))
    assert runs[0][0], "the run made no call: nothing was compared"
    assert runs[0] == runs[1]


# three of the tools: each sequence still samples under a grammar of its calls, and the prompt the three share is
# a third as long (the whole list is ~650 tokens, ~15 s of one core to evaluate)
THREE_TOOLS = [t for t in BUILTIN_TOOLS if t["name"] in ("Bash", "Glob", "Read")]


def ask(model, seed, temperature=0.8, tools=THREE_TOOLS):
    prompt = "List the Python files here, then read the biggest one."
    return model.respond(ModelRequest([Message.user(prompt)], SYSTEM, tools, 48, temperature=temperature, seed=seed))


async def test_requests_in_flight_are_decoded_together_with_their_own_seeds(engine_model):
    first, again, other = await asyncio.gather(ask(engine_model, 5), ask(engine_model, 5), ask(engine_model, 6))
    for r in (first, again, other):
        assert r.stop_reason in ("tool_use", "end_turn", "max_tokens")
        for use in r.message.tool_uses:
            assert_valid_call(use)  # each sequence sampled under its own grammar
    # the shared prompt was evaluated once: the others copied it and evaluated only its last token
    evaluated = sorted(r.usage.input_tokens for r in (first, again, other))
    prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens
    assert evaluated[:2] == [1, 1] and evaluated[2] <= prompt, evaluated


async def test_a_later_turn_reuses_its_own_sequence(engine_model):
    r = await ask(engine_model, 11, tools=[])
    follow = ModelRequest(
        [Message.user("List the Python files here, then read the biggest one."), r.message, Message.user("Go on.")],
        SYSTEM,
        [],
        16,
        seed=11,
    )
    again = await engine_model.respond(follow)
    assert again.usage.cache_read_input_tokens >= r.usage.input_tokens + r.usage.cache_read_input_tokens - 1
    assert again.usage.input_tokens < 40


async def test_the_batch_engine_keeps_the_system_turn_on_disk_for_the_next_process(engine_model, tmp_path):
    from drivetrain.models.local import LocalModel

    def fresh() -> LocalModel:  # a new process's model: a new context over the same weights
        m = LocalModel("small", n_ctx=2048, n_threads=1, parallel=2)
        m._llm = engine_model._llm
        m.prefix_cache, m.prefix_cache_dir = True, tmp_path
        return m

    first = await ask(fresh(), 3)
    saved = list(tmp_path.glob("*.seq"))
    assert len(saved) == 1, saved
    prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens
    assert first.usage.input_tokens == prompt  # nothing to reuse yet: all evaluated
    again = await ask(fresh(), 3)
    assert again.usage.input_tokens + again.usage.cache_read_input_tokens == prompt
    assert 0 < again.usage.input_tokens < prompt // 2  # the system turn came from the file
    for use in again.message.tool_uses:
        assert_valid_call(use)
    saved[0].write_bytes(b"not a saved state")  # a damaged cache is evaluated again, not trusted
    damaged = await ask(fresh(), 3)
    assert damaged.usage.input_tokens == prompt
    for use in damaged.message.tool_uses:
        assert_valid_call(use)

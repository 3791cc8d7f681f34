"""The fault table (docs/faults.md), row by row, against the scripted server over real HTTP through the real SDKs:
each fault is retried and the answer after it used; one that persists ends the run with ``error_upstream``, its
history valid; a retried request never runs a tool again."""

from __future__ import annotations

import contextlib
import re
import socket
import time
from pathlib import Path

import pytest

import cli_process
import drivetrain
from drivetrain import Agent
from drivetrain.errors import ModelError
from drivetrain.messages import Message, lint
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.models.base import ModelRequest
from drivetrain.sessions.file import FileStore
from drivetrain.sessions.log import load
from drivetrain.testing import (
    FAULT_KINDS,
    SERVED,
    FaultSchedule,
    ScriptedServer,
    fault,
    reply,
    respond,
    tool_call,
)
from drivetrain.testing.faults import REFUSED_S, STREAM_ONLY
from drivetrain.tools.bash import Bash

# seconds: the timeouts of these tests (a hang or stall lasts longer). 0.3 s was too short on 2 loaded cores, and
# 0.5 s too: under `make test` (4 workers and mypy on 2 cores) the good answer after a fault once took longer.
QUICK = 1.0
DOCS = Path(__file__).parent.parent / "docs" / "faults.md"


def request(text: str = "hi") -> ModelRequest:
    return ModelRequest([Message.user(text)], max_tokens=100)


MADE: list[AnthropicModel] = []


@pytest.fixture
async def closing():
    yield
    while MADE:
        await MADE.pop().aclose()


MODES = {"streamed": {}, "whole": {"stream": False, "aiohttp": True}, "whole-httpx": {"stream": False}}


def model_for(url: str, mode: str = "streamed", **kw) -> AnthropicModel:
    kw.setdefault("backoff", 0.01)
    kw.setdefault("idle_timeout", QUICK)
    kw.setdefault("answer_timeout", QUICK)
    MADE.append(
        AnthropicModel.from_env(
            "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "k"}, **MODES[mode], **kw
        )
    )
    return MADE[-1]


def seen_as(kind: str, mode: str) -> str:
    """The fault the client counts: a whole answer meets the nearest whole-answer fault; silence is a timeout."""
    if mode != "streamed":
        kind = STREAM_ONLY.get(kind, kind)  # type: ignore[call-overload]
    return "timeout" if kind in ("hang", "stall") else kind


# ---------------------------------------------------------------- each row: retried, the next answer used


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("kind", SERVED)
async def test_each_fault_is_retried_and_the_next_answer_used(kind, mode, closing):
    with ScriptedServer([fault(kind, seconds=QUICK * 3), reply("after the fault")]) as server:
        model = model_for(server.url, mode)
        r = await model.respond(request())
    assert r.message.text == "after the fault"
    assert dict(model.retries) == {seen_as(kind, mode): 1}
    assert [q.fault for q in server.requests] == [kind, None]


async def test_a_refused_connection_is_retried(closing):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ScriptedServer([reply("up again")], port=port)  # not listening yet: the first try is refused
    model = model_for(f"http://127.0.0.1:{port}")
    model.on_retry = lambda kind, attempt, delay: server.start()
    try:
        r = await model.respond(request())
    finally:
        server.close()
    server.assert_complete()
    assert r.message.text == "up again" and dict(model.retries) == {"refused": 1}


async def test_a_served_refusal_is_a_restart_the_client_retries_through(closing):
    """``refused`` in a schedule: the request's connection is reset and the server stops listening for a moment, so
    the retry's connection is refused; the next retry, once it listens again, gets the answer."""
    with ScriptedServer([reply("up again")], faults=FaultSchedule(at={1: "refused"})) as server:
        model = model_for(server.url, backoff=REFUSED_S / 2)
        r = await model.respond(request())
    assert r.message.text == "up again" and [q.fault for q in server.requests] == ["refused", None]
    assert model.retries["refused"] >= 1 and set(model.retries) <= {"reset", "refused"}, model.retries


@pytest.mark.parametrize("header, value", [("retry-after", "0.4"), ("retry-after-ms", "400")])
async def test_a_503_waits_as_long_as_its_retry_after_says(header, value, closing):
    steps = [fault("http_503", **{header.replace("-", "_"): value}), reply("ok")]
    with ScriptedServer(steps) as server:
        started = time.monotonic()
        await model_for(server.url, backoff=0.0).respond(request())
        waited = time.monotonic() - started
    assert 0.38 <= waited < 2, waited


# ---------------------------------------------------------------- a fault that persists


@pytest.mark.parametrize("mode", ["streamed", "whole"])
@pytest.mark.parametrize("kind", ["http_529", "cut", "broken_json", "not_json", "reset", "hang"])
async def test_a_fault_that_persists_is_named_as_the_upstreams(kind, mode, closing):
    """After an answer came from the URL, a fault that outlasts the retries is the upstream's: the error says so
    and carries the fault; nothing tells the user to check a setting that was right."""
    with ScriptedServer([reply("first"), *[fault(kind, seconds=QUICK * 3)] * 3]) as server:
        model = model_for(server.url, mode, max_retries=2)
        await model.respond(request())
        with pytest.raises(ModelError) as e:
            await model.respond(request())
    assert e.value.fault == seen_as(kind, mode)
    msg = str(e.value)
    assert "tried 3 times (DRIVETRAIN_MAX_RETRIES=2)" in msg
    if kind in ("cut", "broken_json", "not_json", "reset"):
        assert "upstream's fault" in msg and "Check ANTHROPIC_BASE_URL" not in msg, msg


@pytest.mark.parametrize("mode", ["streamed", "whole"])
async def test_a_url_that_never_answered_as_the_api_is_the_configuration(mode, closing):
    with ScriptedServer([fault("not_json")] * 2) as server:
        with pytest.raises(ModelError) as e:
            await model_for(server.url, mode, max_retries=1).respond(request())
    assert e.value.fault is None
    assert "did not answer as an Anthropic Messages endpoint" in str(e.value) and "ANTHROPIC_BASE_URL" in str(e.value)


# ---------------------------------------------------------------- the timeouts, as Claude Code names them


@pytest.mark.parametrize(
    "mode, setting, kind, says",
    [
        ("whole", "API_TIMEOUT_MS", "hang", r"no whole answer within 0.3 s \(API_TIMEOUT_MS\)"),
        ("streamed", "CLAUDE_STREAM_IDLE_TIMEOUT_MS", "stall", r"no data for 0.3 s, CLAUDE_STREAM_IDLE_TIMEOUT_MS"),
        ("streamed", "CLAUDE_STREAM_IDLE_TIMEOUT_MS", "hang", r"no data for 0.3 s, CLAUDE_STREAM_IDLE_TIMEOUT_MS"),
    ],
)
async def test_the_timeouts_are_set_in_milliseconds_and_named_when_they_end_a_request(
    mode, setting, kind, says, closing
):
    with ScriptedServer([fault(kind, seconds=3)]) as server:
        env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k", setting: "300"}
        model = AnthropicModel.from_env("claude-sonnet-4-6", env, max_retries=0, **MODES[mode])
        MADE.append(model)
        started = time.monotonic()
        with pytest.raises(ModelError, match=says) as e:
            await model.respond(request())
    assert time.monotonic() - started < 2 and e.value.fault == "timeout"


def test_a_timeout_that_is_not_milliseconds_is_refused():
    from drivetrain.errors import ConfigError

    with pytest.raises(ConfigError, match="API_TIMEOUT_MS='ten'"):
        AnthropicModel.from_env(None, {"ANTHROPIC_API_KEY": "k", "API_TIMEOUT_MS": "ten"})


# ---------------------------------------------------------------- the loop: a tool runs once, whatever is retried


def counting_call(counter: Path, id: str) -> dict:
    return tool_call("Bash", {"command": f"echo ran >> {counter}"}, id=id)


def agent(url: str, store: FileStore, cwd: Path, **kw) -> Agent:
    return Agent(model=model_for(url, **kw), tools=[Bash()], strict=True, store=store, cwd=cwd)


@pytest.mark.parametrize("mode", ["streamed", "whole"])
async def test_retried_requests_never_run_a_tool_again(mode, tmp_path, closing):
    counter = tmp_path / "outside" / "counter"  # outside the workspace: what a second run would do twice
    counter.parent.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    faults = [fault(k, seconds=QUICK * 3) for k in ("cut", "broken_json", "http_529", "reset")]
    steps = [respond([counting_call(counter, "toolu_1")]), *faults, reply("done")]
    with ScriptedServer(steps) as server:
        run = agent(server.url, FileStore(tmp_path / "home"), ws, mode=mode, max_retries=4).start("count once")
        result = await run.finish()
    assert result.subtype == "success" and result.result == "done"
    assert counter.read_text() == "ran\n"
    assert [q.fault for q in server.requests] == [None, "cut", "broken_json", "http_529", "reset", None]


async def test_a_fault_that_persists_ends_the_run_as_error_upstream_with_the_result_saved(tmp_path, closing):
    """The tool's result is in the session log before the request that failed; the run ends ``error_upstream``
    with a valid history, and the session goes on from there without running the tool again."""
    counter = tmp_path / "counter"
    ws = tmp_path / "ws"
    ws.mkdir()
    store = FileStore(tmp_path / "home")
    steps = [respond([counting_call(counter, "toolu_1")]), *[fault("broken_json")] * 3]
    with ScriptedServer(steps) as server:
        run = agent(server.url, store, ws, max_retries=2).start("count once")
        result = await run.finish()
    assert result.subtype == "error_upstream" and result.is_error
    assert "upstream's fault" in result.result and "broken_json" in result.result
    assert counter.read_text() == "ran\n"
    loaded = load(store, run.session_id)
    history = loaded.value.history
    assert loaded.repaired is None and lint(list(history)).problems == []
    assert history[-1].role == "user" and history[-1].content[0].tool_use_id == "toolu_1"

    def resent(body):
        results = [b for b in body["messages"][-1]["content"] if b.get("type") == "tool_result"]
        assert [r["tool_use_id"] for r in results] == ["toolu_1"]

    with ScriptedServer([reply("went on", expect=resent)]) as server:
        resumed = agent(server.url, store, ws).resume(run.session_id, "go on")
        assert (await resumed.finish()).result == "went on"
    assert counter.read_text() == "ran\n"


# ---------------------------------------------------------------- the table in docs/ and these tests, one to one


def test_the_fault_table_has_one_row_per_kind_the_tests_inject():
    rows = re.findall(r"^\| `([a-z_0-9]+)` \|", DOCS.read_text(), flags=re.M)
    assert sorted(rows) == sorted(FAULT_KINDS), "docs/faults.md's table and drivetrain.testing.faults differ"


# ---------------------------------------------------------------- the OpenAI-compatible provider: the same table


def openai_model(url: str, **kw):
    from drivetrain.models.openai import OpenAIModel

    kw.setdefault("backoff", 0.01)
    kw.setdefault("idle_timeout", QUICK)
    return OpenAIModel.from_env("gpt-4o-mini", {"OPENAI_BASE_URL": url + "/v1", "OPENAI_API_KEY": "k"}, **kw)


@pytest.mark.parametrize("kind", SERVED)
async def test_the_openai_provider_retries_each_fault_too(kind):
    from drivetrain.testing import ScriptedOpenAIServer

    with ScriptedOpenAIServer([fault(kind, seconds=QUICK * 3), reply("after the fault")]) as server:
        model = openai_model(server.url)
        r = await model.respond(request())
    assert r.message.text == "after the fault"
    assert dict(model.retries) == {seen_as(kind, "streamed"): 1}


@pytest.mark.parametrize("kind", ["http_503", "cut", "broken_json", "no_message_stop"])
async def test_the_openai_provider_names_a_persisting_fault_as_the_upstreams(kind):
    from drivetrain.testing import ScriptedOpenAIServer

    with ScriptedOpenAIServer([reply("first"), *[fault(kind)] * 2]) as server:
        model = openai_model(server.url, max_retries=1)
        await model.respond(request())
        with pytest.raises(ModelError) as e:
            await model.respond(request())
    assert e.value.fault == kind and "tried 2 times" in str(e.value)
    assert "OPENAI_BASE_URL" not in str(e.value) or kind == "http_503"


# ---------------------------------------------------------------- drivetrain serve in front of a faulting upstream


@contextlib.contextmanager
def serving(steps):
    """``drivetrain serve`` (ModelServer) around the Anthropic provider, in front of a faulting scripted upstream."""
    from drivetrain.serve import ModelServer

    with ScriptedServer(steps) as upstream:
        env = {"ANTHROPIC_BASE_URL": upstream.url, "ANTHROPIC_API_KEY": "k", "API_TIMEOUT_MS": "300"}
        model = AnthropicModel.from_env(
            "claude-upstream", {**env, "CLAUDE_STREAM_IDLE_TIMEOUT_MS": "300"}, backoff=0.01
        )
        model.max_retries = 2
        with ModelServer(model, log=lambda line: None) as server:
            yield server


def ask_anthropic(server) -> str:
    import anthropic

    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    r = client.messages.create(model="m", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    return r.content[0].text


def ask_openai(server) -> str:
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    return r.choices[0].message.content


CLIENTS = {"anthropic (passthrough)": ask_anthropic, "openai (translated)": ask_openai}
PASSED_ON = {"http_429", "http_529", "overloaded_in_stream"}  # passthrough: the client owns the backoff


@pytest.mark.parametrize("client", list(CLIENTS))
@pytest.mark.parametrize("kind", SERVED)
def test_serve_retries_each_fault_of_its_upstream(kind, client):
    with serving([fault(kind, seconds=1), reply("served")]) as server:
        if client.startswith("anthropic") and kind in PASSED_ON:
            import anthropic

            with pytest.raises(anthropic.APIStatusError) as e:
                CLIENTS[client](server)
            assert e.value.status_code in (429, 529)  # in Anthropic's shape, retry-after kept: the client retries
            assert CLIENTS[client](server) == "served"
        else:
            assert CLIENTS[client](server) == "served"


@pytest.mark.parametrize("client", list(CLIENTS))
@pytest.mark.parametrize("kind", ["cut", "broken_json", "not_json", "hang"])
def test_serve_answers_a_persisting_fault_with_a_502_in_the_clients_shape(kind, client):
    import anthropic
    import openai

    with serving([fault(kind, seconds=1)] * 3) as server:
        with pytest.raises((anthropic.APIStatusError, openai.APIStatusError)) as e:
            CLIENTS[client](server)
    err = e.value
    assert err.status_code == 502 and err.response.headers["x-should-retry"] == "false"
    body = err.response.json()
    assert ("type" in body["error"]) and (body.get("type") == "error") == client.startswith("anthropic")
    assert "the served model failed" in body["error"]["message"]


# ---------------------------------------------------------------- drivetrain -p: what a user sees


def test_the_cli_says_error_upstream_names_the_fault_and_resumes_without_running_the_tool_again(tmp_path):
    import json
    import os
    import sys

    counter = tmp_path / "counter"
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env["PYTHONPATH"] = str(Path(drivetrain.__file__).parents[1])  # this checkout's, from another folder too
    cli = [
        sys.executable,
        "-m",
        "drivetrain",
        "-p",
        "--output-format",
        "json",
        "--permission-mode",
        "bypassPermissions",
    ]

    def run(steps, *args):
        with ScriptedServer(steps) as server:
            env.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="k", DRIVETRAIN_MAX_RETRIES="1")
            proc = cli_process.run([*cli, *args], cwd=ws, env=env, capture_output=True, text=True, timeout=120)
        return proc, json.loads(proc.stdout.splitlines()[-1])

    steps = [respond([counting_call(counter, "toolu_1")]), fault("broken_json"), fault("no_message_stop")]
    proc, result = run(steps, "count once")
    assert proc.returncode == 1 and result["subtype"] == "error_upstream" and result["is_error"]
    assert "ended before the answer was finished" in result["result"] and "not your configuration" in result["result"]
    assert "tried 2 times (DRIVETRAIN_MAX_RETRIES=1)" in result["result"]
    proc, result = run([reply("went on")], "--resume", result["session_id"], "go on")
    assert proc.returncode == 0 and result["result"] == "went on"
    assert counter.read_text() == "ran\n"

"""The scripted model server, driven by the real anthropic SDK over HTTP."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request

import anthropic
import pytest

from drivetrain.testing import (
    ScriptedServer,
    http_error,
    raw_response,
    reply,
    respond,
    server_tool_use,
    text,
    thinking,
    tool_call,
)

MODEL = "claude-test"
READ_TOOL = {
    "name": "Read",
    "description": "Read a file.",
    "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]},
}
USER = {"role": "user", "content": "What is in a.py?"}


_clients: list[anthropic.Anthropic] = []


@pytest.fixture(autouse=True)
def close_clients():
    yield
    while _clients:
        _clients.pop().close()


def client(server: ScriptedServer, **kw) -> anthropic.Anthropic:
    kw.setdefault("max_retries", 0)
    _clients.append(anthropic.Anthropic(base_url=server.url, api_key="test", **kw))
    return _clients[-1]


def async_client(server: ScriptedServer, **kw) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.url, api_key="test", max_retries=0, **kw)


def rich_step():
    """Every block kind the stream has to rebuild (explicit ids: auto ids are unique per script)."""
    return respond(
        [
            thinking("Let me look at the file first.", signature="sig-abc123"),
            text("I will read both files, then search."),
            tool_call("Read", {"file_path": "a.py", "options": {"lines": [1, 2, 3], "note": "ünïcode"}}, id="toolu_a"),
            server_tool_use("web_search", {"query": "drivetrain"}, id="srvtoolu_9"),
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_9", "content": []},
            tool_call("Read", {}, id="toolu_b"),
        ],
        usage={"input_tokens": 123, "output_tokens": 45, "cache_read_input_tokens": 7},
    )


def same(a, b) -> bool:
    da, db = a.model_dump(), b.model_dump()
    assert da.pop("id") != db.pop("id")
    return da == db


# ----------------------------------------------------------------- happy paths


def test_stream_and_plain_give_the_same_message():
    with ScriptedServer([rich_step(), rich_step()]) as server:
        c = client(server)
        kw = {"model": MODEL, "max_tokens": 100, "tools": [READ_TOOL], "messages": [USER]}
        plain = c.messages.create(**kw)
        with c.messages.stream(**kw) as stream:
            streamed = stream.get_final_message()
    assert same(plain, streamed)
    assert plain.stop_reason == "tool_use"
    assert plain.content[0].signature == "sig-abc123"
    assert plain.content[2].input == {"file_path": "a.py", "options": {"lines": [1, 2, 3], "note": "ünïcode"}}
    assert plain.content[5].input == {}
    assert plain.usage.input_tokens == 123 and plain.usage.output_tokens == 45
    assert plain.usage.cache_read_input_tokens == 7
    assert plain.model == MODEL and plain.id.startswith("msg_")


def test_stream_emits_the_real_event_sequence():
    with ScriptedServer([respond([text("hello world"), tool_call("Read", {"file_path": "a.py"})])]) as server:
        with client(server).messages.create(
            model=MODEL, max_tokens=100, tools=[READ_TOOL], messages=[USER], stream=True
        ) as events:
            seen = list(events)
    kinds = [e.type for e in seen]
    assert kinds[:2] == ["message_start", "content_block_start"]  # the SDK swallows ping
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert seen[0].message.usage.output_tokens == 1 and seen[0].message.stop_reason is None
    json_parts = [e.delta.partial_json for e in seen if e.type == "content_block_delta" and e.index == 1]
    assert len(json_parts) > 2 and json.loads("".join(json_parts)) == {"file_path": "a.py"}
    assert seen[-2].delta.stop_reason == "tool_use" and seen[-2].usage.output_tokens > 1


async def test_async_client_stream_and_plain_agree():
    with ScriptedServer([rich_step(), rich_step()]) as server:
        async with async_client(server) as c:
            kw = {"model": MODEL, "max_tokens": 100, "tools": [READ_TOOL], "messages": [USER]}
            plain = await c.messages.create(**kw)
            async with c.messages.stream(**kw) as stream:
                streamed = await stream.get_final_message()
    assert same(plain, streamed)


def test_tool_use_round_trip_and_recorded_requests():
    def saw_results(body):
        results = body["messages"][2]["content"]
        assert [r["tool_use_id"] for r in results] == ["toolu_1", "toolu_2"]

    steps = [
        respond([tool_call("Read", {"file_path": "a.py"}, id="toolu_1"), tool_call("Read", {"file_path": "b.py"})]),
        reply("The answer is 42.", expect=saw_results),
    ]
    with ScriptedServer(steps) as server:
        c = client(server)
        history = [USER]
        first = c.messages.create(model=MODEL, max_tokens=100, tools=[READ_TOOL], messages=history)
        assert [b.id for b in first.content] == ["toolu_1", "toolu_2"]  # auto id skips the explicit one
        history += [
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": b.id, "content": f"contents of {b.input['file_path']}"}
                    for b in first.content
                ],
            },
        ]
        final = c.messages.create(model=MODEL, max_tokens=100, tools=[READ_TOOL], messages=history)
        assert final.content[0].text == "The answer is 42." and final.stop_reason == "end_turn"
    req = server.requests[1]
    assert req.path == "/v1/messages" and req.method == "POST" and req.step == 1
    assert req.headers["Content-Type"] == req.headers.get("content-type") == "application/json"
    assert "anthropic-version" in req.headers and "Anthropic-Version" in req.headers
    assert len(req.body["messages"]) == 3


def test_pause_turn_resubmitted_unchanged_passes():
    paused = respond([server_tool_use("web_search", {"query": "q"}), text("Searching…")], stop_reason="pause_turn")
    with ScriptedServer([paused, reply("done")]) as server:
        c = client(server)
        first = c.messages.create(model=MODEL, max_tokens=100, messages=[USER])
        again = c.messages.create(
            model=MODEL, max_tokens=100, messages=[USER, {"role": "assistant", "content": first.content}]
        )
    assert first.stop_reason == "pause_turn" and again.content[0].text == "done"


def test_http_error_is_visible_to_the_sdk():
    step = http_error(429, "rate_limit_error", "slow down", headers={"retry-after": "7"})
    with ScriptedServer([step]) as server:
        with pytest.raises(anthropic.RateLimitError) as info:
            client(server).messages.create(model=MODEL, max_tokens=10, messages=[USER])
    err = info.value
    assert err.status_code == 429
    assert err.response.headers["retry-after"] == "7"
    assert err.body == {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}


def test_sdk_retries_consume_the_next_step():
    steps = [http_error(529, "overloaded_error", "busy", {"retry-after-ms": "1"}), reply("ok")]
    with ScriptedServer(steps) as server:
        c = client(server, max_retries=1)
        assert c.messages.create(model=MODEL, max_tokens=10, messages=[USER]).content[0].text == "ok"
    assert len(server.requests) == 2


def test_raw_response_returns_the_body():
    body = {"id": "chatcmpl-1", "choices": [{"message": {"role": "assistant", "content": "hi"}}]}
    with ScriptedServer([raw_response(200, body, headers={"x-extra": "1"})]) as server:
        raw = client(server).messages.with_raw_response.create(model=MODEL, max_tokens=10, messages=[USER])
    assert raw.http_response.json() == body
    assert raw.headers["x-extra"] == "1"


def test_concurrent_requests_each_get_one_step():
    from concurrent.futures import ThreadPoolExecutor

    with ScriptedServer([reply(f"answer {i}") for i in range(8)]) as server:
        c = client(server)
        with ThreadPoolExecutor(8) as pool:
            texts = list(
                pool.map(
                    lambda _: c.messages.create(model=MODEL, max_tokens=10, messages=[USER]).content[0].text, range(8)
                )
            )
    assert sorted(texts) == sorted(f"answer {i}" for i in range(8))


def test_head_is_answered_without_a_body():
    with pytest.raises(AssertionError, match="HEAD /v1/messages"):
        with ScriptedServer([]) as server:
            conn = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=5)
            conn.request("HEAD", "/v1/messages")
            resp = conn.getresponse()
            assert resp.status == 404 and resp.read() == b""
            conn.close()


def test_count_tokens_answers_without_a_step():
    with ScriptedServer([]) as server:
        counted = client(server).messages.count_tokens(model=MODEL, messages=[USER])
    assert counted.input_tokens > 0


def test_delay_makes_the_client_time_out():
    with ScriptedServer([reply("late", delay=2)]) as server:
        with pytest.raises(anthropic.APITimeoutError):
            client(server, timeout=0.2).messages.create(model=MODEL, max_tokens=10, messages=[USER])
        started = time.monotonic()
    assert time.monotonic() - started < 1.5  # close() cuts the delay short


def test_stalled_stream_hits_idle_timeout_and_server_still_closes():
    with ScriptedServer([reply("never finished", stall_after_events=1, stall_seconds=30)]) as server:
        with client(server, timeout=0.3).messages.stream(model=MODEL, max_tokens=10, messages=[USER]) as stream:
            events = stream.__iter__()
            assert next(events).type == "message_start"
            with pytest.raises(Exception) as info:  # the SDK lets the transport's ReadTimeout through mid-stream
                next(events)
            assert "Timeout" in type(info.value).__name__
        started = time.monotonic()
    assert time.monotonic() - started < 1.5


def test_error_event_mid_stream():
    with ScriptedServer([reply("cut short", error_after_events=3)]) as server:
        with pytest.raises(anthropic.APIStatusError) as info:
            with client(server).messages.stream(model=MODEL, max_tokens=10, messages=[USER]) as stream:
                stream.get_final_message()
    assert info.value.body["error"]["type"] == "overloaded_error"


def test_close_with_a_stalled_stream_still_open():
    threads_before = set(threading.enumerate())
    server = ScriptedServer([reply("x", stall_after_events=1, stall_seconds=30)]).start()
    conn = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=5)
    body = json.dumps({"model": MODEL, "max_tokens": 5, "messages": [USER], "stream": True})
    conn.request("POST", "/v1/messages", body, {"content-type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and b"message_start" in resp.fp.readline() + resp.fp.readline()
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 1.5
    while set(threading.enumerate()) - threads_before and time.monotonic() - started < 1.5:
        time.sleep(0.01)
    assert not set(threading.enumerate()) - threads_before  # the stalled handler thread ended too
    conn.close()
    resp.close()
    server.assert_complete()


# ----------------------------------------------------------------- strictness


def call_with(messages, *, tools=(READ_TOOL,)):
    """Send one request that the server must refuse; return the AssertionError of assert_complete."""
    with pytest.raises(AssertionError) as info:
        with ScriptedServer([reply("never sent")]) as server:
            with pytest.raises(anthropic.BadRequestError) as refused:
                kw = {"tools": list(tools)} if tools else {}
                client(server).messages.create(model=MODEL, max_tokens=10, messages=messages, **kw)
            assert refused.value.body["error"]["type"] == "invalid_request_error"
    return str(info.value)


def use(id="toolu_a", name="Read"):
    return {"type": "tool_use", "id": id, "name": name, "input": {"file_path": "a.py"}}


def result(id="toolu_a"):
    return {"type": "tool_result", "tool_use_id": id, "content": "ok"}


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        pytest.param(
            [USER, {"role": "assistant", "content": [use()]}, {"role": "user", "content": "go on"}],
            "'toolu_a' must be answered by exactly one tool_result",
            id="missing-tool_result",
        ),
        pytest.param(
            [USER, {"role": "assistant", "content": [use()]}],
            "'toolu_a' must be answered by exactly one tool_result",
            id="tool_use-last",
        ),
        pytest.param(
            [USER, {"role": "assistant", "content": [use()]}, {"role": "user", "content": [result(), result()]}],
            "(found 2)",
            id="answered-twice",
        ),
        pytest.param(
            [USER, {"role": "assistant", "content": [use()]}, {"role": "user", "content": [text("note"), result()]}],
            "tool_result blocks must come before any other content",
            id="tool_result-not-first",
        ),
        pytest.param(
            [USER, {"role": "assistant", "content": "ok"}, {"role": "user", "content": [result("toolu_x")]}],
            "tool_result for 'toolu_x', which is not a tool_use",
            id="stray-id",
        ),
        pytest.param([{"role": "user", "content": [text("")]}], "non-whitespace text", id="empty-text"),
        pytest.param([{"role": "user", "content": [text(" \n")]}], "non-whitespace text", id="blank-text"),
        pytest.param([{"role": "user", "content": []}], "content must be a non-empty", id="empty-content"),
        pytest.param(
            [
                USER,
                {"role": "assistant", "content": [use()]},
                {"role": "user", "content": [result()]},
                {"role": "assistant", "content": [use()]},
                {"role": "user", "content": [result()]},
            ],
            "tool_use ids must be unique",
            id="duplicate-ids",
        ),
        pytest.param(
            [USER, {"role": "assistant", "content": [use(name="Bash")]}, {"role": "user", "content": [result()]}],
            "unknown tool 'Bash'",
            id="unknown-tool",
        ),
        pytest.param(
            [{"role": "assistant", "content": "hi"}], "first message must use the user role", id="first-assistant"
        ),
        pytest.param([{"role": "system", "content": "hi"}], "role must be 'user' or 'assistant'", id="bad-role"),
    ],
)
def test_history_violations_fail(messages, expected):
    assert expected in call_with(messages)


def test_tool_use_without_tools_fails():
    messages = [USER, {"role": "assistant", "content": [use()]}, {"role": "user", "content": [result()]}]
    assert "the request defines no tools" in call_with(messages, tools=())


def post_raw(server, body, path="/v1/messages", method="POST"):
    req = urllib.request.Request(
        server.url + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"model": MODEL, "messages": [USER]}, "max_tokens: field required"),
        ({"model": MODEL, "max_tokens": 0, "messages": [USER]}, "max_tokens: field required"),
        ({"max_tokens": 5, "messages": [USER]}, "model: field required"),
        ({"model": MODEL, "max_tokens": 5, "messages": []}, "messages: field required"),
        (
            {
                "model": MODEL,
                "max_tokens": 2000,
                "messages": [USER],
                "thinking": {"type": "enabled", "budget_tokens": 4000},
            },
            "must be greater than thinking.budget_tokens",
        ),
        ({"model": MODEL, "max_tokens": 5, "messages": [USER], "tools": [{"name": "Read"}]}, "input_schema required"),
    ],
)
def test_malformed_requests_fail(body, expected):
    with pytest.raises(AssertionError, match=expected):
        with ScriptedServer([reply("never sent")]) as server:
            status, answer = post_raw(server, body)
            assert status == 400 and expected in answer["error"]["message"]


def test_pause_turn_resubmission_with_extra_user_text_fails():
    paused = respond([server_tool_use("web_search", {"query": "q"})], stop_reason="pause_turn")
    with pytest.raises(AssertionError, match="after a pause_turn response"):
        with ScriptedServer([paused, reply("done")]) as server:
            c = client(server)
            first = c.messages.create(model=MODEL, max_tokens=100, messages=[USER])
            with pytest.raises(anthropic.BadRequestError):
                c.messages.create(
                    model=MODEL,
                    max_tokens=100,
                    messages=[
                        USER,
                        {"role": "assistant", "content": first.content},
                        {"role": "user", "content": "continue"},
                    ],
                )


def test_expect_failure_is_recorded():
    def wants_system(body):
        assert body.get("system") == "be brief", "no system prompt"

    with pytest.raises(AssertionError, match="expect failed .*no system prompt"):
        with ScriptedServer([reply("x", expect=wants_system)]) as server:
            with pytest.raises(anthropic.BadRequestError):
                client(server).messages.create(model=MODEL, max_tokens=10, messages=[USER])


def test_expect_returning_false_is_a_failure():
    with pytest.raises(AssertionError, match="expect failed: returned False"):
        with ScriptedServer([reply("x", expect=lambda body: body["model"] == "other")]) as server:
            with pytest.raises(anthropic.BadRequestError):
                client(server).messages.create(model=MODEL, max_tokens=10, messages=[USER])


def test_unexpected_extra_call_fails():
    with pytest.raises(AssertionError, match="request 2 .* the script is exhausted"):
        with ScriptedServer([reply("only one")]) as server:
            c = client(server)
            c.messages.create(model=MODEL, max_tokens=10, messages=[USER])
            with pytest.raises(anthropic.BadRequestError):
                c.messages.create(model=MODEL, max_tokens=10, messages=[USER])


def test_unconsumed_step_fails():
    with pytest.raises(AssertionError, match=r"step 1 was never requested: respond\(\[text\]"):
        with ScriptedServer([reply("one"), reply("two")]) as server:
            client(server).messages.create(model=MODEL, max_tokens=10, messages=[USER])


def test_other_paths_are_404_and_unexpected():
    with pytest.raises(AssertionError, match=r"\(GET /v1/models\): no such endpoint"):
        with ScriptedServer([]) as server:
            status, answer = post_raw(server, None, path="/v1/models", method="GET")
            assert status == 404 and answer["type"] == "error"
            assert answer["error"]["type"] == "not_found_error"


def test_a_failing_body_reports_causes_not_leftovers():
    # the test body raised: only violations/unexpected calls are added, leftover steps are not
    with pytest.raises(ZeroDivisionError):
        with ScriptedServer([reply("one"), reply("two")]):
            1 / 0


# ----------------------------------------------------------------- one script per conversation


def test_each_conversation_gets_its_own_script_in_any_order():
    scripts = {
        "task a": [respond([tool_call("Read", {"file_path": "a"})]), reply("a done")],
        "task b": [reply("b done")],
    }
    with ScriptedServer(scripts) as server:
        c = client(server)
        ask = lambda prompt, *more: c.messages.create(
            model=MODEL, max_tokens=50, tools=[READ_TOOL], messages=[{"role": "user", "content": prompt}, *more]
        )
        first_a = ask("task a")
        assert ask("task b").content[0].text == "b done"  # b's script, though a's is not finished
        call = first_a.content[0]
        done = ask(
            "task a",
            {"role": "assistant", "content": [call.model_dump()]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "x"}]},
        )
        assert done.content[0].text == "a done"
    assert [r.conversation for r in server.requests] == ["task a", "task b", "task a"]


def test_a_conversation_without_a_script_or_with_steps_left_fails():
    with pytest.raises(AssertionError, match="no script for this conversation"):
        with ScriptedServer({"task a": [reply("a")]}) as server:
            with pytest.raises(anthropic.BadRequestError):
                client(server).messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "c"}])
    with pytest.raises(AssertionError, match="conversation 'task b'"):
        with ScriptedServer({"task b": [reply("b")]}):
            pass


def test_steps_a_test_expects_to_stay_unused_can_be_taken_out():
    with ScriptedServer({"task a": [reply("a")], "task b": [reply("b"), reply("b again")]}) as server:
        client(server).messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "task b"}])
        left = server.take_remaining()
    assert [s.content[0]["text"] for s in left] == ["a", "b again"] and server.remaining == []

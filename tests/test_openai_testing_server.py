"""The scripted server's chat-completions mode, driven by the real openai SDK and by raw HTTP."""

import json
import urllib.error
import urllib.request

import openai
import pytest

from drivetrain.testing import ScriptedOpenAIServer, http_error, reply, respond, text, tool_call, validate_chat

READ = {"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}}
USER = {"role": "user", "content": "What is in a.py?"}


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="test", max_retries=0)


def post(server, body, path="/v1/chat/completions"):
    req = urllib.request.Request(server.url + path, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_plain_json_completion():
    with ScriptedOpenAIServer(
        [
            respond(
                [text("Reading."), tool_call("Read", {"file_path": "a.py"}, id="call_1")], usage={"prompt_tokens": 11}
            )
        ]
    ) as server:
        c = client(server).chat.completions.create(model="m", messages=[USER], tools=[READ])
    choice = c.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Reading."
    assert choice.message.tool_calls[0].id == "call_1"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"file_path": "a.py"}
    assert c.usage.prompt_tokens == 11 and c.usage.total_tokens == 11 + c.usage.completion_tokens


def test_stream_is_chunks_then_usage_then_done():
    steps = [
        respond(
            [
                text("Hello world"),
                tool_call("Read", {"file_path": "a.py"}, id="call_1"),
                tool_call("Read", "{not json", id="call_2"),
            ]
        )
    ]
    with ScriptedOpenAIServer(steps) as server:
        status, raw = post(
            server,
            {
                "model": "m",
                "messages": [USER],
                "tools": [READ],
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
    assert status == 200
    events = [line[len("data: ") :] for line in raw.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    pieces: dict[int, list[str]] = {0: [], 1: []}
    for c in chunks[:-1]:
        for call in c["choices"][0]["delta"].get("tool_calls", []):
            if call["function"]["arguments"]:
                pieces[call["index"]].append(call["function"]["arguments"])
    assert len(pieces[0]) > 2  # arguments arrive in several pieces
    assert json.loads("".join(pieces[0])) == {"file_path": "a.py"}
    assert "".join(pieces[1]) == "{not json"  # raw text sent verbatim


def test_stream_without_include_usage_has_no_usage_chunk():
    with ScriptedOpenAIServer([reply("hi")]) as server:
        chunks = list(client(server).chat.completions.create(model="m", messages=[USER], stream=True))
    assert all(c.choices for c in chunks) and "".join(c.choices[0].delta.content or "" for c in chunks) == "hi"


def test_finish_reason_may_be_given_directly():
    with ScriptedOpenAIServer(
        [respond([tool_call("Read", {})], stop_reason="stop"), reply("x", "max_tokens")]
    ) as server:
        first = client(server).chat.completions.create(model="m", messages=[USER], tools=[READ])
        second = client(server).chat.completions.create(model="m", messages=[USER])
    assert (first.choices[0].finish_reason, second.choices[0].finish_reason) == ("stop", "length")


def test_errors_are_openai_shaped():
    with pytest.raises(AssertionError, match="no such endpoint"):
        with ScriptedOpenAIServer([]) as server:
            status, raw = post(server, {"model": "m", "messages": [USER]}, path="/v1/responses")
            assert status == 404 and json.loads(raw)["error"]["type"] == "not_found_error"


def test_mid_stream_error_reaches_the_sdk():
    with ScriptedOpenAIServer([reply("hello world", error_after_events=2, error_type="server_error")]) as server:
        with pytest.raises(openai.APIError, match="scripted mid-stream error"):
            list(client(server).chat.completions.create(model="m", messages=[USER], stream=True))


def test_http_error_step():
    with ScriptedOpenAIServer([http_error(429, "rate_limit_error", "slow down")]) as server:
        with pytest.raises(openai.RateLimitError, match="slow down"):
            client(server).chat.completions.create(model="m", messages=[USER])


# ----------------------------------------------------------------- validation

ASSISTANT_CALLS = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "Read", "arguments": "{}"}},
        {"id": "call_2", "type": "function", "function": {"name": "Read", "arguments": "{}"}},
    ],
}


def tool_msg(call_id, content="ok"):
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def test_a_valid_tool_exchange_passes():
    messages = [USER, ASSISTANT_CALLS, tool_msg("call_2"), tool_msg("call_1"), {"role": "user", "content": "go on"}]
    assert validate_chat({"model": "m", "messages": messages, "tools": [READ]}) == []


@pytest.mark.parametrize(
    "body, problem",
    [
        (
            {"model": "m", "messages": [USER, ASSISTANT_CALLS, tool_msg("call_1"), {"role": "user", "content": "?"}]},
            "did not have response messages: call_2",
        ),
        ({"model": "m", "messages": [USER, ASSISTANT_CALLS, tool_msg("call_1")]}, "call_2"),
        ({"model": "m", "messages": [USER, tool_msg("call_1")]}, "must be a response to a preceding message"),
        (
            {
                "model": "m",
                "messages": [USER, ASSISTANT_CALLS, tool_msg("call_1"), tool_msg("call_2"), tool_msg("call_1")],
            },
            "must be a response to a preceding message",
        ),
        ({"messages": [USER]}, "model: field required"),
        ({"model": "m", "messages": []}, "messages: field required"),
        ({"model": "m", "messages": [USER], "tools": []}, "tools: must be a non-empty list"),
        ({"model": "m", "messages": [USER], "stream_options": {"include_usage": True}}, "only allowed when stream"),
        ({"model": "m", "messages": [USER, {"role": "assistant", "content": None}]}, "content is required"),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "image_url.url",
        ),
        (
            {
                "model": "m",
                "messages": [
                    USER,
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "Read", "arguments": {}}}],
                    },
                    tool_msg("c"),
                ],
            },
            "arguments must be strings",
        ),
        (
            {"model": "m", "messages": [USER], "tools": [{"type": "function", "function": {"name": "bad name"}}]},
            "a function tool with a name",
        ),
    ],
)
def test_validation_rejects(body, problem):
    assert any(problem in p for p in validate_chat(body)), validate_chat(body)


def test_a_broken_request_is_answered_400_and_fails_the_script():
    messages = [USER, ASSISTANT_CALLS, tool_msg("call_1"), {"role": "user", "content": "?"}]
    with pytest.raises(AssertionError, match="call_2"):
        with ScriptedOpenAIServer([reply("never")]) as server:
            with pytest.raises(openai.BadRequestError, match="call_2"):
                client(server).chat.completions.create(model="m", messages=messages)

"""`drivetrain serve`: the official SDKs → ModelServer → AnthropicModel → the scripted server, all on 127.0.0.1."""

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import anthropic
import openai
import pytest

import cli_process
from drivetrain.cli.serve import main as serve_main
from drivetrain.messages import Message, ToolResultBlock
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.models.base import ModelRequest
from drivetrain.models.openai import OpenAIModel
from drivetrain.serve import ModelServer
from drivetrain.testing import ScriptedServer, http_error, reply, respond, text, tool_call

DRIVETRAIN = str(Path(sys.executable).parent / "drivetrain")
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
HI = [{"role": "user", "content": "hi"}]


@contextlib.contextmanager
def served(steps, **server_kw):
    """A ModelServer around the real Anthropic provider, which talks to a ScriptedServer running ``steps``."""
    log: list[str] = []
    with ScriptedServer(steps) as upstream:
        model = AnthropicModel.from_env(
            "claude-upstream", {"ANTHROPIC_BASE_URL": upstream.url, "ANTHROPIC_API_KEY": "sk-upstream"}, max_retries=0
        )
        with ModelServer(model, log=log.append, **server_kw) as server:
            server.upstream, server.lines = upstream, log
            yield server


def claude(server, **kw):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, **kw)


def pending_calls(server):
    return server.calls_in_flight  # model calls running or queued


def post(server, path, body, headers=None):
    """A raw POST; returns (status, parsed JSON)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(
        server.url + path, data=data, method="POST", headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


# ----------------------------------------------------------------- Anthropic Messages


def test_anthropic_text_json():
    with served([reply("Hello from upstream.")]) as server:
        msg = claude(server).messages.create(model="anything", max_tokens=50, system="Be brief.", messages=HI)
        seen = server.upstream.requests[0].body
    assert msg.content[0].text == "Hello from upstream." and msg.stop_reason == "end_turn"
    assert msg.role == "assistant" and msg.id.startswith("msg_") and msg.model == "claude-upstream"
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0
    assert seen["system"] == "Be brief." and seen["messages"] == [{"role": "user", "content": [text("hi")]}]
    assert seen["max_tokens"] == 50 and seen["model"] == "claude-upstream"


def test_anthropic_stream_accumulates_the_same_message():
    content = [text("Let me check the weather for you."), tool_call("get_weather", {"city": "Oslo"}, id="toolu_w")]
    with served([respond(content), respond(content)]) as server:
        client = claude(server)
        whole = client.messages.create(model="m", max_tokens=100, tools=[WEATHER], messages=HI)
        with client.messages.stream(model="m", max_tokens=100, tools=[WEATHER], messages=HI) as stream:
            deltas = [e.delta.text for e in stream if e.type == "content_block_delta" and e.delta.type == "text_delta"]
            final = stream.get_final_message()
    assert len(deltas) > 1 and "".join(deltas) == "Let me check the weather for you."  # streamed as it came
    assert [b.to_dict() for b in final.content] == [b.to_dict() for b in whole.content]
    assert final.stop_reason == whole.stop_reason == "tool_use"
    assert final.usage.output_tokens == whole.usage.output_tokens and final.usage.input_tokens > 0


def test_anthropic_tool_use_round_trip():
    def history_is_faithful(body):
        assert body["messages"][1] == {
            "role": "assistant",
            "content": [
                text("Checking."),
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
            ],
        }
        assert body["messages"][2]["content"] == [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21 C"}
        ]
        assert body["tools"] == [WEATHER]

    steps = [
        respond([text("Checking."), tool_call("get_weather", {"city": "Oslo"}, id="toolu_1")]),
        reply("It is sunny in Oslo.", expect=history_is_faithful),
    ]
    with served(steps) as server:
        client = claude(server)
        first = client.messages.create(model="m", max_tokens=100, tools=[WEATHER], messages=HI)
        use = first.content[1]
        assert (first.stop_reason, use.type, use.name, use.input) == (
            "tool_use",
            "tool_use",
            "get_weather",
            {"city": "Oslo"},
        )
        history = HI + [
            {"role": "assistant", "content": [b.to_dict() for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21 C"}]},
        ]
        with client.messages.stream(model="m", max_tokens=100, tools=[WEATHER], messages=history) as stream:
            assert stream.get_final_text() == "It is sunny in Oslo."


@pytest.mark.parametrize(
    "body, field",
    [
        ({"model": "m", "max_tokens": 10}, "messages: field required"),
        ({"model": "m", "messages": HI}, "max_tokens: field required"),
        ({"model": "m", "max_tokens": 10, "messages": [{"role": "robot", "content": "x"}]}, "messages.0: role"),
        ({"model": "m", "max_tokens": 10, "messages": HI, "stop_sequences": "END"}, "stop_sequences: must be a list"),
        (
            {
                "model": "m",
                "max_tokens": 10,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [{"type": "tool_use", "name": "get_weather", "input": {}}]},
                    {"role": "user", "content": [{"type": "tool_result", "content": "?"}]},
                ],
                "tools": [WEATHER],
            },
            "messages.1.content.0.id: field required",
        ),
    ],
)
def test_anthropic_bad_request_names_the_field(body, field):
    with served([]) as server:  # nothing may reach the model
        status, err = post(server, "/v1/messages", body, {"anthropic-version": "2023-06-01"})
    assert status == 400
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert field in err["error"]["message"] and "Traceback" not in err["error"]["message"]


def test_anthropic_sdk_raises_bad_request_naming_the_field():
    with served([]) as server:
        with pytest.raises(anthropic.BadRequestError, match="messages: field required"):
            claude(server).messages.create(model="m", max_tokens=10, messages=[])
        with pytest.raises(anthropic.BadRequestError, match="tool_result"):
            claude(server).messages.create(
                model="m",
                max_tokens=10,
                messages=[
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}]}
                ],
            )


def test_not_json_and_wrong_content_type():
    with served([]) as server:
        status, err = post(server, "/v1/messages", b"{nope", {"anthropic-version": "2023-06-01"})
        assert status == 400 and "not valid JSON" in err["error"]["message"]
        status, err = post(server, "/v1/messages", json.dumps({"x": 1}).encode(), {"Content-Type": "text/plain"})
        assert status == 415 and err["error"]["message"] == "Content-Type must be application/json"


def test_chunked_request_body_and_keep_alive_after_errors():
    with served([reply("fine")]) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        for path in ("/v1/nothing", "/v1/messages"):  # an error answer must not leave its body in the connection
            body = json.dumps({"model": "m", "max_tokens": 5, "messages": HI}).encode()
            conn.request(
                "POST", path, iter([body[:10], body[10:]]), {"Content-Type": "application/json"}, encode_chunked=True
            )
            response = conn.getresponse()
            answer = json.loads(response.read())
        assert response.status == 200 and answer["content"] == [text("fine")]


def test_anthropic_model_failure_is_502_in_the_api_shape():
    with served(
        [
            http_error(401, "authentication_error", "invalid x-api-key"),
            http_error(401, "authentication_error", "invalid x-api-key"),
        ]
    ) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="unused")  # SDK retries on: the server says no
        with pytest.raises(anthropic.InternalServerError) as caught:
            client.messages.create(model="m", max_tokens=10, messages=HI)
        assert caught.value.status_code == 502 and caught.value.response.headers["x-should-retry"] == "false"
        error = caught.value.body["error"]
        assert caught.value.body["type"] == "error" and error["type"] == "api_error"
        assert "invalid x-api-key" in error["message"] and "Traceback" not in error["message"]
        # streaming: a failure before any output still gets a real status
        with pytest.raises(anthropic.InternalServerError, match="invalid x-api-key"):
            with client.messages.stream(model="m", max_tokens=10, messages=HI) as stream:
                stream.get_final_message()
        assert len(server.upstream.requests) == 2


def test_anthropic_failure_mid_stream_is_an_error_event():
    step = reply("A long answer that breaks off.", error_after_events=5, error_type="invalid_request_error")
    with served([step]) as server:
        got = []
        with pytest.raises(anthropic.APIStatusError, match="mid-stream error"):
            with claude(server).messages.stream(model="m", max_tokens=10, messages=HI) as stream:
                for event in stream:
                    if event.type == "text":
                        got.append(event.text)
        assert got  # the text before the failure came through
        assert claude(server).models.list().data[0].id == "claude-upstream"  # still serving


def test_client_hanging_up_mid_stream_cancels_the_call():
    steps = [reply("one two three four five six", stall_after_events=4, stall_seconds=5), reply("still here")]
    with served(steps) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request(
            "POST",
            "/v1/messages",
            json.dumps({"model": "m", "max_tokens": 10, "messages": HI, "stream": True}),
            {"Content-Type": "application/json"},
        )
        response = conn.getresponse()
        while b"text_delta" not in response.readline():
            pass
        conn.close()  # hang up after the first piece of text
        start = time.monotonic()
        assert claude(server).messages.create(model="m", max_tokens=10, messages=HI).content[0].text == "still here"
        assert time.monotonic() - start < 3  # the stalled call did not hold anything up
        deadline = time.monotonic() + 3
        while pending_calls(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pending_calls(server) == 0  # the upstream call was cancelled, not left running
        assert not any("Traceback" in line for line in server.lines)


# ----------------------------------------------------------------- OpenAI chat completions

CHAT_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def gpt(server, base=None):
    return openai.OpenAI(base_url=base or server.url + "/v1", api_key="unused", max_retries=0)


def test_openai_text_json():
    with served([reply("Hello from upstream."), reply("Again.")]) as server:
        done = gpt(server).chat.completions.create(
            model="anything",
            max_tokens=40,
            stop=["END"],
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        )
        # an OpenAI base URL given without /v1 works too
        again = gpt(server, base=server.url).chat.completions.create(model="m", messages=HI)
        seen = server.upstream.requests[0].body
    assert done.object == "chat.completion" and done.id.startswith("chatcmpl-") and done.model == "claude-upstream"
    choice = done.choices[0]
    assert (choice.message.role, choice.message.content, choice.finish_reason) == (
        "assistant",
        "Hello from upstream.",
        "stop",
    )
    assert choice.message.tool_calls is None and done.usage.completion_tokens > 0
    assert done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens
    assert again.choices[0].message.content == "Again."
    assert seen["system"] == "Be brief." and seen["messages"] == [{"role": "user", "content": [text("hi")]}]
    assert seen["max_tokens"] == 40 and seen["stop_sequences"] == ["END"]


def test_openai_stream_accumulates_the_same_completion():
    content = [text("Let me check the weather for you."), tool_call("get_weather", {"city": "Oslo"}, id="toolu_w")]
    with served([respond(content), respond(content)]) as server:
        client = gpt(server)
        whole = client.chat.completions.create(model="m", messages=HI, tools=[CHAT_WEATHER])
        with client.chat.completions.stream(
            model="m", messages=HI, tools=[CHAT_WEATHER], stream_options={"include_usage": True}
        ) as stream:
            pieces = [e.delta for e in stream if e.type == "content.delta"]
            final = stream.get_final_completion()
    assert len(pieces) > 1 and "".join(pieces) == "Let me check the weather for you."  # streamed as it came
    got, want = final.choices[0], whole.choices[0]
    assert got.finish_reason == want.finish_reason == "tool_calls"
    assert got.message.content == want.message.content
    assert [(c.id, c.function.name, c.function.arguments) for c in got.message.tool_calls] == [
        (c.id, c.function.name, c.function.arguments) for c in want.message.tool_calls
    ]
    assert got.message.tool_calls[0].function.parsed_arguments == {"city": "Oslo"}
    assert final.usage.completion_tokens == whole.usage.completion_tokens


def test_openai_stream_wire_format_ends_with_done():
    with served([reply("Hi there.")]) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request(
            "POST",
            "/v1/chat/completions",
            json.dumps({"model": "m", "messages": HI, "stream": True}),
            {"Content-Type": "application/json"},
        )
        response = conn.getresponse()
        assert response.status == 200 and response.getheader("content-type") == "text/event-stream"
        frames = [f for f in response.read().decode().split("\n\n") if f]
    assert frames[-1] == "data: [DONE]"
    chunks = [json.loads(f.removeprefix("data: ")) for f in frames[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "Hi there."
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "stop"


def test_openai_tool_calls_round_trip():
    def history_is_translated(body):
        assert body["system"] == "You forecast."
        assert body["messages"][1:] == [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "unknown city", "is_error": True},
                ],
            },
        ]
        assert body["tools"] == [
            {
                "name": "get_weather",
                "description": "Weather for a city.",
                "input_schema": CHAT_WEATHER["function"]["parameters"],
            }
        ]

    steps = [
        respond(
            [
                tool_call("get_weather", {"city": "Oslo"}, id="toolu_1"),
                tool_call("get_weather", {"city": "Rome"}, id="toolu_2"),
            ]
        ),
        reply("Sunny in Oslo; Rome is unknown.", expect=history_is_translated),
    ]
    with served(steps) as server:
        client = gpt(server)
        messages = [{"role": "system", "content": "You forecast."}, {"role": "user", "content": "Oslo and Rome?"}]
        first = client.chat.completions.create(model="m", messages=messages, tools=[CHAT_WEATHER])
        calls = first.choices[0].message.tool_calls
        assert first.choices[0].finish_reason == "tool_calls" and first.choices[0].message.content is None
        assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in calls] == [
            ("toolu_1", "get_weather", {"city": "Oslo"}),
            ("toolu_2", "get_weather", {"city": "Rome"}),
        ]
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: unknown city"},
        ]
        second = client.chat.completions.create(model="m", messages=messages, tools=[CHAT_WEATHER])
        assert second.choices[0].message.content == "Sunny in Oslo; Rome is unknown."


async def test_drivetrains_own_openai_provider_through_serve():
    def answered(body):
        assert body["messages"][1]["content"][1] == {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "get_weather",
            "input": {"city": "Oslo"},
        }
        assert body["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]

    steps = [
        respond([text("Checking."), tool_call("get_weather", {"city": "Oslo"}, id="toolu_1")]),
        reply("Sunny in Oslo.", expect=answered),
    ]
    with served(steps) as server:
        model = OpenAIModel.from_env(
            "anything", {"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "unused"}, max_retries=0
        )
        pieces = []
        first = await model.respond(ModelRequest([Message.user("hi")], tools=[WEATHER], on_text=pieces.append))
        assert "".join(pieces) == "Checking." and first.stop_reason == "tool_use"
        [use] = first.message.tool_uses
        assert (use.id, use.name, use.input) == ("toolu_1", "get_weather", {"city": "Oslo"})
        history = [Message.user("hi"), first.message, Message.user(ToolResultBlock(use.id, "sunny"))]
        second = await model.respond(ModelRequest(history, tools=[WEATHER]))
        assert second.message.text == "Sunny in Oslo." and second.stop_reason == "end_turn"


ASKED = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
}


@pytest.mark.parametrize(
    "body, param, says",
    [
        ({"model": "m"}, "messages", "messages: field required"),
        ({"messages": HI}, "model", "model: field required"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages.[0].role", "must be one of"),
        ({"model": "m", "messages": [{"role": "user"}]}, "messages.[0].content", "content: field required"),
        (
            {"model": "m", "messages": HI + [{"role": "tool", "tool_call_id": "call_9", "content": "x"}]},
            "messages.[1].tool_call_id",
            "must answer a tool_call",
        ),
        (
            {"model": "m", "messages": HI + [ASKED, {"role": "user", "content": "and?"}], "tools": [CHAT_WEATHER]},
            "messages",
            "must each be answered",
        ),
        ({"model": "m", "messages": HI, "n": 3}, "n", "only 1 choice"),
        (
            {"model": "m", "messages": HI, "tools": [{"type": "function", "function": {}}]},
            "tools.[0].function.name",
            "field required",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": " "}]}, "messages", "non-whitespace text"),
    ],
)
def test_openai_bad_request_names_the_field(body, param, says):
    with served([]) as server:  # nothing may reach the model
        status, err = post(server, "/v1/chat/completions", body)
    assert status == 400 and set(err) == {"error"}
    assert err["error"]["type"] == "invalid_request_error" and err["error"]["param"] == param
    assert err["error"]["code"] is None and says in err["error"]["message"] and param in err["error"]["message"]


def test_openai_sdk_raises_bad_request_naming_the_field():
    with served([]) as server:
        with pytest.raises(openai.BadRequestError, match="messages: field required") as caught:
            gpt(server).chat.completions.create(model="m", messages=[])
        assert caught.value.param == "messages" and caught.value.type == "invalid_request_error"


def test_openai_model_failure_is_502_in_the_api_shape():
    steps = [
        http_error(401, "authentication_error", "invalid x-api-key"),
        reply("A long answer that breaks off.", error_after_events=5, error_type="invalid_request_error"),
    ]
    with served(steps) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")  # SDK retries on: the server says no
        with pytest.raises(openai.InternalServerError, match="invalid x-api-key") as caught:
            client.chat.completions.create(model="m", messages=HI)
        assert caught.value.status_code == 502 and caught.value.type == "server_error"
        assert caught.value.response.json()["error"]["param"] is None
        got = []
        with pytest.raises(openai.APIError, match="mid-stream error"):  # after output: an error chunk, in-band
            for chunk in client.chat.completions.create(model="m", messages=HI, stream=True):
                got.append(chunk.choices[0].delta.content)
        assert "".join(filter(None, got))
        assert len(server.upstream.requests) == 2


def test_openai_unknown_path_and_models():
    with served([]) as server:
        client = gpt(server)
        with pytest.raises(openai.NotFoundError) as caught:
            client.post("/embeddings", body={"input": "x"}, cast_to=object)
        assert caught.value.type == "invalid_request_error" and "/v1/embeddings" in caught.value.message
        assert [m.id for m in client.models.list().data] == ["claude-upstream"]
        assert client.models.retrieve("claude-upstream").owned_by == "drivetrain"
        with pytest.raises(openai.NotFoundError, match="'nope' not found"):
            client.models.retrieve("nope")


def test_slow_model_gets_keepalives_then_its_answer():
    """No output for a while: the stream opens anyway and keeps the client's idle timer from firing."""
    with served(
        [reply("late but here", delay=0.35), reply("also late", delay=0.35)], commit_after=0.1, keepalive_every=0.1
    ) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request(
            "POST",
            "/v1/messages",
            json.dumps({"model": "m", "max_tokens": 5, "messages": HI, "stream": True}),
            {"Content-Type": "application/json"},
        )
        events = [f.split("\n")[0] for f in conn.getresponse().read().decode().split("\n\n") if f]
        assert events[0] == "event: message_start" and events.count("event: ping") >= 3
        assert events[-2:] == ["event: message_delta", "event: message_stop"]
        stream = gpt(server).chat.completions.create(model="m", messages=HI, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "also late"


class Broken:
    name = "broken"

    async def respond(self, request):
        raise KeyError("oops")


def test_a_bug_is_a_500_without_a_traceback():
    lines = []
    with ModelServer(Broken(), log=lines.append) as server:
        status, err = post(server, "/v1/chat/completions", {"model": "m", "messages": HI})
        assert status == 500 and err["error"]["type"] == "server_error"
        assert err["error"]["message"] == "internal error in drivetrain serve: KeyError: 'oops'"
        status, err = post(server, "/v1/messages", {"model": "m", "max_tokens": 5, "messages": HI})
        assert status == 500 and err["error"] == {"type": "api_error", "message": err["error"]["message"]}
    assert any("Traceback" in line for line in lines)  # the server's own log has it


# ----------------------------------------------------------------- the other endpoints


def test_unknown_path_and_wrong_method_in_each_shape():
    with served([]) as server:
        status, err = post(server, "/v1/nothing", {}, {"anthropic-version": "2023-06-01"})
        assert status == 404 and err["type"] == "error" and err["error"]["type"] == "not_found_error"
        assert "/v1/nothing" in err["error"]["message"]
        status, err = post(server, "/v1/nothing", {})
        assert status == 404 and set(err["error"]) == {"message", "type", "param", "code"}
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(server.url + "/v1/messages", timeout=5)
        assert caught.value.code == 405 and json.loads(caught.value.read())["error"]["type"] == "invalid_request_error"


def test_models_and_health():
    with served([]) as server:
        assert [m.id for m in claude(server).models.list().data] == ["claude-upstream"]
        assert claude(server).models.retrieve("claude-upstream").id == "claude-upstream"
        with pytest.raises(anthropic.NotFoundError):
            claude(server).models.retrieve("other")
        with urllib.request.urlopen(server.url + "/health", timeout=5) as r:
            assert json.loads(r.read()) == {"status": "ok", "model": "claude-upstream"}


def test_requests_are_served_concurrently():
    with served([reply("one", delay=0.6), reply("two", delay=0.6)]) as server:
        results = []
        start = time.monotonic()
        threads = [
            threading.Thread(
                target=lambda: results.append(
                    claude(server).messages.create(model="m", max_tokens=5, messages=HI).content[0].text
                )
            )
            for _ in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == ["one", "two"] and time.monotonic() - start < 1.1


def test_foreign_host_header_is_refused():
    """A web page that rebinds its DNS name to 127.0.0.1 must not reach the model."""
    with served([]) as server:
        status, err = post(
            server,
            "/v1/messages",
            {"model": "m", "max_tokens": 5, "messages": HI},
            {"Host": f"evil.example:{server.port}"},
        )
        assert status == 403 and "evil.example" in err["error"]["message"]


# ----------------------------------------------------------------- the command


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "DRIVETRAIN_"))}
    return env | extra


def wait_healthy(url, proc, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                return json.loads(r.read())
        except OSError:
            time.sleep(0.05)
    raise AssertionError("drivetrain serve never became healthy")


def test_drivetrain_cli_through_drivetrain_serve(tmp_path):
    port = free_port()
    steps = [
        respond([tool_call("Write", {"file_path": "out.txt", "content": "42\n"}, id="toolu_w")]),
        reply("Wrote 42 to out.txt.", expect=lambda b: b["messages"][-1]["content"][0]["tool_use_id"] == "toolu_w"),
    ]
    with ScriptedServer(steps) as upstream:
        serve = cli_process.Popen(
            [DRIVETRAIN, "serve", "--provider", "anthropic", "--port", str(port)],
            env=clean_env(
                ANTHROPIC_BASE_URL=upstream.url, ANTHROPIC_API_KEY="sk-upstream", ANTHROPIC_MODEL="claude-up"
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            assert wait_healthy(url, serve) == {"status": "ok", "model": "claude-up"}
            proc = cli_process.run(
                [DRIVETRAIN, "-p", "Write 42 to out.txt", "--permission-mode", "acceptEdits"],
                cwd=tmp_path,
                env=clean_env(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="unused"),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=30,
            )
        finally:
            serve.terminate()
            serve.wait(timeout=10)
    assert proc.returncode == 0, proc.stderr
    assert "Wrote 42" in proc.stdout and (tmp_path / "out.txt").read_text() == "42\n"
    log = serve.stderr.read()
    assert serve.returncode == 0 and "POST /v1/messages" in log and "Traceback" not in log


def test_non_loopback_address_without_a_key_is_refused(monkeypatch, capsys):
    """Was: a loud warning, then serving anyone. Now nothing starts until a key is set."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-unused")
    monkeypatch.delenv("DRIVETRAIN_SERVE_API_KEY", raising=False)
    assert serve_main(["--provider", "anthropic", "--host", "0.0.0.0", "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert "refusing to listen on 0.0.0.0 without an API key" in err and "DRIVETRAIN_SERVE_API_KEY" in err


def test_serve_refuses_to_be_its_own_backend(monkeypatch, capsys):
    port = free_port()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    assert serve_main(["--port", str(port)]) == 1
    assert "is this server itself" in capsys.readouterr().err

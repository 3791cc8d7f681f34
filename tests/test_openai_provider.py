"""The OpenAI-compatible provider against the scripted chat-completions server, through the real openai SDK."""

import json
import socket
import time

import pytest

from drivetrain.errors import ConfigError, ModelError
from drivetrain.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from drivetrain.models.base import ModelRequest
from drivetrain.models.openai import ChunkAccumulator, OpenAIModel, normalize_base_url
from drivetrain.models.openai_wire import InvalidToolUseBlock
from drivetrain.testing import ScriptedOpenAIServer, http_error, raw_response, reply, respond, text, tool_call

READ = {
    "name": "Read",
    "description": "Read a file.",
    "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]},
}


def request(text="hi", **kw):
    kw.setdefault("max_tokens", 100)
    return ModelRequest([Message.user(text)], **kw)


def model_for(server, suffix="", **kw):
    kw.setdefault("backoff", 0.01)
    return OpenAIModel.from_env("gpt-test", {"OPENAI_BASE_URL": server.url + suffix, "OPENAI_API_KEY": "sk-test"}, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    "given, expected",
    [
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        ("https://api.openai.com/v1/", "https://api.openai.com/v1"),
        ("http://localhost:11434", "http://localhost:11434/v1"),
        ("http://localhost:11434/", "http://localhost:11434/v1"),
        ("http://localhost:8080/v1/chat/completions", "http://localhost:8080/v1"),
        ("https://api.example.com/chat/completions", "https://api.example.com"),  # the endpoint itself: used exactly
        (
            "https://generativelanguage.googleapis.com/v1beta/openai/",
            "https://generativelanguage.googleapis.com/v1beta/openai",
        ),
        ("  https://gw.example.com/openai/v1//  ", "https://gw.example.com/openai/v1"),
    ],
)
def test_base_url_normalisation(given, expected):
    assert normalize_base_url(given) == expected


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/", "/v1/chat/completions"])
async def test_every_spelling_of_the_base_url_reaches_the_endpoint(suffix):
    with ScriptedOpenAIServer([reply("ok")]) as server:
        await model_for(server, suffix).respond(request())
        assert server.requests[0].path == "/v1/chat/completions"


async def test_key_is_a_bearer_token_and_a_local_server_needs_none():
    with ScriptedOpenAIServer([reply("a"), reply("b")]) as server:
        await model_for(server).respond(request())
        await OpenAIModel.from_env(None, {"OPENAI_BASE_URL": server.url}).respond(request())
        first, second = server.requests
    assert first.headers["authorization"] == "Bearer sk-test"
    assert second.headers["authorization"] == "Bearer no-key"


def test_the_default_url_without_a_key_is_a_clear_error():
    with pytest.raises(ConfigError, match="OPENAI_API_KEY.*OPENAI_BASE_URL"):
        OpenAIModel.from_env(None, {})


def test_model_name_and_retries_from_env_and_flag():
    env = {"OPENAI_API_KEY": "k", "OPENAI_MODEL": "gpt-4.1", "DRIVETRAIN_MAX_RETRIES": "7"}
    assert OpenAIModel.from_env(None, env).name == "gpt-4.1"
    assert OpenAIModel.from_env("qwen2.5:7b", env).name == "qwen2.5:7b"
    assert OpenAIModel.from_env(None, {"OPENAI_API_KEY": "k"}).name == "gpt-4o-mini"
    assert OpenAIModel.from_env(None, env).max_retries == 7


def test_openai_itself_gets_max_completion_tokens_other_servers_max_tokens():
    params = OpenAIModel.from_env(None, {"OPENAI_API_KEY": "k"})._params(request())
    assert params["max_completion_tokens"] == 100 and "max_tokens" not in params
    params = OpenAIModel.from_env(None, {"OPENAI_BASE_URL": "http://localhost:11434"})._params(request())
    assert params["max_tokens"] == 100 and "max_completion_tokens" not in params


# ----------------------------------------------------------------- streaming


async def test_text_streams_to_on_text_and_usage_comes_from_the_last_chunk():
    steps = [
        reply(
            "hello there, streaming world",
            usage={"prompt_tokens": 50, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 40}},
        )
    ]
    with ScriptedOpenAIServer(steps) as server:
        seen = []
        r = await model_for(server).respond(request(system="Be brief.", stop_sequences=["END"], on_text=seen.append))
        body = server.requests[0].body
    assert len(seen) > 1 and "".join(seen) == "hello there, streaming world" == r.message.text
    assert (r.stop_reason, r.model, r.id) == ("end_turn", "gpt-test", "chatcmpl-scripted-0001")
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.cache_read_input_tokens) == (10, 7, 40)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["stop"] == ["END"] and body["max_tokens"] == 100 and "tools" not in body


async def test_parallel_tool_calls_split_across_chunks():
    long_path = "src/" + "deep/" * 20 + "module.py"
    steps = [
        respond(
            [
                text("Reading both."),
                tool_call("Read", {"file_path": long_path}, id="call_a"),
                tool_call("Read", {"file_path": "b.py"}, id="call_b"),
            ]
        )
    ]
    with ScriptedOpenAIServer(steps) as server:
        r = await model_for(server).respond(request(tools=[READ]))
        assert server.requests[0].body["tools"][0]["function"]["name"] == "Read"
    assert r.stop_reason == "tool_use"
    assert r.content == (
        TextBlock("Reading both."),
        ToolUseBlock("call_a", "Read", {"file_path": long_path}),
        ToolUseBlock("call_b", "Read", {"file_path": "b.py"}),
    )


def chunk(delta=None, finish=None, usage=None):
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "c1", "model": "m", "choices": choices, "usage": usage}


def test_accumulator_joins_interleaved_and_index_less_tool_call_deltas():
    acc = ChunkAccumulator()
    for c in [
        chunk({"role": "assistant", "content": ""}),
        chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "Read", "arguments": '{"file_'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "Grep", "arguments": '{"pat'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'path": "a.py"}'}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": 'tern": "x"}'}}]}),
        chunk({}, "tool_calls"),
        chunk(usage={"prompt_tokens": 5, "completion_tokens": 2}),
    ]:
        acc.add(c)
    calls = acc.completion()["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("a", "Read", {"file_path": "a.py"}),
        ("b", "Grep", {"pattern": "x"}),
    ]
    assert acc.completion()["usage"]["prompt_tokens"] == 5
    # servers that leave out the index, send the name again, or send the arguments as an object
    acc = ChunkAccumulator()
    for c in [
        chunk({"tool_calls": [{"id": "a", "function": {"name": "Read", "arguments": '{"file_path": '}}]}),
        chunk({"tool_calls": [{"function": {"name": "Read", "arguments": '"a.py"}'}}]}),
        chunk({"tool_calls": [{"id": "b", "function": {"name": "Glob", "arguments": {"pattern": "*.py"}}}]}),
        chunk({}, "tool_calls"),
    ]:
        acc.add(c)
    calls = acc.completion()["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("a", "Read", {"file_path": "a.py"}),
        ("b", "Glob", {"pattern": "*.py"}),
    ]


async def test_a_whole_conversation_is_sent_as_valid_chat():
    history = [
        Message.user("read it"),
        Message.assistant(
            ToolUseBlock("call_1", "Read", {"file_path": "a.py"}), ToolUseBlock("call_2", "Read", {"file_path": "b.py"})
        ),
        Message("user", (ToolResultBlock("call_1", "x = 1"), ToolResultBlock("call_2", "missing", True))),
    ]
    with ScriptedOpenAIServer([reply("a.py sets x.")]) as server:  # the server rejects any unanswered call
        await model_for(server).respond(ModelRequest(history, tools=[READ]))
        roles = [(m["role"], m.get("tool_call_id")) for m in server.requests[0].body["messages"]]
    assert roles == [("user", None), ("assistant", None), ("tool", "call_1"), ("tool", "call_2")]


async def test_malformed_arguments_are_kept_as_an_invalid_call():
    with ScriptedOpenAIServer([respond([tool_call("Read", '{"file_path": "a.py', id="call_x")])]) as server:
        r = await model_for(server).respond(request(tools=[READ]))
    (block,) = r.content
    assert isinstance(block, InvalidToolUseBlock) and block.input == {} and '{"file_path": "a.py' in block.input_error


async def test_finish_reason_length_is_max_tokens():
    with ScriptedOpenAIServer([reply("cut sho", stop_reason="length")]) as server:
        r = await model_for(server).respond(request())
    assert (r.stop_reason, r.message.text) == ("max_tokens", "cut sho")


async def test_repeated_tool_call_ids_get_fresh_ones():
    # some servers number calls call_0, call_1, … on every turn; a repeat would break the history
    history = [
        Message.user("go"),
        Message.assistant(ToolUseBlock("call_0", "Read", {"file_path": "a"})),
        Message("user", (ToolResultBlock("call_0", "a"),)),
    ]
    steps = [
        respond(
            [tool_call("Read", {"file_path": "b"}, id="call_0"), tool_call("Read", {"file_path": "c"}, id="call_0")],
            stop_reason="stop",
        )
    ]
    with ScriptedOpenAIServer(steps) as server:
        r = await model_for(server).respond(ModelRequest(history, tools=[READ]))
    ids = [b.id for b in r.content]
    assert r.stop_reason == "tool_use" and len(set(ids)) == 2 and "call_0" not in ids


async def test_a_server_that_ignores_stream_true_is_understood():
    body = {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "model": "local",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "whole"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    with ScriptedOpenAIServer([raw_response(200, body)]) as server:
        seen = []
        r = await model_for(server).respond(request(on_text=seen.append))
    assert (r.message.text, seen, r.usage.input_tokens) == ("whole", ["whole"], 3)


# ----------------------------------------------------------------- wrong shapes

ANTHROPIC_MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def anthropic_sse() -> bytes:
    start = {"type": "message_start", "message": dict(ANTHROPIC_MESSAGE, content=[])}
    return f'event: message_start\ndata: {json.dumps(start)}\n\nevent: ping\ndata: {{"type": "ping"}}\n\n'.encode()


@pytest.mark.parametrize(
    "step",
    [raw_response(200, ANTHROPIC_MESSAGE), raw_response(200, anthropic_sse(), content_type="text/event-stream")],
    ids=["json", "sse"],
)
async def test_an_anthropic_shaped_answer_is_named(step):
    with ScriptedOpenAIServer([step]) as server:
        with pytest.raises(ModelError) as e:
            await model_for(server).respond(request())
    msg = str(e.value)
    assert "Anthropic" in msg and "OPENAI_BASE_URL" in msg and "--provider anthropic" in msg
    assert "ANTHROPIC_BASE_URL" in msg and f"{server.url}/v1/chat/completions" in msg


async def test_an_answer_that_is_no_api_at_all_is_named():
    step = raw_response(200, "<html>login</html>", content_type="text/html")
    with ScriptedOpenAIServer([step, step]) as server:  # retried: a gateway's error page may be passing
        with pytest.raises(ModelError, match="did not answer as an OpenAI chat-completions endpoint.*OPENAI_BASE_URL"):
            await model_for(server, max_retries=1).respond(request())


# ----------------------------------------------------------------- errors and retries


@pytest.mark.parametrize("status", [429, 500, 502, 503, 408, 409])
async def test_retries_transient_errors(status):
    with ScriptedOpenAIServer([http_error(status, "server_error", "try later"), reply("ok")]) as server:
        r = await model_for(server).respond(request())
        assert r.message.text == "ok" and len(server.requests) == 2


async def test_retry_after_is_honoured():
    steps = [http_error(429, "rate_limit_error", "slow down", {"retry-after": "0.6"}), reply("ok")]
    with ScriptedOpenAIServer(steps) as server:
        started = time.monotonic()
        await model_for(server).respond(request())
        assert time.monotonic() - started >= 0.55


async def test_gives_up_after_max_retries_from_env():
    with ScriptedOpenAIServer([http_error(503, "server_error", "busy")] * 3) as server:
        env = {"OPENAI_BASE_URL": server.url, "DRIVETRAIN_MAX_RETRIES": "2"}
        with pytest.raises(ModelError, match="503.*busy"):
            await OpenAIModel.from_env(None, env, backoff=0.01).respond(request())
        assert len(server.requests) == 3


@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_never_retries_client_errors(status):
    with ScriptedOpenAIServer([http_error(status, "invalid_request_error", "no")]) as server:
        with pytest.raises(ModelError):
            await model_for(server).respond(request())
        assert len(server.requests) == 1


async def test_an_error_in_the_middle_of_the_stream_is_retried():
    steps = [reply("never finished", error_after_events=2, error_type="server_error"), reply("ok")]
    with ScriptedOpenAIServer(steps) as server:
        r = await model_for(server).respond(request())
    assert r.message.text == "ok"


async def test_a_stream_that_ends_without_a_finish_reason_is_retried_then_named():
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "half"}, "finish_reason": None}],
    }
    cut = raw_response(200, f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n", content_type="text/event-stream")
    with ScriptedOpenAIServer([cut, cut]) as server:
        with pytest.raises(ModelError, match="ended before the answer was finished"):
            await model_for(server, max_retries=1).respond(request())
        assert len(server.requests) == 2


@pytest.mark.parametrize("status", [401, 403])
async def test_rejected_key_names_the_variable_and_url(status):
    with ScriptedOpenAIServer([http_error(status, "invalid_request_error", "Incorrect API key provided")]) as server:
        with pytest.raises(ModelError) as e:
            await model_for(server).respond(request())
    msg = str(e.value)
    assert "rejected" in msg and "OPENAI_API_KEY" in msg and f"{server.url}/v1" in msg and str(status) in msg
    assert "Incorrect API key provided" in msg and "OPENAI_BASE_URL" in msg


async def test_a_server_wanting_a_key_when_none_was_set_says_to_set_one():
    with ScriptedOpenAIServer([http_error(401, "invalid_request_error", "missing key")]) as server:
        with pytest.raises(ModelError, match="OPENAI_API_KEY is unset"):
            await OpenAIModel.from_env(None, {"OPENAI_BASE_URL": server.url}).respond(request())


async def test_404_prints_the_final_url_and_the_added_v1():
    with pytest.raises(AssertionError, match="no such endpoint"):  # the server records the stray request too
        with ScriptedOpenAIServer([]) as server:
            with pytest.raises(ModelError) as e:
                await OpenAIModel.from_env("qwen", {"OPENAI_BASE_URL": server.url + "/proxy"}).respond(request())
            msg = str(e.value)
            assert f"{server.url}/proxy/chat/completions" in msg and "404" in msg and "'qwen'" in msg
            assert "/v1 was added" not in msg
    with ScriptedOpenAIServer([http_error(404, "not_found_error", "model 'qwen' not found")]) as server:
        with pytest.raises(ModelError) as e:
            await OpenAIModel.from_env("qwen", {"OPENAI_BASE_URL": server.url}).respond(request())
    assert "/v1 was added" in str(e.value) and "model 'qwen' not found" in str(e.value)


async def test_connection_refused_names_url_and_setting():
    url = f"http://127.0.0.1:{free_port()}/v1"
    model = OpenAIModel.from_env(None, {"OPENAI_BASE_URL": url}, max_retries=1, backoff=0.01)
    with pytest.raises(ModelError) as e:
        await model.respond(request())
    msg = str(e.value)
    assert f"{url}/chat/completions" in msg and "could not be reached" in msg and "OPENAI_BASE_URL" in msg


async def test_unreachable_proxy_is_named(monkeypatch):
    proxy = f"http://127.0.0.1:{free_port()}"
    for var in (
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    model = OpenAIModel.from_env(None, {"OPENAI_API_KEY": "k"}, max_retries=0)
    with pytest.raises(ModelError) as e:
        await model.respond(request())
    msg = str(e.value)
    assert "https://api.openai.com/v1/chat/completions" in msg and proxy in msg and "HTTPS_PROXY" in msg
    assert "the default" in msg


async def test_idle_stream_times_out_with_a_clear_error():
    with ScriptedOpenAIServer([reply("never finished", stall_after_events=2, stall_seconds=5)]) as server:
        model = model_for(server, idle_timeout=0.5, max_retries=0)
        started = time.monotonic()
        with pytest.raises(ModelError, match="timed out"):
            await model.respond(request())
        assert time.monotonic() - started < 3

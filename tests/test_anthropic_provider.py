"""The Anthropic provider against the scripted server on 127.0.0.1, through the real SDK."""

import socket
import time

import pytest

from drivetrain.errors import ConfigError, ModelError
from drivetrain.messages import Message, ToolUseBlock
from drivetrain.models.anthropic import AnthropicModel, normalize_base_url
from drivetrain.models.base import ModelRequest
from drivetrain.testing import ScriptedServer, http_error, raw_response, reply, respond, tool_call


def request(text="hi"):
    return ModelRequest([Message.user(text)], max_tokens=100)


WHOLE = {"stream": False, "aiohttp": True}  # as a batch sweep asks: whole answers, through aiohttp


MADE = []  # models made by a test, their clients closed after it (an aiohttp session left open is warned about)


@pytest.fixture
async def closing():
    yield
    while MADE:
        await MADE.pop().aclose()


@pytest.fixture(params=["streamed", "whole"])
def kind(request, closing):
    """The same behaviour asked of both ways of getting an answer."""
    return {} if request.param == "streamed" else WHOLE


def model_for(server, kind=None, **kw):
    kw.setdefault("backoff", 0.01)
    return made(
        {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-test-key"},
        "claude-sonnet-4-6",
        **(kind or {}),
        **kw,
    )


def made(env, name=None, **kw):
    MADE.append(AnthropicModel.from_env(name, env, **kw))
    return MADE[-1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "given, expected",
    [
        ("https://api.example.com", "https://api.example.com"),
        ("https://api.example.com/", "https://api.example.com"),
        ("https://api.example.com/v1", "https://api.example.com"),
        ("https://api.example.com/v1/", "https://api.example.com"),
        ("https://api.example.com/v1/messages", "https://api.example.com"),
        ("https://gw.example.com/anthropic/v1", "https://gw.example.com/anthropic"),
        ("  http://127.0.0.1:8080//  ", "http://127.0.0.1:8080"),
    ],
)
def test_base_url_normalisation(given, expected):
    assert normalize_base_url(given) == expected


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_trailing_v1_does_not_double(suffix):
    with ScriptedServer([reply("ok")]) as server:
        model = AnthropicModel.from_env(None, {"ANTHROPIC_BASE_URL": server.url + suffix, "ANTHROPIC_API_KEY": "k"})
        await model.respond(request())
        assert server.requests[0].path == "/v1/messages"


async def test_api_key_sent_as_x_api_key_and_auth_token_as_bearer():
    with ScriptedServer([reply("a"), reply("b")]) as server:
        await AnthropicModel.from_env(None, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k1"}).respond(
            request()
        )
        await AnthropicModel.from_env(None, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_AUTH_TOKEN": "t2"}).respond(
            request()
        )
        first, second = server.requests
        assert first.headers.get("x-api-key") == "k1"
        assert second.headers.get("authorization") == "Bearer t2"


def test_model_name_from_env_and_flag():
    env = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_MODEL": "claude-haiku-4-5"}
    assert AnthropicModel.from_env(None, env).name == "claude-haiku-4-5"
    assert AnthropicModel.from_env("claude-opus-4-5", env).name == "claude-opus-4-5"


def test_missing_credentials_is_a_clear_error():
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        AnthropicModel.from_env(None, {})


async def test_tool_use_and_usage_from_the_final_message(kind):
    steps = [
        respond(
            [tool_call("Read", {"file_path": "a.py"}, id="toolu_a")], usage={"input_tokens": 17, "output_tokens": 42}
        )
    ]
    with ScriptedServer(steps) as server:
        req = ModelRequest(
            [Message.user("x")], tools=[{"name": "Read", "input_schema": {"type": "object"}}], max_tokens=100
        )
        r = await model_for(server, kind).respond(req)
    assert server.requests[0].body.get("stream", False) is (kind != WHOLE)
    assert r.stop_reason == "tool_use"
    assert r.content == (ToolUseBlock("toolu_a", "Read", {"file_path": "a.py"}),)
    # streamed: message_start carries output_tokens=1; the final message_delta carries 42
    assert (r.usage.input_tokens, r.usage.output_tokens) == (17, 42)
    assert r.id.startswith("msg_scripted") and r.model == "claude-sonnet-4-6"


async def test_whole_answers_are_streamed_when_the_text_is_watched_or_may_be_long(closing):
    with ScriptedServer([reply("watched"), reply("long")]) as server:
        seen = []
        model = model_for(server, WHOLE)
        await model.respond(ModelRequest([Message.user("x")], max_tokens=50, on_text=seen.append))
        await model.respond(ModelRequest([Message.user("y")], max_tokens=16384))
        assert [r.body.get("stream") for r in server.requests] == [True, True]
    assert "".join(seen) == "watched"


async def test_without_aiohttp_whole_answers_go_through_httpx(monkeypatch, closing):
    import drivetrain.models.anthropic as provider

    monkeypatch.setattr(provider, "has_aiohttp", lambda: False)  # `drivetrain[batch]` not installed
    with ScriptedServer([reply("through httpx")]) as server:
        model = model_for(server, WHOLE)
        assert model.aiohttp is False
        assert (await model.respond(request())).message.text == "through httpx"
        assert server.requests[0].body.get("stream") is None


async def test_a_whole_answer_that_takes_too_long_times_out_with_a_clear_error(closing):
    with ScriptedServer([reply("late", delay=3)]) as server:
        model = model_for(server, WHOLE, answer_timeout=0.5, max_retries=0)
        with pytest.raises(ModelError, match=r"no whole answer within 0.5 s \(API_TIMEOUT_MS\)"):
            await model.respond(request())


async def test_text_is_streamed_to_on_text():
    with ScriptedServer([reply("hello there, streaming world")]) as server:
        seen = []
        r = await model_for(server).respond(ModelRequest([Message.user("x")], max_tokens=50, on_text=seen.append))
    assert "".join(seen) == "hello there, streaming world" == r.message.text


@pytest.mark.parametrize(
    "status, error",
    [
        (529, "overloaded_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (408, "timeout_error"),
        (409, "conflict"),
    ],
)
async def test_retries_transient_errors(status, error, kind):
    with ScriptedServer([http_error(status, error, "try later"), reply("ok")]) as server:
        r = await model_for(server, kind).respond(request())
        assert r.message.text == "ok" and len(server.requests) == 2


async def test_retry_after_is_honoured(kind):
    steps = [http_error(429, "rate_limit_error", "slow down", {"retry-after": "0.6"}), reply("ok")]
    with ScriptedServer(steps) as server:
        started = time.monotonic()
        await model_for(server, kind).respond(request())
        assert time.monotonic() - started >= 0.55


async def test_gives_up_after_max_retries(kind):
    with ScriptedServer([http_error(529, "overloaded_error", "busy")] * 3) as server:
        with pytest.raises(ModelError, match="529"):
            await model_for(server, kind, max_retries=2).respond(request())
        assert len(server.requests) == 3


@pytest.mark.parametrize(
    "status, error",
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
    ],
)
async def test_never_retries_client_errors(status, error, kind):
    with ScriptedServer([http_error(status, error, "no")]) as server:
        with pytest.raises(ModelError):
            await model_for(server, kind).respond(request())
        assert len(server.requests) == 1


@pytest.mark.parametrize("status", [401, 403])
async def test_rejected_key_names_the_variable_and_url(status, kind):
    with ScriptedServer([http_error(status, "authentication_error", "invalid x-api-key")]) as server:
        with pytest.raises(ModelError) as e:
            await model_for(server, kind).respond(request())
    msg = str(e.value)
    assert "rejected" in msg and "ANTHROPIC_API_KEY" in msg and server.url in msg and str(status) in msg


async def test_rejected_token_names_auth_token():
    with ScriptedServer([http_error(401, "authentication_error", "bad token")]) as server:
        model = AnthropicModel.from_env(None, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_AUTH_TOKEN": "t"})
        with pytest.raises(ModelError, match="ANTHROPIC_AUTH_TOKEN"):
            await model.respond(request())


async def test_connection_refused_names_url_and_setting(kind):
    url = f"http://127.0.0.1:{free_port()}"
    model = made({"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "k"}, max_retries=1, backoff=0.01, **kind)
    with pytest.raises(ModelError) as e:
        await model.respond(request())
    msg = str(e.value)
    assert f"{url}/v1/messages" in msg and "could not be reached" in msg and "ANTHROPIC_BASE_URL" in msg


async def test_unreachable_proxy_is_named(monkeypatch, kind):
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
    model = made({"ANTHROPIC_API_KEY": "k"}, max_retries=0, **kind)
    with pytest.raises(ModelError) as e:
        await model.respond(request())
    msg = str(e.value)
    assert "https://api.anthropic.com/v1/messages" in msg and proxy in msg and "HTTPS_PROXY" in msg


async def test_openai_shaped_answer_is_named(kind):
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    }
    with ScriptedServer([raw_response(200, body)]) as server:
        with pytest.raises(ModelError) as e:
            await model_for(server, kind).respond(request())
    msg = str(e.value)
    assert "OpenAI" in msg and "choices" in msg and "ANTHROPIC_BASE_URL" in msg and "--provider openai" in msg


async def test_404_prints_the_final_url():
    # a base URL with a wrong path prefix: the server answers 404 for /proxy/v1/messages
    with pytest.raises(AssertionError, match="no such endpoint"):  # the server records the stray request too
        with ScriptedServer([]) as server:
            model = AnthropicModel.from_env(
                None, {"ANTHROPIC_BASE_URL": server.url + "/proxy/v1", "ANTHROPIC_API_KEY": "k"}
            )
            with pytest.raises(ModelError) as e:
                await model.respond(request())
            assert f"{server.url}/proxy/v1/messages" in str(e.value) and "404" in str(e.value)


async def test_idle_stream_times_out_with_a_clear_error():
    with ScriptedServer([reply("never finished", stall_after_events=2, stall_seconds=5)]) as server:
        model = model_for(server, idle_timeout=0.5, max_retries=0)
        started = time.monotonic()
        with pytest.raises(ModelError, match="timed out"):
            await model.respond(request())
        assert time.monotonic() - started < 3


async def test_x_should_retry_false_is_honoured(kind):
    steps = [http_error(502, "api_error", "backend gave up", {"x-should-retry": "false"})]
    with ScriptedServer(steps) as server:
        with pytest.raises(ModelError, match="backend gave up"):
            await model_for(server, kind).respond(request())
        assert len(server.requests) == 1

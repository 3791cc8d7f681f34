"""`drivetrain serve` as an endpoint: keys, the queue, shutdown, limits, metrics, fields passed through,
an OpenAI-compatible provider behind it, the command with --workers, and the local model's KV reuse.
Official SDKs against real servers on 127.0.0.1, no mocks."""

import contextlib
import json
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import anthropic
import openai
import pytest

from drivetrain.models.anthropic import AnthropicModel
from drivetrain.models.openai import OpenAIModel
from drivetrain.serve import ModelServer
from drivetrain.testing import ScriptedOpenAIServer, ScriptedServer, reply, respond, text, tool_call
from test_serve import CHAT_WEATHER, DRIVETRAIN, HI, WEATHER, clean_env, free_port, post

KEY = "sk-serve-test-0123456789"


@contextlib.contextmanager
def served(steps, upstream_class=ScriptedServer, **server_kw):
    """A ModelServer around the real provider of the upstream's API, which talks to a scripted server."""
    log: list[str] = []
    with upstream_class(steps) as upstream:
        if upstream_class is ScriptedServer:
            model = AnthropicModel.from_env(
                "claude-upstream",
                {"ANTHROPIC_BASE_URL": upstream.url, "ANTHROPIC_API_KEY": "sk-upstream"},
                max_retries=0,
            )
        else:
            model = OpenAIModel.from_env(
                "gpt-upstream",
                {"OPENAI_BASE_URL": upstream.url + "/v1", "OPENAI_API_KEY": "sk-upstream"},
                max_retries=0,
            )
        with ModelServer(model, log=log.append, **server_kw) as server:
            server.upstream, server.lines = upstream, log
            yield server


def claude(server, key="unused", **kw):
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, **kw)


def gpt(server, key="unused"):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def until(condition, timeout=20.0):
    """Wait for a condition another thread brings about (a request reaching a server)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


def in_thread(fn):
    box = {}

    def run():
        try:
            box["result"] = fn()
        except Exception as e:  # the test's assertion on the result shows it
            box["result"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


# ----------------------------------------------------------------- the API key


def test_api_key_x_api_key_bearer_none_and_wrong():
    with served([reply("one"), reply("two")], api_key=KEY) as server:
        assert claude(server, KEY).messages.create(model="m", max_tokens=5, messages=HI).content[0].text == "one"
        assert gpt(server, KEY).chat.completions.create(model="m", messages=HI).choices[0].message.content == "two"
        with pytest.raises(anthropic.AuthenticationError) as caught:  # the Anthropic SDK sends x-api-key
            claude(server, "sk-wrong").messages.create(model="m", max_tokens=5, messages=HI)
        assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == "authentication_error"
        assert "DRIVETRAIN_SERVE_API_KEY" in caught.value.body["error"]["message"]
        with pytest.raises(openai.AuthenticationError) as caught:  # the OpenAI SDK sends Authorization: Bearer
            gpt(server, "sk-wrong").chat.completions.create(model="m", messages=HI)
        assert caught.value.code == "invalid_api_key" and set(caught.value.body) >= {"message", "type", "code"}
        status, err = post(server, "/v1/messages", {"model": "m", "max_tokens": 5, "messages": HI})  # no key at all
        assert (
            status == 401 and err["error"]["type"] == "authentication_error" and "no API key" in err["error"]["message"]
        )
        status, err = post(server, "/v1/chat/completions", {"model": "m", "messages": HI})
        assert status == 401 and err["error"]["code"] == "invalid_api_key"
        status, _ = post(
            server, "/v1/messages/count_tokens", {"model": "m", "messages": HI}, {"authorization": f"Bearer {KEY}"}
        )
        assert status == 200
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(server.url + "/health", timeout=5)
        assert caught.value.code == 401
    assert len(server.upstream.requests) == 3  # two answers and one count; the refused never went upstream


# ----------------------------------------------------------------- the queue, shutdown, limits


def test_queue_full_is_429_in_each_shape_and_the_queue_drains():
    release = threading.Event()
    steps = [reply("first", hold=release), reply("second")]  # (hold= holds streamed answers)

    def streamed():
        with claude(server).messages.stream(model="m", max_tokens=5, messages=HI) as stream:
            return stream.get_final_message()

    with served(steps, max_concurrent=1, max_queue=1) as server:
        first, got1 = in_thread(streamed)
        until(lambda: len(server.upstream.requests) == 1)
        second, got2 = in_thread(lambda: gpt(server).chat.completions.create(model="m", messages=HI))
        until(lambda: server.state.admission.waiting == 1)
        with pytest.raises(anthropic.RateLimitError) as caught:
            claude(server).messages.create(model="m", max_tokens=5, messages=HI)
        assert caught.value.body["error"]["type"] == "overloaded_error"
        assert int(caught.value.response.headers["retry-after"]) >= 1
        with pytest.raises(openai.RateLimitError) as caught:
            gpt(server).chat.completions.create(model="m", messages=HI, stream=True)
        assert caught.value.code == "rate_limit_exceeded"
        release.set()
        first.join(5)
        second.join(5)
        assert got1["result"].content[0].text == "first" and got2["result"].choices[0].message.content == "second"
        assert server.calls_in_flight == 0
        assert "drivetrain_serve_rejected_total{pid=" in urllib.request.urlopen(server.url + "/metrics").read().decode()


def test_shutdown_finishes_what_is_in_flight_and_turns_new_requests_away():
    release = threading.Event()
    with served([reply("finished in flight", hold=release)]) as server:

        def streamed():
            with claude(server).messages.stream(model="m", max_tokens=5, messages=HI) as stream:
                return stream.get_final_text()

        worker, got = in_thread(streamed)
        until(lambda: len(server.upstream.requests) == 1)
        server.drain()
        with pytest.raises(anthropic.APIStatusError) as caught:
            claude(server).messages.create(model="m", max_tokens=5, messages=HI)
        assert caught.value.status_code == 503 and caught.value.body["error"]["type"] == "overloaded_error"
        status, err = post(server, "/v1/chat/completions", {"model": "m", "messages": HI})
        assert status == 503 and err["error"]["type"] == "server_error"
        closing = threading.Thread(target=server.close)
        closing.start()
        release.set()
        worker.join(5)
        closing.join(10)
        assert got["result"] == "finished in flight"


def test_request_body_limit_is_413_in_each_shape():
    with served([], max_body=1000) as server:
        big = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x" * 2000}]}
        status, err = post(server, "/v1/messages", big)
        assert status == 413 and err["error"]["type"] == "request_too_large"
        with pytest.raises(openai.APIStatusError) as caught:
            gpt(server).chat.completions.create(model="m", messages=big["messages"])
        assert caught.value.status_code == 413 and "larger than 1000 bytes" in caught.value.message


# ----------------------------------------------------------------- what passes through


def test_anthropic_fields_reach_the_provider_as_sent():
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}

    def as_sent(body):
        assert body["tool_choice"] == {"type": "tool", "name": "get_weather"} and body["temperature"] == 0.3
        assert body["top_k"] == 5 and body["stop_sequences"] == ["END"] and body["metadata"] == {"user_id": "u1"}
        assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
        assert body["messages"][0]["content"] == [image, text("What is this?")]

    with served([respond([tool_call("get_weather", {"city": "Oslo"})], expect=as_sent)]) as server:
        msg = claude(server).messages.create(
            model="m",
            max_tokens=50,
            tools=[WEATHER],
            tool_choice={"type": "tool", "name": "get_weather"},
            extra_body={"temperature": 0.3, "top_k": 5},
            stop_sequences=["END"],
            metadata={"user_id": "u1"},
            system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            messages=[{"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]}],
        )
        assert msg.stop_reason == "tool_use" and msg.content[0].input == {"city": "Oslo"}
        # the access line is written once the response is sent: the client may read it first
        until(
            lambda: any("POST /v1/messages 200" in line and " in=" in line and " out=" in line for line in server.lines)
        )


def test_openai_fields_translated_for_the_anthropic_provider():
    def translated(body):
        assert body["tool_choice"] == {"type": "any"} and [t["name"] for t in body["tools"]] == ["get_weather"]
        assert body["temperature"] == 0.5 and body["stop_sequences"] == ["END"] and body["system"] == "Be brief."
        assert body["messages"][0]["content"][1] == {
            "type": "image",
            "source": {"type": "url", "url": "https://x/y.png"},
        }

    other = {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}
    with served([respond([tool_call("get_weather", {"city": "Oslo"}, id="toolu_1")], expect=translated)]) as server:
        done = gpt(server).chat.completions.create(
            model="m",
            temperature=0.5,
            stop="END",
            tools=[CHAT_WEATHER, other],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            messages=[
                {"role": "system", "content": "Be brief."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Weather?"},
                        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                    ],
                },
            ],
        )
        assert done.choices[0].message.tool_calls[0].function.name == "get_weather"
        assert done.usage.prompt_tokens > 0


def test_metrics_count_requests_latency_and_tokens():
    with served([reply("hi"), reply("there")]) as server:
        claude(server).messages.create(model="m", max_tokens=5, messages=HI)
        with claude(server).messages.stream(model="m", max_tokens=5, messages=HI) as stream:
            stream.get_final_message()
        page = urllib.request.urlopen(server.url + "/metrics", timeout=5).read().decode()
    assert 'drivetrain_serve_requests_total{method="POST",route="/v1/messages",status="200"' in page
    count = [
        line
        for line in page.splitlines()
        if line.startswith("drivetrain_serve_request_seconds_count") and 'route="/v1/messages"' in line
    ]
    assert count and count[0].endswith(" 2")
    output = [line for line in page.splitlines() if line.startswith('drivetrain_serve_tokens_total{kind="output"')]
    assert int(output[0].rsplit(" ", 1)[1]) >= 2


# ----------------------------------------------------------------- an OpenAI-compatible provider behind serve


def test_openai_provider_passthrough_and_translation():
    steps = [
        reply("Hello."),
        respond([text("Checking."), tool_call("get_weather", {"city": "Oslo"}, id="call_1")]),
        reply("Sunny."),
    ]
    with served(steps, ScriptedOpenAIServer) as server:
        client = gpt(server)
        done = client.chat.completions.create(model="anything", messages=HI, temperature=0.2, seed=7)
        assert done.choices[0].message.content == "Hello." and done.model == "gpt-upstream"
        assert server.upstream.requests[0].body["seed"] == 7  # a field only OpenAI knows reaches it as sent
        with client.chat.completions.stream(model="m", messages=HI, tools=[CHAT_WEATHER]) as stream:
            final = stream.get_final_completion()
        assert final.choices[0].message.tool_calls[0].function.parsed_arguments == {"city": "Oslo"}
        msg = claude(server).messages.create(model="m", max_tokens=20, system="Be brief.", messages=HI)  # translated
        assert msg.content[0].text == "Sunny." and msg.usage.output_tokens > 0
        assert server.upstream.requests[2].body["messages"][0] == {"role": "system", "content": "Be brief."}


def test_openai_client_hanging_up_stops_the_translated_call():
    steps = [reply("one two three four five six", stall_after_events=4, stall_seconds=5)]
    with served(steps) as server:
        stream = gpt(server).chat.completions.create(model="m", messages=HI, stream=True)
        next(iter(stream))
        stream.close()
        until(lambda: server.calls_in_flight == 0, timeout=3)


# ----------------------------------------------------------------- the command


def test_command_with_a_key_off_loopback_and_two_workers(tmp_path):
    port = free_port()
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    with ScriptedServer([reply("from a worker")]) as upstream:
        serve = subprocess.Popen(
            [
                DRIVETRAIN,
                "serve",
                "--provider",
                "anthropic",
                "--host",
                "0.0.0.0",
                "--port",
                str(port),
                "--api-key-file",
                str(key_file),
                "--workers",
                "2",
                "--grace",
                "5",
            ],  # (within the wait below)
            env=clean_env(ANTHROPIC_BASE_URL=upstream.url, ANTHROPIC_API_KEY="sk-upstream"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            health = urllib.request.Request(url + "/health", headers={"x-api-key": KEY})
            until(lambda: _answers(health, serve), timeout=90)  # two fresh interpreters on a busy machine
            with pytest.raises(urllib.error.HTTPError) as caught:  # /health needs the key too
                urllib.request.urlopen(url + "/health", timeout=5)
            assert caught.value.code == 401
            client = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0)
            assert client.messages.create(model="m", max_tokens=5, messages=HI).content[0].text == "from a worker"
            client.close()  # no keep-alive connection left for the shutdown to wait out
            wrong = anthropic.Anthropic(base_url=url, api_key="nope", max_retries=0)
            with pytest.raises(anthropic.AuthenticationError):
                wrong.models.list()
            wrong.close()
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=20)
    assert serve.returncode == 0, serve.stderr.read()


def _answers(request, proc) -> bool:
    assert proc.poll() is None, proc.stderr.read()
    try:
        with urllib.request.urlopen(request, timeout=2):
            return True
    except OSError:
        return False


def test_local_model_takes_turns_and_reuses_the_shared_prefix():
    from drivetrain.errors import ConfigError
    from drivetrain.models.local import LocalModel

    model = LocalModel("small", n_ctx=2048, n_threads=1, seed=1, temperature=0.0)  # see test_local_model.py
    try:
        model.load()
    except ConfigError as exc:
        pytest.skip(f"the 0.5B model is not installed: {exc}")
    system = "You answer in one word. " + "Facts: the sky is blue, grass is green, snow is white. " * 8
    with ModelServer(model) as server:
        assert server.state.admission.limit == 1  # one llama.cpp context, taken in turns
        first = claude(server).messages.create(
            model="m", max_tokens=3, system=system, messages=[{"role": "user", "content": "Colour of the sky?"}]
        )
        second = claude(server).messages.create(
            model="m", max_tokens=3, system=system, messages=[{"role": "user", "content": "Colour of grass?"}]
        )
    assert first.usage.cache_read_input_tokens == 0
    # the second prompt shares the system turn: llama.cpp evaluated only what differs
    assert second.usage.cache_read_input_tokens > 100 and second.usage.input_tokens < 30
    assert json.dumps(second.usage.to_dict())

"""The scripted servers' fault kit (``drivetrain.testing.faults``): a seeded schedule that faults requests
without using steps, and what each request got and billed."""

from __future__ import annotations

import anthropic
import pytest

from drivetrain.testing import FaultSchedule, ScriptedOpenAIServer, ScriptedServer, fault, reply


def ask(url: str, n: int) -> list[str]:
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
    got = []
    for _ in range(n):
        try:
            got.append(
                client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
                .content[0]
                .text
            )
        except anthropic.APIError as e:
            got.append(type(e).__name__)
    return got


def test_a_schedule_faults_requests_without_using_their_steps():
    schedule = FaultSchedule(at={1: "http_529", 3: "http_500"})
    with ScriptedServer([reply("one"), reply("two")], faults=schedule) as server:
        got = ask(server.url, 4)
    assert got == ["OverloadedError", "one", "InternalServerError", "two"]
    assert [r.fault for r in server.requests] == ["http_529", None, "http_500", None]
    assert schedule.injected == [(1, "http_529"), (3, "http_500")]
    billed = [r.usage for r in server.requests]
    assert billed[0] is None and billed[2] is None and all(b and b["output_tokens"] > 0 for b in billed[1::2])


def test_one_seed_gives_one_sequence_of_faults():
    def faults(seed: int) -> list:
        s = FaultSchedule(rate=0.3, seed=seed, kinds=["http_500", "http_529"])
        return [(f.kind if (f := s.pick(n)) else None) for n in range(1, 41)]

    assert faults(7) == faults(7) != faults(8)
    assert 4 <= sum(k is not None for k in faults(7)) <= 20


def test_an_unknown_fault_is_refused():
    with pytest.raises(ValueError, match="no such fault"):
        FaultSchedule(kinds=["gremlins"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="no such fault"):
        fault("gremlins")  # type: ignore[arg-type]


def test_the_openai_dialect_faults_too():
    import openai

    with ScriptedOpenAIServer([fault("http_503"), reply("fine")]) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content == "fine" and server.requests[1].usage["completion_tokens"] > 0


def test_a_held_whole_answer_waits_for_its_event():
    """``hold=`` keeps a whole (JSON) answer as it keeps a streamed one: a kill test relies on it."""
    import threading
    import time

    hold = threading.Event()
    with ScriptedServer([reply("late", hold=hold)]) as server:
        threading.Timer(0.3, hold.set).start()
        started = time.monotonic()
        assert ask(server.url, 1) == ["late"]
    assert time.monotonic() - started >= 0.28


def test_a_client_killed_in_the_middle_of_its_request_is_not_a_request():
    """A sweep SIGKILLed while it sends leaves requests cut short: they are not recorded (nor routed, nor
    reported as unexpected), as a real server would drop them."""
    import socket
    import time

    with ScriptedServer({"a prompt": [reply("never asked")]}) as server:
        with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1]))) as s:
            s.sendall(b'POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"model": ')
        time.sleep(0.2)
        assert server.requests == [] and server.unexpected == []
        server.take_remaining()

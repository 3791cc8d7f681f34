"""One agent, many runs: sync and async, each async run in an event loop of its own, one after another.

Written once and run against every HTTP provider, each against its real scripted server, with retries on:
a client bound to an earlier (closed) event loop would lose an answer and send the request again, which a
real API bills twice.
"""

import asyncio
import json

import pytest

from drivetrain import Agent
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.models.openai import OpenAIModel
from drivetrain.testing import ScriptedOpenAIServer, ScriptedServer, reply


def anthropic_agent(server):
    env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}
    return Agent(model=AnthropicModel.from_env("claude-sonnet-4-6", env, max_retries=4, backoff=0.01), strict=True)


def openai_agent(server):
    env = {"OPENAI_BASE_URL": server.url}
    return Agent(model=OpenAIModel.from_env("gpt-4o-mini", env, max_retries=4, backoff=0.01), strict=True)


PROVIDERS = {"anthropic": (ScriptedServer, anthropic_agent), "openai": (ScriptedOpenAIServer, openai_agent)}


def asked(prompt):
    """The step answers only the request that carries this prompt (a resent earlier request fails it)."""

    def check(body):
        assert prompt in json.dumps(body["messages"][-1]), body["messages"]

    return check


@pytest.mark.parametrize("provider", PROVIDERS)
def test_one_agent_serves_sync_runs_then_async_runs_in_new_loops(provider):
    server_class, make_agent = PROVIDERS[provider]
    prompts = ["one", "two", "three", "four", "five"]
    with server_class([reply(f"answer {p}", expect=asked(p)) for p in prompts]) as server:
        agent = make_agent(server)
        results = [agent.run_sync("one"), agent.run_sync("two")]
        results.append(asyncio.run(agent.run("three")))
        results.append(asyncio.run(agent.run("four")))
        results.append(agent.run_sync("five"))
    assert [(r.subtype, r.result) for r in results] == [("success", f"answer {p}") for p in prompts]
    assert len(server.requests) == len(prompts)  # each request exactly once: nothing was sent again

"""Compaction: past a share of the context window the history becomes the task, a summary and the last rounds.

Against the scripted server (real anthropic SDK over HTTP), which validates every request like the API.
"""

from drivetrain import Agent, Hooks, tool
from drivetrain.loop.compaction import SUMMARY_ASK, SUMMARY_HEAD, estimate_tokens
from drivetrain.loop.events import Compacted
from drivetrain.loop.state import Done
from drivetrain.messages import lint
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.testing import ScriptedServer, http_error, reply, respond, tool_call

TASK = "Read the three logs and tell me which one has the most errors.\nBe exact."


@tool
def dump(name: str) -> str:
    """Print a big log."""
    return f"{name}: " + ("error line\n" * 300)  # ~3.3 kB


def agent_for(server, **kw):
    m = AnthropicModel.from_env(
        "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, backoff=0.01
    )
    events = []
    kw.setdefault("tools", [dump])
    return Agent(model=m, strict=True, observers=[events.append], **kw), events


def is_summary_request(body):
    return SUMMARY_ASK in str(body["messages"][-1]["content"])


def summary_step(text="Dumped a and b: 300 errors each. Left: c.", window=None):
    def check(body):
        assert is_summary_request(body) and not body.get("tools")  # no tools at all
        if window is not None:
            assert len(str(body)) // 4 < window  # it fits, even when the history does not

    return reply(text, expect=check)


async def test_the_history_is_compacted_and_the_run_goes_on_with_the_task_verbatim():
    def after(body):
        first = body["messages"][0]["content"]
        assert first[0]["text"] == TASK and first[1]["text"].startswith(SUMMARY_HEAD)
        assert "300 errors each" in first[1]["text"]
        assert body["tools"]  # tools are back
        # the latest round is intact: dump(c) and its whole result
        assert body["messages"][1]["content"][0]["input"] == {"name": "c"}
        assert str(body["messages"][2]["content"][0]["content"]).count("error line") == 300

    steps = [respond([tool_call("dump", {"name": n})]) for n in "abc"]
    steps += [summary_step(), reply("c has the most", expect=after)]
    with ScriptedServer(steps) as server:
        agent, events = agent_for(server, context_window=3000, compact_at=0.8)
        result = await agent.run(TASK)
    assert result.subtype == "success" and result.result == "c has the most"
    done = [e for e in events if isinstance(e, Compacted)]
    assert len(done) == 1 and not done[0].failed and done[0].tokens_after < done[0].tokens_before
    assert not lint(result.history)
    assert result.history[0].content[0].text == TASK


async def test_the_summary_request_fits_even_when_the_history_does_not():
    @tool
    def huge() -> str:
        """A giant output."""
        return "x" * 60_000  # ~15k tokens, far over the window

    steps = [respond([tool_call("huge", {})]), summary_step(window=4000), reply("done")]
    with ScriptedServer(steps) as server:
        agent, events = agent_for(server, tools=[huge], context_window=4000)
        result = await agent.run(TASK)
    assert result.subtype == "success"
    assert [e.failed for e in events if isinstance(e, Compacted)] == [""]


async def test_a_compaction_that_fails_twice_is_not_tried_again():
    bad = http_error(400, "invalid_request_error", "prompt is too long")
    steps = [
        respond([tool_call("dump", {"name": "a"})]),
        respond([tool_call("dump", {"name": "b"})]),
        bad,
        respond([tool_call("dump", {"name": "c"})]),
        bad,
        reply("answer anyway"),
    ]
    with ScriptedServer(steps) as server:
        agent, events = agent_for(server, context_window=2000)
        result = await agent.run(TASK)
    failed = [e.failed for e in events if isinstance(e, Compacted)]
    assert len(failed) == 2 and all(failed) and "will not be tried again" in failed[1]
    assert result.subtype == "success" and result.result == "answer anyway" and not lint(result.history)


async def test_the_precompact_hook_fires_and_can_block():
    seen = []

    def block(payload):
        seen.append(payload["trigger"])
        return {"decision": "block", "reason": "not now"}

    hooks = Hooks()
    hooks.add("PreCompact", block)
    steps = [
        respond([tool_call("dump", {"name": "a"})]),
        respond([tool_call("dump", {"name": "b"})]),
        respond([tool_call("dump", {"name": "c"})]),
        reply("fine"),
    ]
    with ScriptedServer(steps) as server:  # no summary request is ever made
        agent, events = agent_for(server, context_window=2000, hooks=hooks)
        result = await agent.run(TASK)
    assert seen == ["auto"] and result.subtype == "success"
    assert [e.failed for e in events if isinstance(e, Compacted)] == ["not now"]


async def test_compact_by_hand_keeps_a_finished_run_finished_and_it_can_go_on():
    steps = [respond([tool_call("dump", {"name": n})]) for n in "abc"]
    steps += [
        reply("a dumped"),
        summary_step("Dumped a."),
        reply("still here", expect=lambda b: b["messages"][0]["content"][0]["text"] == TASK),
    ]
    with ScriptedServer(steps) as server:
        agent, _ = agent_for(server)  # no window known: never automatic
        run = agent.start(TASK)
        await run.finish()
        before = estimate_tokens(run.history)
        await run.compact()
        assert isinstance(run.state, Done) and run.result.result == "a dumped"
        assert estimate_tokens(run.history) < before and run.history[0].content[1].text.endswith("Dumped a.")
        run.submit("are you there?")
        result = await run.finish()
    assert result.result == "still here" and not lint(result.history)

"""The loop, driven against the scripted server through the real Anthropic provider."""

import asyncio

import pytest

from drivetrain import (
    Agent,
    CallModel,
    Done,
    Finished,
    HarnessError,
    ModelResponded,
    PermissionDecided,
    ResultsSent,
    RunTools,
    SubmitPrompt,
    ToolCalled,
    ToolFinished,
    ToolResultBlock,
    ToolStarted,
    lint,
    tool,
)
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.testing import ScriptedServer, http_error, reply, respond, server_tool_use, text, thinking, tool_call

calls: list[str] = []
order: list[str] = []  # "start x" / "end x" for each slow call, in the order they happened


@tool
async def slow(label: str, seconds: float = 0.3) -> str:
    """Sleep, then echo the label."""
    calls.append(label)
    order.append(f"start {label}")
    await asyncio.sleep(seconds)
    order.append(f"end {label}")
    return f"slept {label}"


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"boom: {reason}")


@tool
def fatal() -> str:
    """A harness failure, not a tool failure."""
    raise HarnessError("disk on fire")


@pytest.fixture(autouse=True)
def _reset():
    calls.clear()
    order.clear()


def agent_for(server, **kw):
    model = AnthropicModel.from_env(
        "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, backoff=0.01
    )
    kw.setdefault("tools", [slow, explode, fatal])
    return Agent(model=model, strict=True, **kw)


def last_message(body):
    return body["messages"][-1]


async def test_end_turn_returns_the_answer():
    with ScriptedServer([reply("42")]) as server:
        result = await agent_for(server).run("what is 6*7?")
    assert (result.subtype, result.result, result.stop_reason, result.num_turns) == ("success", "42", "end_turn", 1)
    assert not result.is_error and result.usage.output_tokens > 0


async def test_parallel_tool_calls_run_concurrently_and_return_in_one_message_in_order():
    def check(body):
        msg = last_message(body)
        assert msg["role"] == "user"
        assert [b["tool_use_id"] for b in msg["content"]] == ["toolu_a", "toolu_b", "toolu_c"]
        assert [b["content"] for b in msg["content"]] == ["slept a", "slept b", "slept c"]

    steps = [
        respond(
            [
                text("three at once"),
                tool_call("slow", {"label": "a", "seconds": 0.4}, id="toolu_a"),
                tool_call("slow", {"label": "b", "seconds": 0.2}, id="toolu_b"),
                tool_call("slow", {"label": "c", "seconds": 0.3}, id="toolu_c"),
            ]
        ),
        reply("done", expect=check),
    ]
    with ScriptedServer(steps) as server:
        result = await agent_for(server).run("go")
    assert result.result == "done" and result.trajectory == ["tool_use", "end_turn"]
    assert order[:3] == ["start a", "start b", "start c"], order  # all started before any ended: concurrent
    assert sorted(calls) == ["a", "b", "c"]


async def test_tool_exception_is_fed_back_with_the_real_message():
    def check(body):
        block = last_message(body)["content"][0]
        assert block["is_error"] is True and block["content"] == "ValueError: boom: because"

    steps = [respond([tool_call("explode", {"reason": "because"})]), reply("recovered", expect=check)]
    with ScriptedServer(steps) as server:
        result = await agent_for(server).run("go")
    assert result.result == "recovered"


async def test_unknown_tool_and_invalid_input_become_error_results():
    def check(body):
        unknown, invalid = last_message(body)["content"]
        assert unknown["is_error"] and "No tool named 'Nope'" in unknown["content"] and "slow" in unknown["content"]
        assert invalid["is_error"] and "label" in invalid["content"] and "Expected schema" in invalid["content"]

    steps = [respond([tool_call("Nope", {}), tool_call("slow", {"seconds": "soon"})]), reply("ok", expect=check)]
    with ScriptedServer(steps) as server:
        # "Nope" is offered to the model (the server checks that) but the harness has lost it
        agent = agent_for(server, tools=[slow, tool(lambda: "x", name="Nope")])
        run = agent.start("go")
        del run.deps.tools["Nope"]
        async for _ in run:
            pass
    assert calls == [] and run.result.result == "ok"


async def test_pause_turn_resends_the_paused_content_and_never_runs_server_tools():
    paused = [text("searching"), server_tool_use("web_search", {"query": "drivetrain"}, id="srvtoolu_1")]

    def check(body):
        assert last_message(body)["role"] == "assistant"
        assert last_message(body)["content"] == paused

    steps = [respond(paused, stop_reason="pause_turn"), reply("found it", expect=check)]
    with ScriptedServer(steps) as server:
        result = await agent_for(server).run("search")
    assert result.result == "found it" and result.num_turns == 2
    assert result.trajectory == ["pause_turn", "end_turn"]
    assert not any(isinstance(b, ToolResultBlock) for m in result.history for b in m.content)


async def test_pause_turn_continuations_are_capped():
    steps = [respond([text(f"part {i}")], stop_reason="pause_turn") for i in range(3)]
    with ScriptedServer(steps) as server:
        result = await agent_for(server, max_continuations=2).run("go")
    assert result.subtype == "error_max_continuations" and result.is_error and result.num_turns == 3


async def test_truncated_tool_use_is_retried_with_more_tokens_and_never_run():
    steps = [
        respond(
            [text("writing"), tool_call("slow", {"label": "cut"})],
            stop_reason="max_tokens",
            expect=lambda b: b["max_tokens"] == 1000,
        ),
        respond([tool_call("slow", {"label": "whole", "seconds": 0.01})], expect=lambda b: b["max_tokens"] == 2000),
        reply("done"),
    ]
    with ScriptedServer(steps) as server:
        result = await agent_for(server, max_tokens=1000).run("go")
    assert calls == ["whole"] and result.result == "done"
    assert result.trajectory == ["max_tokens", "tool_use", "end_turn"] and result.num_turns == 3


async def test_truncated_tool_use_at_the_ceiling_gets_an_error_result():
    def check(body):
        block = last_message(body)["content"][0]
        assert block["is_error"] and "cut off at max_tokens (1000)" in block["content"]

    steps = [respond([tool_call("slow", {"label": "cut"})], stop_reason="max_tokens"), reply("ok", expect=check)]
    with ScriptedServer(steps) as server:
        result = await agent_for(server, max_tokens=1000, max_tokens_ceiling=1000).run("go")
    assert calls == [] and result.subtype == "success"


async def test_max_tokens_in_text_finishes_with_the_partial_answer():
    with ScriptedServer([reply("The answer is", stop_reason="max_tokens")]) as server:
        result = await agent_for(server).run("go")
    assert result.subtype == "success" and result.stop_reason == "max_tokens"
    assert result.result == "The answer is" and "cut off at max_tokens" in result.note


@pytest.mark.parametrize("reason", ["stop_sequence", "refusal"])
async def test_other_stop_reasons_finish_and_are_reported(reason):
    with ScriptedServer([reply("stopped", stop_reason=reason)]) as server:
        result = await agent_for(server).run("go")
    assert result.stop_reason == reason and result.result == "stopped"


async def test_max_turns_stops_with_a_valid_history():
    steps = [respond([tool_call("slow", {"label": str(i), "seconds": 0})]) for i in range(2)]
    with ScriptedServer(steps) as server:
        result = await agent_for(server, max_turns=2).run("loop forever")
    assert result.subtype == "error_max_turns" and result.is_error and result.num_turns == 2
    assert not lint(result.history) and result.history[-1].role == "user"


async def test_model_error_ends_the_run_with_a_message_and_a_valid_history():
    steps = [
        respond([tool_call("slow", {"label": "x", "seconds": 0})]),
        http_error(400, "invalid_request_error", "bad"),
    ]
    with ScriptedServer(steps) as server:
        result = await agent_for(server).run("go")
    assert result.subtype == "error_during_execution" and "400" in result.result and "bad" in result.result
    assert not lint(result.history)


async def test_harness_error_in_a_tool_ends_the_run_but_answers_every_call():
    steps = [respond([tool_call("fatal", {}), tool_call("slow", {"label": "ok", "seconds": 0})])]
    with ScriptedServer(steps) as server:
        result = await agent_for(server).run("go")
    assert result.subtype == "error_during_execution" and "disk on fire" in result.result
    assert not lint(result.history)
    assert [b.is_error for b in result.history[-1].content] == [True, False]


async def test_manual_loop_exposes_each_event_and_the_next_state():
    steps = [respond([tool_call("slow", {"label": "m", "seconds": 0})]), reply("fin")]
    with ScriptedServer(steps) as server:
        run = agent_for(server).start("step by step")
        assert isinstance(run.state, SubmitPrompt) and run.history == []
        assert await run.step() == [] and isinstance(run.state, CallModel) and run.history[0].text == "step by step"
        events = await run.step()
        assert [type(e) for e in events] == [ModelResponded, ToolCalled] and isinstance(run.state, RunTools)
        assert run.history[-1].tool_uses[0].input == {"label": "m", "seconds": 0}
        events = await run.step()
        assert [type(e) for e in events] == [PermissionDecided, ToolStarted, ToolFinished, ResultsSent]
        assert isinstance(run.state, CallModel) and run.history[-1].role == "user"
        rest = [e async for e in run]
        assert [type(e) for e in rest] == [ModelResponded, Finished] and isinstance(run.state, Done)
    assert run.result.result == "fin"


def test_sync_wrapper():
    with ScriptedServer([reply("sync ok")]) as server:
        assert agent_for(server).run_sync("hi").result == "sync ok"


async def test_a_history_rewritten_between_steps_is_linted_again():
    from drivetrain.messages import HistoryError, Message

    steps = [respond([tool_call("slow", {"label": "m", "seconds": 0}, id="toolu_m")]), reply("never sent")]
    with pytest.raises(AssertionError, match="never requested"):  # the second step is never reached
        with ScriptedServer(steps) as server:
            run = agent_for(server).start("go")
            await run.step()
            await run.step()
            await run.step()
            # a hook-like rewrite of an older message that breaks the pairing
            history = run.history
            history[2] = Message("user", (ToolResultBlock("toolu_other", "rewritten"),))
            run.value = run.value.evolve(history=tuple(history))
            with pytest.raises(HistoryError, match="stray tool_result toolu_other"):
                await run.step()


def test_lint_from_a_start_index_still_sees_earlier_ids():
    from drivetrain.messages import Message, ToolUseBlock

    use = ToolUseBlock("toolu_1", "slow", {})
    history = [
        Message.user("x"),
        Message.assistant(use),
        Message("user", (ToolResultBlock("toolu_1", "ok"),)),
        Message.assistant(use),
        Message("user", (ToolResultBlock("toolu_1", "ok"),)),
    ]
    assert any("duplicate" in p for p in lint(history, start=3).problems)


async def test_a_tool_use_id_used_many_turns_earlier_is_still_caught():
    """Each request checks only the new part of the history; the ids of the part checked before are carried from
    step to step, and must hold every earlier id."""
    from drivetrain.messages import HistoryError

    steps = [respond([tool_call("slow", {"label": str(i), "seconds": 0}, id=f"toolu_{i}")]) for i in range(5)]
    steps.append(respond([tool_call("slow", {"label": "again", "seconds": 0}, id="toolu_1")]))
    with ScriptedServer(steps) as server:
        with pytest.raises(HistoryError, match="duplicate tool_use id toolu_1"):
            await agent_for(server).run("go")
    assert calls == ["0", "1", "2", "3", "4", "again"]  # caught before the next request, not at it


async def test_ids_carried_from_a_history_that_was_replaced_are_not_used():
    """A history replaced between steps (compaction, a caller's rewrite) is checked with its own ids: one it no
    longer holds may come again."""
    steps = [respond([tool_call("slow", {"label": str(i), "seconds": 0}, id=f"toolu_{i}")]) for i in range(3)]
    steps += [respond([tool_call("slow", {"label": "again", "seconds": 0}, id="toolu_0")]), reply("done")]
    with ScriptedServer(steps) as server:
        run = agent_for(server).start("go")
        while len(run.history) < 7:  # three rounds
            await run.step()
        run.value = run.value.evolve(history=(run.value.history[0], *run.value.history[3:]))  # round 0 dropped
        result = await run.finish()
    assert result.subtype == "success" and calls == ["0", "1", "2", "again"]


async def test_thinking_and_server_blocks_go_back_verbatim_with_signatures():
    first = [
        thinking("let me think", "sig-ABC=="),
        text("looking"),
        server_tool_use("web_search", {"query": "q"}, id="srvtoolu_9"),
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_9",
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://e.com",
                    "title": "E",
                    "encrypted_content": "xyz",
                    "page_age": None,
                }
            ],
        },
        tool_call("slow", {"label": "t", "seconds": 0}, id="toolu_t"),
    ]

    def check(body):
        assert body["messages"][1] == {"role": "assistant", "content": first}

    with ScriptedServer([respond(first), reply("ok", expect=check)]) as server:
        result = await agent_for(server).run("go")
    assert result.result == "ok" and calls == ["t"]


async def test_cancelling_a_run_during_tools_leaves_a_valid_history():
    steps = [respond([tool_call("slow", {"label": "long", "seconds": 30})])]
    with ScriptedServer(steps) as server:
        run = agent_for(server).start("go")
        task = asyncio.ensure_future(run.finish())
        while not calls:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert not lint(run.history) and "Interrupted" in run.history[-1].content[0].text
    assert isinstance(run.state, CallModel)  # the conversation can go on


async def test_a_repeated_call_with_the_same_result_is_pointed_out():
    def first(body):
        assert "same slow call" not in body["messages"][-1]["content"][0]["content"]
        return True

    def second(body):
        text = body["messages"][-1]["content"][0]["content"]
        assert text.startswith("slept r") and "same slow call you made in turn 1" in text
        return True

    call = {"label": "r", "seconds": 0}
    steps = [
        respond([tool_call("slow", call)]),
        respond([tool_call("slow", call)], expect=first),
        respond([tool_call("slow", {"label": "other", "seconds": 0})], expect=second),
        reply("ok", expect=lambda b: "same" not in b["messages"][-1]["content"][0]["content"]),
    ]
    with ScriptedServer(steps) as server:
        result = await agent_for(server).run("go")
    assert result.result == "ok"


async def test_a_call_repeated_with_the_same_result_three_times_is_not_run_a_fourth_time():
    call = {"label": "again", "seconds": 0}

    def refused(body):
        res = body["messages"][-1]["content"][0]
        assert res["is_error"] and res["content"].startswith("Not run: you have made this exact slow call 3 times")
        return True

    steps = [respond([tool_call("slow", call)]) for _ in range(4)]
    steps += [respond([tool_call("slow", {"label": "new", "seconds": 0})], expect=refused), reply("ok")]
    with ScriptedServer(steps) as server:
        await agent_for(server).run("go")
    assert calls == ["again"] * 3 + ["new"]

"""Stop conditions, budgets and loop detection: each ends with its own subtype and a history the API accepts.

Driven through the real Anthropic provider against the scripted server, which validates every request.
"""

import asyncio

import pytest

from drivetrain import Agent, tool
from drivetrain.loop.budget import Budget
from drivetrain.loop.events import LimitApproaching, LimitReached, LoopDetected
from drivetrain.messages import lint
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.sessions.file import FileStore
from drivetrain.testing import ScriptedServer, reply, respond, tool_call

ran: list[str] = []


@tool
def look(what: str) -> str:
    """Look at something."""
    ran.append(what)
    return f"saw {what}"


@tool
def fail(what: str) -> str:
    """Always fails the same way."""
    ran.append(what)
    raise ValueError("the disk is read-only")


@tool
async def nap(seconds: float) -> str:
    """Sleep."""
    await asyncio.sleep(seconds)
    return "rested"


@pytest.fixture(autouse=True)
def _reset():
    ran.clear()


def agent_for(server, model="claude-sonnet-4-6", **kw):
    m = AnthropicModel.from_env(model, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, backoff=0.01)
    kw.setdefault("tools", [look, fail, nap])
    events = []
    agent = Agent(model=m, strict=True, observers=[events.append], **kw)
    return agent, events


def usage(n_in, n_out=10):
    return {"input_tokens": n_in, "output_tokens": n_out}


def looks(n, prefix="x"):
    return [respond([tool_call("look", {"what": f"{prefix}{i}"})], usage=usage(1000)) for i in range(n)]


def assert_valid(result):
    assert not lint(result.history), lint(result.history).problems
    assert result.history[-1].role in ("user", "assistant")


@pytest.mark.parametrize(
    "limit,kw,subtype",
    [
        ("tokens", {"tokens": 2000}, "error_max_tokens_total"),  # 1,010 tokens a turn
        ("usd", {"usd": 0.006}, "error_max_budget_usd"),  # sonnet: $0.00315 a turn
        ("tool_calls", {"tool_calls": 2}, "error_max_tool_calls"),
    ],
)
async def test_each_limit_ends_the_run_with_its_subtype_before_the_next_request(limit, kw, subtype):
    with ScriptedServer(looks(2)) as server:  # a third request would find no step: the server fails the test
        agent, events = agent_for(server, budget=Budget(**kw))
        result = await agent.run("look around")
    assert result.subtype == subtype and result.is_error and result.num_turns == 2 and ran == ["x0", "x1"]
    assert limit in result.note or "limit" in result.note
    assert [e.limit for e in events if isinstance(e, LimitReached)] == [limit]
    assert_valid(result)


async def test_wall_time_limit():
    with ScriptedServer([respond([tool_call("nap", {"seconds": 2})])]) as server:
        agent, _ = agent_for(server, budget=Budget(wall_time_s=1.5))
        result = await agent.run("rest")
    assert result.subtype == "error_max_wall_time" and result.num_turns == 1
    assert_valid(result)


async def test_soft_threshold_warns_once_and_an_observer_may_raise_the_limit():
    with ScriptedServer(looks(6) + [reply("done")]) as server:
        agent, events = agent_for(server, budget=Budget(tool_calls=5))

        def raise_it(e):
            if isinstance(e, LimitApproaching):
                agent.budget.tool_calls = 10

        agent.observers.append(raise_it)
        result = await agent.run("look around")
    warned = [(e.limit, e.used, e.maximum) for e in events if isinstance(e, LimitApproaching)]
    assert warned == [("tool_calls", 4, 5)]  # at 80%, once; raised to 10, whose 80% is never reached
    assert result.subtype == "success" and len(ran) == 6


async def test_wrap_up_asks_once_without_tools_and_keeps_the_limit_subtype():
    def no_tools(body):
        assert (
            body.get("tool_choice") == {"type": "none"} or "tools" not in body or body["tool_choice"]["type"] == "none"
        )
        assert "limit" in body["messages"][-1]["content"][-1]["text"]

    with ScriptedServer(looks(2) + [reply("Looked at x0 and x1; x2 is left.", expect=no_tools)]) as server:
        agent, _ = agent_for(server, budget=Budget(tool_calls=2, wrap_up=True))
        result = await agent.run("look around")
    assert result.subtype == "error_max_tool_calls" and result.result.startswith("Looked at")
    assert_valid(result)


async def test_a_refused_repeat_that_persists_ends_the_run_as_a_loop():
    same = {"what": "same"}
    steps = [respond([tool_call("look", same)]) for _ in range(5)]
    with ScriptedServer(steps) as server:
        agent, events = agent_for(server)
        result = await agent.run("look")
    assert result.subtype == "error_loop_detected" and ran == ["same"] * 3
    assert [(e.pattern, e.action) for e in events if isinstance(e, LoopDetected)] == [
        ("repeat", "refused"),
        ("repeat", "refused"),
        ("repeat", "ended"),
    ]
    assert_valid(result)


async def test_a_polling_tool_on_the_exempt_list_may_repeat():
    same = {"what": "status"}
    with ScriptedServer([respond([tool_call("look", same)]) for _ in range(6)] + [reply("ready")]) as server:
        agent, _ = agent_for(server, repeat_exempt=("look",))
        result = await agent.run("poll")
    assert result.subtype == "success" and ran == ["status"] * 6


async def test_an_a_b_a_b_cycle_is_refused_on_its_next_turn():
    a, b = {"what": "a"}, {"what": "b"}

    def refused(body):
        res = body["messages"][-1]["content"][0]
        assert res["is_error"] and "cycle" in res["content"]

    steps = [respond([tool_call("look", x)]) for x in (a, b, a, b)]
    steps += [respond([tool_call("look", a)]), respond([tool_call("look", {"what": "c"})], expect=refused), reply("ok")]
    with ScriptedServer(steps) as server:
        agent, events = agent_for(server)
        result = await agent.run("look")
    assert result.subtype == "success" and ran == ["a", "b", "a", "b", "c"]
    assert [(e.pattern, e.action) for e in events if isinstance(e, LoopDetected)] == [
        ("cycle", "noted"),
        ("cycle", "refused"),
    ]


async def test_the_same_error_again_and_again_is_noted_then_ends_the_run():
    def noted(body):
        assert "the same error as your last 2 calls" in body["messages"][-1]["content"][0]["content"]

    steps = [respond([tool_call("fail", {"what": f"w{i}"})]) for i in range(5)]
    steps[3] = respond([tool_call("fail", {"what": "w3"})], expect=noted)
    with ScriptedServer(steps) as server:
        agent, events = agent_for(server)
        result = await agent.run("write")
    assert result.subtype == "error_loop_detected" and len(ran) == 5
    assert [(e.pattern, e.action) for e in events if isinstance(e, LoopDetected)] == [
        ("same_error", "noted"),
        ("same_error", "ended"),
    ]
    assert_valid(result)


async def test_interventions_and_limits_are_records_in_the_session_log(tmp_path):
    store = FileStore(tmp_path / "home")
    same = {"what": "same"}
    with ScriptedServer([respond([tool_call("look", same)]) for _ in range(5)]) as server:
        agent, _ = agent_for(server, store=store, budget=Budget(tool_calls=5))
        result = await agent.run("look")
    kinds = [r["kind"] for r in store.read(result.session_id)]
    assert kinds.count("loop_detected") == 3 and kinds.count("limit_approaching") == 1
    assert store.info(result.session_id).status == "error_loop_detected"


async def test_the_limits_count_from_the_prompt_that_starts_the_invocation(tmp_path):
    """``Agent.resume`` with a prompt, and ``Run.submit``: each gets its turns and tokens whole, as Claude Code
    counts ``--max-turns`` per invocation, not over the session."""
    store = FileStore(tmp_path)
    with ScriptedServer(looks(2) + looks(2, "y") + looks(2, "z")) as server:
        agent, _ = agent_for(server, max_turns=2, budget=Budget(tokens=2500), store=store)
        first = await agent.run("look around")
        assert (first.subtype, first.num_turns) == ("error_max_turns", 2)
        run = agent.resume(first.session_id, "look again")
        second = await run.finish()
        assert (second.subtype, second.num_turns) == ("error_max_turns", 4)  # two more requests were sent
        run.submit("and once more")
        third = await run.finish()
        assert (third.subtype, third.num_turns) == ("error_max_turns", 6)
        server.assert_complete()
    assert ran == ["x0", "x1", "y0", "y1", "z0", "z1"]
    assert_valid(third)


@pytest.mark.parametrize(
    ("call", "said", "late"),
    [
        # A local run's `vi docs/usage.md` waited out the Bash default timeout (120 s) under a 60 s budget: the run
        # took 137 s. Bash now kills its command at the deadline.
        (tool_call("Bash", {"command": "sleep 30; echo late"}), "wall-time budget ran out", "late"),
        # An MCP server's call or a subagent does not read the deadline: it is cancelled a moment after it.
        (tool_call("nap", {"seconds": 30}), "wall-time budget (1.5 s) ran out", "rested"),
    ],
    ids=["bash", "any-tool"],
)
async def test_a_call_ends_with_the_runs_wall_budget_not_its_own_timeout(tmp_path, call, said, late):
    from drivetrain.tools import builtin_tools

    bash = [t for t in builtin_tools() if t.name == "Bash"]
    with ScriptedServer([respond([call])]) as server:
        agent, _ = agent_for(server, tools=[*bash, nap], budget=Budget(wall_time_s=1.5), cwd=tmp_path)
        started = asyncio.get_running_loop().time()
        result = await agent.run("wait")
        took = asyncio.get_running_loop().time() - started
    assert result.subtype == "error_max_wall_time" and took < 10, (result.subtype, took)
    [answer] = [b for m in result.history for b in m.content if getattr(b, "type", "") == "tool_result"]
    assert answer.is_error and said in answer.text and late not in answer.text, answer.text
    assert_valid(result)

"""What nests under what: a subagent's run under its Task call, a plan's steps under the plan and each step's run
under its step, and a run paused for approval as two invocations of one session."""

from __future__ import annotations

from dataclasses import dataclass, replace

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from drivetrain import Agent, Allow, Defer, tool
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.plans.plan import Plan, step_agent
from drivetrain.plans.scheduler import apply_plan
from drivetrain.subagents.definitions import GENERAL_PURPOSE
from drivetrain.subagents.task import TaskTool
from drivetrain.telemetry.run import Telemetry
from drivetrain.testing import ScriptedServer, http_error, reply, respond, tool_call

from test_compaction import TASK, agent_for, summary_step  # isort: skip

MODEL = "claude-sonnet-4-6"


@tool
def note(text: str) -> str:
    """Write a note down."""
    return f"noted {text}"


def traced() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def model_for(server: ScriptedServer) -> AnthropicModel:
    return AnthropicModel.from_env(MODEL, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"})


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan | None:
    return next((s for s in spans if span.parent and s.context.span_id == span.parent.span_id), None)


def chain(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    """The span's name and its ancestors', innermost first."""
    names = []
    at: ReadableSpan | None = span
    while at is not None:
        names.append(at.name)
        at = parent_of(at, spans)
    return names


async def test_a_subagents_run_nests_under_the_task_call_that_started_it(tmp_path):
    provider, exporter = traced()
    task = {"description": "a part", "prompt": "count the a's", "subagent_type": "general-purpose"}
    steps = [respond([tool_call("Task", task, id="toolu_t")]), reply("three"), reply("the child said three")]
    with ScriptedServer(steps) as server:
        agent = Agent(model=model_for(server), tools=[note], cwd=tmp_path, telemetry=Telemetry(provider))
        agent.tools.append(TaskTool(agent, {"general-purpose": GENERAL_PURPOSE}))
        result = await agent.run("count")
    assert result.result == "the child said three"
    spans = list(exporter.get_finished_spans())
    runs = [s for s in spans if s.name == "invoke_agent drivetrain"]
    child = next(s for s in runs if s.attributes["gen_ai.conversation.id"].endswith("task-toolu_t"))
    assert chain(child, spans) == ["invoke_agent drivetrain", "execute_tool Task", "invoke_agent drivetrain"]
    child_chat = next(s for s in spans if s.name.startswith("chat") and parent_of(s, spans) is child)
    assert child_chat.attributes["gen_ai.usage.output_tokens"] >= 0


async def test_a_plans_steps_nest_under_the_plan_and_their_runs_under_each_step(tmp_path):
    provider, exporter = traced()
    plan = Plan.from_json(
        {
            "task": "two notes",
            "steps": [
                {"id": "a", "goal": "note a", "tools": ["note"]},
                {"id": "b", "goal": "note b", "tools": ["note"], "depends_on": ["a"]},
            ],
        }
    )
    servers = {
        "a": ScriptedServer([respond([tool_call("note", {"text": "a"})]), reply("a noted")]),
        "b": ScriptedServer([reply("b noted")]),
    }
    with servers["a"], servers["b"]:

        def make_agent(step):
            base = Agent(model=model_for(servers[step.id]), tools=[note], cwd=tmp_path, telemetry=Telemetry(provider))
            return step_agent(base, step)

        result = await apply_plan(plan, make_agent, state_path=tmp_path / "state.json", tracer_provider=provider)
    assert result.subtype == "success"
    spans = list(exporter.get_finished_spans())
    [top] = [s for s in spans if s.name == "plan"]
    assert top.parent is None and top.attributes["drivetrain.plan.subtype"] == "success"
    for step in ("a", "b"):
        [s] = [x for x in spans if x.name == f"plan_step {step}"]
        assert parent_of(s, spans) is top and s.attributes["drivetrain.plan.step.outcome"] == "done"
        [run] = [x for x in spans if x.name.startswith("invoke_agent") and parent_of(x, spans) is s]
        assert run.attributes["session.id"] == s.attributes["session.id"]
    tool_span = next(s for s in spans if s.name == "execute_tool note")
    assert chain(tool_span, spans) == ["execute_tool note", "invoke_agent drivetrain", "plan_step a", "plan"]


async def test_a_run_paused_for_approval_is_two_invocations_of_one_session(tmp_path):
    provider, exporter = traced()
    steps = [respond([tool_call("note", {"text": "x"}, id="toolu_n")]), reply("noted it")]
    with ScriptedServer(steps) as server:
        agent = Agent(
            model=model_for(server),
            tools=[note],
            cwd=tmp_path,
            policy=AskEverything(),
            approver=lambda call: Defer(),
            telemetry=Telemetry(provider),
        )
        run = agent.start("note x")
        await run.finish()
        assert run.paused
        first = [s.name for s in exporter.get_finished_spans()]
        run.resume({"toolu_n": Allow(by="person")})
        result = await run.finish()
    assert result.result == "noted it"
    assert first == ["chat claude-sonnet-4-6", "invoke_agent drivetrain"]  # the pause ended the first invocation
    spans = list(exporter.get_finished_spans())
    runs = [s for s in spans if s.name == "invoke_agent drivetrain"]
    assert [r.attributes["drivetrain.run.ending"] for r in runs] == ["paused", "finished"]
    assert len({r.attributes["session.id"] for r in runs}) == 1
    [call] = [s for s in spans if s.name == "execute_tool note"]
    assert parent_of(call, spans) is runs[1]
    assert call.attributes["drivetrain.permission.decision"] == "allow"


@dataclass
class Decision:
    behavior: str
    reason: str = ""
    source: str = "rule:ask"


class AskEverything:
    def decide(self, tool_name, tool_input, ctx):
        return Decision("ask", "every call is asked about")


async def test_attempts_of_one_task_are_sibling_runs_marked_by_their_attributes(tmp_path):
    """The hook the small profile's attempts use: one agent copy per attempt, each with its ``drivetrain.attempt``,
    under a parent span of the caller's, which marks the chosen one."""
    provider, exporter = traced()
    tracer = provider.get_tracer("attempts")
    with ScriptedServer([reply("first try"), reply("second try")]) as server:
        base = Agent(model=model_for(server), tools=[note], cwd=tmp_path)
        with tracer.start_as_current_span("attempts") as parent:
            results = []
            for i in (1, 2):
                attempt = replace(base, telemetry=Telemetry(provider, attributes={"drivetrain.attempt": i}))
                results.append(await attempt.run("do it"))
            parent.set_attribute("drivetrain.attempt.chosen", 2)
    spans = list(exporter.get_finished_spans())
    runs = [s for s in spans if s.name == "invoke_agent drivetrain"]
    [top] = [s for s in spans if s.name == "attempts"]
    assert [r.attributes["drivetrain.attempt"] for r in runs] == [1, 2]
    assert all(parent_of(r, spans) is top for r in runs) and top.attributes["drivetrain.attempt.chosen"] == 2
    assert [r.result for r in results] == ["first try", "second try"]


def test_the_small_profiles_attempts_are_sibling_runs_under_one_span_that_names_the_chosen(tmp_path):
    import asyncio

    from drivetrain.small.attempts import TEMPERATURES, Attempts, Sampled

    provider, exporter = traced()
    ws = tmp_path / "ws"
    ws.mkdir()
    steps = {str(TEMPERATURES[0]): [reply("7")], str(TEMPERATURES[1]): [reply("8")], str(TEMPERATURES[2]): [reply("8")]}
    with ScriptedServer(steps, route=lambda body: str(body.get("temperature"))) as server:
        model = model_for(server)

        def make(spec):
            return Agent(model=Sampled(model, spec.seed, spec.temperature), cwd=spec.cwd, telemetry=Telemetry(provider))

        main = Agent(model=model, cwd=ws, telemetry=Telemetry(provider)).start("how much?")
        attempts = Attempts(main, "how much?", make, 3, seed=5, wall_s=None)

        async def go():
            return [e async for e in attempts]

        asyncio.run(go())
    spans = list(exporter.get_finished_spans())
    [top] = [s for s in spans if s.name == "attempts"]
    runs = [s for s in spans if s.name == "invoke_agent drivetrain"]
    assert sorted(r.attributes["drivetrain.attempt"] for r in runs) == [1, 2, 3]
    assert all(parent_of(r, spans) is top for r in runs)
    assert top.attributes["drivetrain.attempt.chosen"] == 2 and top.attributes["drivetrain.attempt.count"] == 3
    assert "2 of 3 agree" in top.attributes["drivetrain.attempt.reason"]


async def test_a_compaction_is_a_span_with_its_summary_request_under_it_and_a_failed_one_an_error():
    provider, exporter = traced()
    bad = http_error(400, "invalid_request_error", "prompt is too long")
    steps = [respond([tool_call("dump", {"name": n})]) for n in "ab"]
    steps += [bad, respond([tool_call("dump", {"name": "c"})]), summary_step(), reply("c has the most")]
    with ScriptedServer(steps) as server:
        agent, _ = agent_for(server, context_window=2000, telemetry=Telemetry(tracer_provider=provider))
        result = await agent.run(TASK)
    assert result.subtype == "success"
    spans = exporter.get_finished_spans()
    [run] = [s for s in spans if s.name.startswith("invoke_agent")]
    failed, done = sorted((s for s in spans if s.name == "compact"), key=lambda s: s.start_time or 0)
    assert failed.parent is not None and failed.parent.span_id == run.context.span_id
    assert failed.status.status_code.name == "ERROR" and failed.attributes["error.type"] == "compaction_failed"
    assert "prompt is too long" in (failed.status.description or "")
    attrs = done.attributes
    assert attrs["drivetrain.compaction.trigger"] == "auto" and done.status.status_code.name == "UNSET"
    assert attrs["drivetrain.compaction.tokens_after"] < attrs["drivetrain.compaction.tokens_before"]
    under = {c.name for c in spans if c.parent is not None and c.parent.span_id == done.context.span_id}
    assert under == {"chat claude-sonnet-4-6"}  # the summary request
    assert sum(s.name.startswith("chat") for s in spans) == 6

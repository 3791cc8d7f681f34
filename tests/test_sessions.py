"""Sessions that survive: every step saved, loaded back, repaired after a crash, resumed, forked, cancelled.

The model side is the scripted server, which validates every request like the real API: a resumed
session whose history the API would reject fails these tests.
"""

import asyncio
import json
from types import SimpleNamespace

import pytest

from drivetrain import Agent, tool
from drivetrain.loop.state import AwaitApproval, CallModel, Done, RunTools
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.sessions.file import FileStore
from drivetrain.sessions.log import load
from drivetrain.testing import ScriptedServer, reply, respond, tool_call

ran: list[str] = []


@tool
def note(text: str) -> str:
    """Write a note down."""
    ran.append(text)
    return f"noted {text}"


@tool
async def wait(seconds: float) -> str:
    """Wait."""
    await asyncio.sleep(seconds)
    return "waited"


class AskAlways:
    def decide(self, tool_name, tool_input, ctx):
        return SimpleNamespace(behavior="ask", reason="asks", source="test")


@pytest.fixture(autouse=True)
def _reset():
    ran.clear()


@pytest.fixture
def store(tmp_path):
    return FileStore(tmp_path / "home")


def agent_for(server, store, **kw):
    model = AnthropicModel.from_env(
        "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, backoff=0.01
    )
    kw.setdefault("tools", [note, wait])
    return Agent(model=model, strict=True, store=store, **kw)


def kinds(store, sid):
    return [r["kind"] for r in store.read(sid)]


def texts(body):
    return [
        b.get("text") for m in body["messages"] for b in m["content"] if isinstance(b, dict) and b.get("type") == "text"
    ]


async def test_every_step_is_saved_and_loads_back_equal(store):
    steps = [respond([tool_call("note", {"text": "a"})]), reply("done")]
    with ScriptedServer(steps) as server:
        run = agent_for(server, store).start("go")
        result = await run.finish()
    assert result.subtype == "success"
    loaded = load(store, run.session_id)
    assert loaded.repaired is None
    assert loaded.value.history == run.value.history
    assert loaded.value.state == run.value.state and loaded.value.num_turns == 2
    assert loaded.value.path == run.value.path and loaded.value.seen_calls == run.value.seen_calls
    k = kinds(store, run.session_id)
    assert k[0] == "session" and k.count("turn") == 2 and k.count("prompt") == 1 and k[-1] == "result"
    info = store.info(run.session_id)
    assert (info.num_turns, info.status, info.first_prompt) == (2, "success", "go")


async def test_resume_with_a_prompt_continues_the_same_history(store):
    def sees_both(body):
        assert texts(body)[0] == "first" and texts(body)[-1] == "second"
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]

    with ScriptedServer([reply("one"), reply("two", expect=sees_both)]) as server:
        agent = agent_for(server, store)
        first = await agent.run("first")
        sid = first.session_id
        result = await agent.resume(sid, "second").finish()
    assert (result.result, result.session_id, result.num_turns) == ("two", sid, 2)
    assert kinds(store, sid).count("prompt") == 2


async def test_fork_leaves_the_old_session_untouched(store):
    with ScriptedServer([reply("one"), reply("two")]) as server:
        agent = agent_for(server, store)
        sid = (await agent.run("first")).session_id
        before = store.read(sid)
        forked = agent.resume(sid, "second", fork=True)
        result = await forked.finish()
    assert result.session_id != sid and store.read(sid) == before
    info = store.info(result.session_id)
    assert info.parent_id == sid and info.status == "success"


async def test_a_finished_session_needs_a_prompt(store):
    with ScriptedServer([reply("one")]) as server:
        agent = agent_for(server, store)
        sid = (await agent.run("first")).session_id
        with pytest.raises(ValueError, match="has finished"):
            agent.resume(sid)


async def test_a_crash_before_the_answer_resends_the_same_request(store):
    """The log's last state is CallModel (the request was out, no answer saved): resuming makes it again."""
    with ScriptedServer([]) as server:
        run = agent_for(server, store).start("count")
        await run.step()  # SubmitPrompt -> CallModel, saved; the process dies in the model call
    sid = run.session_id

    def same_request(body):
        assert body["messages"] == [m.to_wire() for m in run.value.history]
        assert "continue" not in json.dumps(body).lower()

    with ScriptedServer([reply("answer", expect=same_request)]) as server:
        result = await agent_for(server, store).resume(sid).finish()
    assert result.result == "answer"


async def test_a_crash_during_tools_is_repaired_and_says_what_may_have_happened(store):
    """Killed while two calls ran, one had started (an intent record), one had not: each gets a result that says so."""
    calls = [tool_call("note", {"text": "a"}, id="toolu_a"), tool_call("note", {"text": "b"}, id="toolu_b")]
    with ScriptedServer([respond(calls)]) as server:
        run = agent_for(server, store).start("go")
        await run.step()
        await run.step()  # -> RunTools saved, no tool run yet
    assert isinstance(run.value.state, RunTools)
    sid = run.session_id
    store.append(
        sid,
        [
            {
                "kind": "intent",
                "call_id": "toolu_a",
                "tool": "note",
                "input": {"text": "a"},
                "decision": "allow",
                "decided_by": "rule",
                "reason": "",
            }
        ],
    )

    def check(body):
        results = {b["tool_use_id"]: b for b in body["messages"][-1]["content"]}
        assert results["toolu_a"]["is_error"] and "may have had side effects" in results["toolu_a"]["content"]
        assert results["toolu_b"]["is_error"] and "before this call started" in results["toolu_b"]["content"]

    with ScriptedServer([reply("ok", expect=check)]) as server:
        result = await agent_for(server, store).resume(sid).finish()
    assert result.subtype == "success" and ran == []  # nothing re-run on a guess
    repair = [r for r in store.read(sid) if r["kind"] == "repair"]
    assert len(repair) == 1 and [a["started"] for a in repair[0]["results_added"]] == [True, False]


@pytest.mark.filterwarnings("ignore:.*cut off mid-write")
async def test_a_torn_last_line_is_skipped_and_the_session_resumes(store):
    with ScriptedServer([reply("one")]) as server:
        sid = (await agent_for(server, store).run("first")).session_id
    with open(store.path(sid), "ab") as f:
        f.write(b'{"ts": "2026-11-30T00:00:00.000Z", "session_id": "' + sid.encode() + b'", "seq": 99, "kind": "hist')
    with pytest.warns(UserWarning):
        loaded = load(store, sid)
    assert isinstance(loaded.value.state, Done)
    with ScriptedServer([reply("two")]) as server:
        result = await agent_for(server, store).resume(sid, "again").finish()
    assert result.result == "two"


async def test_cancelling_during_tools_answers_every_call_and_saves(store):
    calls = [tool_call("wait", {"seconds": 30}, id="toolu_1"), tool_call("wait", {"seconds": 30}, id="toolu_2")]
    with ScriptedServer([respond(calls)]) as server:
        run = agent_for(server, store).start("go")
        task = asyncio.create_task(run.finish())
        while not isinstance(run.value.state, RunTools):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    loaded = load(store, run.session_id)
    assert loaded.repaired is None  # nothing to repair: the interrupted results were saved
    last = loaded.value.history[-1]
    assert [b.is_error for b in last.content] == [True, True] and "Interrupted" in last.content[0].content
    assert isinstance(loaded.value.state, CallModel)
    interrupted = [r for r in store.read(run.session_id) if r["kind"] == "interrupted"]
    assert interrupted and interrupted[0]["during"] == "RunTools"
    assert store.info(run.session_id).status == "interrupted"


async def test_a_pause_for_approval_survives_a_restart_and_a_new_prompt_answers_it(store):
    from drivetrain import Defer

    with ScriptedServer([respond([tool_call("note", {"text": "x"}, id="toolu_x")])]) as server:
        agent = agent_for(server, store, approver=lambda call: Defer(), policy=AskAlways())
        run = agent.start("go")
        result = await run.finish()
    assert result.subtype == "awaiting_approval"
    assert isinstance(load(store, run.session_id).value.state, AwaitApproval)

    def check(body):
        assert body["messages"][-1]["content"][0]["is_error"]
        assert texts(body)[-1] == "never mind"

    with ScriptedServer([reply("ok", expect=check)]) as server:
        result = await agent_for(server, store).resume(run.session_id, "never mind").finish()
    assert result.subtype == "success" and ran == []


async def test_checkpoints_before_each_prompt_let_rewind_undo_tool_changes(store, tmp_path):
    from drivetrain.sessions.rewind import Checkpoints

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("v1")

    @tool
    def put(text: str) -> str:
        """Overwrite a.txt (as a shell command would: not Write or Edit)."""
        (ws / "a.txt").write_text(text)
        return "ok"

    cp = Checkpoints(ws, tmp_path / "home")
    steps = [
        respond([tool_call("put", {"text": "v2"})]),
        reply("one"),
        respond([tool_call("put", {"text": "v3"})]),
        reply("two"),
    ]
    with ScriptedServer(steps) as server:
        run = agent_for(server, store, tools=[put], cwd=ws, checkpoints=cp).start("first")
        await run.finish()
        run.submit("second")
        await run.finish()
    marks = [(r["prompt"], r["ref"]) for r in store.read(run.session_id) if r["kind"] == "checkpoint"]
    assert marks == [(1, cp.ref(run.session_id, 1)), (2, cp.ref(run.session_id, 2))]
    cp.restore(run.session_id, 2)
    assert (ws / "a.txt").read_text() == "v2"
    cp.restore(run.session_id, 1)
    assert (ws / "a.txt").read_text() == "v1"


async def test_a_crash_during_a_pause_turn_continuation_resends_it(store):
    """The paused content is the last message and the state is CallModel: loading must resend, not end the run."""
    with ScriptedServer([respond([{"type": "text", "text": "Searching…"}], stop_reason="pause_turn")]) as server:
        run = agent_for(server, store).start("look it up")
        await run.step()
        await run.step()  # the paused response saved; the process dies during the continuation
    assert isinstance(run.value.state, CallModel) and run.value.history[-1].role == "assistant"

    def resent(body):
        assert (
            body["messages"][-1]["role"] == "assistant" and body["messages"][-1]["content"][0]["text"] == "Searching…"
        )

    with ScriptedServer([reply("Found it.", expect=resent)]) as server:
        result = await agent_for(server, store).resume(run.session_id).finish()
    assert result.subtype == "success" and result.result.endswith("Found it.")


async def test_state_records_hold_what_changed_so_the_log_grows_linearly(store):
    """Each step writes the run's changed fields and the new tails of the growing ones (path, trajectory, the
    repeat guard), not the whole value again; loading adds them back up to the very same value."""
    steps = [respond([tool_call("note", {"text": f"n{i}"})]) for i in range(30)] + [reply("done")]
    with ScriptedServer(steps) as server:
        run = agent_for(server, store).start("go")
        await run.finish()
    states = [r for r in store.read(run.session_id) if r["kind"] == "state"]
    sizes = [len(json.dumps(r)) for r in states]
    assert max(sizes[10:]) < 2 * max(sizes[1:5]), sizes  # a late step writes no more than an early one
    assert any("add" in r and "path" in r["add"] for r in states)
    loaded = load(store, run.session_id).value
    assert loaded.counters_json() == run.value.counters_json() and loaded.history == run.value.history

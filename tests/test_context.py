"""Context management: output caps, prompt caching (provider and the scripted server's simulation), clearing."""

import hashlib
import itertools
import json
from pathlib import Path

import anthropic
import pytest

from drivetrain import Agent, tool
from drivetrain.control.permissions import Policy
from drivetrain.loop.context import (
    CONTEXT_OFF,
    ContextSettings,
    cap_text,
    clear_old_results,
    result_cap,
    session_outputs,
    window_of,
)
from drivetrain.messages import Message, RawBlock, ToolResultBlock, ToolUseBlock
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.models.anthropic_wire import breakpoints, validate, with_cache_breakpoints
from drivetrain.models.base import ModelRequest
from drivetrain.models.openai import OpenAIModel
from drivetrain.small.codeact import CodeActionModel
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from drivetrain.testing.cache import PromptCache, count_tokens
from drivetrain.tools import Read


def record(n: int, size: int) -> str:
    lines, k = [f"record {n}"], 0
    while sum(len(x) + 1 for x in lines) < size:
        lines.append(f"{k:05d} " + hashlib.sha256(f"{n}:{k}".encode()).hexdigest())
        k += 1
    return "\n".join(lines)[:size]


def model_for(server, **kw):
    return AnthropicModel.from_env(
        "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, **kw
    )


def history(rounds: int, size: int) -> list[Message]:
    out = [Message.user("go")]
    for k in range(rounds):
        out += [
            Message("assistant", (ToolUseBlock(f"t{k}", "fetch", {"n": k}),)),
            Message("user", (ToolResultBlock(f"t{k}", record(k, size)),)),
        ]
    return out


# ---------------------------------------------------------------- windows and caps


def test_context_window_per_provider_and_model():
    assert AnthropicModel("claude-sonnet-4-6", credentials=_creds()).context_window == 200_000
    assert AnthropicModel("some-gateway-model", credentials=_creds()).context_window == 200_000
    assert OpenAIModel("gpt-4o-mini", base_url="http://127.0.0.1:9/v1").context_window == 128_000
    assert OpenAIModel("gpt-4.1", base_url="http://127.0.0.1:9/v1").context_window == 1_047_576
    assert OpenAIModel("qwen2.5-coder:7b", base_url="http://127.0.0.1:9/v1").context_window == 128_000
    assert AnthropicModel("claude-x", credentials=_creds(), context_window=50_000).context_window == 50_000

    class Local:  # what window_of reads of the llama.cpp model: its n_ctx
        name, n_ctx = "local/qwen", 8192

    assert window_of(Local()) == 8192
    assert window_of(CodeActionModel(Local())) == 8192  # through the code-block wrapper


def _creds():
    from drivetrain.models.anthropic import Credentials

    return Credentials(api_key="k")


def test_caps_scale_with_the_free_context():
    s = ContextSettings()
    empty = result_cap(200_000, 5_000, 8_192, 1, s)
    half = result_cap(200_000, 100_000, 8_192, 1, s)
    full = result_cap(200_000, 195_000, 8_192, 1, s)
    assert empty == s.max_result_tokens * 4  # a near-empty 200k window: the ceiling
    assert full == s.min_result_tokens * 4  # a full window: the floor
    assert half == int(0.25 * (200_000 - 100_000 - 8_192)) * 4 and full < half < empty
    assert result_cap(200_000, 100_000, 8_192, 4, s) == int(0.25 * (200_000 - 100_000 - 8_192) / 4) * 4  # split
    small = result_cap(32_768, 4_000, 2_048, 1, s)
    assert small == int(0.25 * (32_768 - 4_000 - 2_048)) * 4 < half  # a smaller window, a smaller cap


def test_a_capped_text_keeps_head_and_tail_and_says_how_to_page_the_saved_whole(tmp_path):
    text = "\n".join(f"line {i}" for i in range(1, 5001))
    path = tmp_path / "out" / "toolu_1.txt"
    capped = cap_text(text, 2_000, path)
    assert len(capped) <= 2_300 and capped.startswith("line 1\nline 2\n") and capped.endswith("line 5000")
    assert path.read_text() == text
    note = next(line for line in capped.splitlines() if line.startswith("[..."))
    first, last = (int(x) for x in note.split("lines ")[1].split(" of")[0].split("-"))
    shown = capped.splitlines()
    assert shown[shown.index(note) - 1] == f"line {first - 1}" and shown[shown.index(note) + 1] == f"line {last + 1}"
    assert str(path) in note and f"offset {first}" in note and "Read" in note
    assert cap_text("short", 2_000, tmp_path / "never.txt") == "short" and not (tmp_path / "never.txt").exists()


async def test_an_agent_caps_a_result_saves_it_and_read_pages_it_under_a_confining_policy(tmp_path):
    """The run's window is small, so the 60 kB output is cut; the model then Reads the saved file at an offset,
    outside the workspace, under a Policy that confines files to the workspace and asks (denies) outside it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "elsewhere.txt").write_text("secret")
    big_text = "\n".join(f"row {i} " + "z" * 50 for i in range(1000))

    @tool
    def dump() -> str:
        """Print a lot."""
        return big_text

    def saved_path(body):
        text = body["messages"][-1]["content"][0]["content"]
        return text.split("file_path ")[1].split(",")[0]

    sid = "sess-1"
    where = session_outputs(sid) / "toolu_d.txt"
    steps = [
        respond([tool_call("dump", {}, id="toolu_d")]),
        respond(
            [
                tool_call("Read", {"file_path": str(where), "offset": 500, "limit": 3}, id="toolu_r"),
                tool_call("Read", {"file_path": str(tmp_path / "elsewhere.txt")}, id="toolu_x"),
            ],
            expect=lambda b: saved_path(b) == str(where),
        ),
        reply("done"),
    ]
    with ScriptedServer(steps) as server:
        policy = Policy.load(ws, allowed_tools=["dump"], interactive=False)
        agent = Agent(model=model_for(server, context_window=20_000), tools=[dump, Read()], cwd=ws, policy=policy)
        result = await agent.start("go", session_id=sid).finish()
    assert result.subtype == "success"
    capped = result.history[2].content[0].text
    assert (
        len(capped) < 20_000 < len(big_text) and capped.startswith("row 0 ") and capped.endswith("row 999 " + "z" * 50)
    )
    assert where.read_text() == big_text
    read, outside = result.history[4].content
    assert not read.is_error and read.text.startswith("   500\trow 499 ") and "row 501" in read.text
    assert outside.is_error and "secret" not in outside.text  # only this session's outputs folder is opened


async def test_read_of_another_sessions_outputs_is_not_allowed(tmp_path):
    other = session_outputs("other") / "toolu_1.txt"
    other.parent.mkdir(parents=True)
    other.write_text("theirs")
    steps = [respond([tool_call("Read", {"file_path": str(other)})]), reply("ok")]
    with ScriptedServer(steps) as server:
        agent = Agent(
            model=model_for(server), tools=[Read()], cwd=tmp_path, policy=Policy.load(tmp_path, interactive=False)
        )
        result = await agent.start("go", session_id="mine").finish()
    block = result.history[2].content[0]
    assert block.is_error and "theirs" not in block.text


# ---------------------------------------------------------------- prompt caching: breakpoints


def test_breakpoints_sit_on_the_tools_and_the_last_two_request_ends_and_never_exceed_four():
    tools = [{"name": n, "description": "d" * 2000, "input_schema": {"type": "object"}} for n in ("a", "b", "fetch")]
    msgs = [m.to_wire() for m in history(6, 2000)]
    before = json.dumps(msgs)
    params = with_cache_breakpoints({"model": "m", "max_tokens": 10, "system": "sys", "tools": tools, "messages": msgs})
    marks = [w for w, _ in breakpoints(params)]
    assert marks == ["tools.2", f"messages.{len(msgs) - 3}.content.0", f"messages.{len(msgs) - 1}.content.0"]
    assert json.dumps(msgs) == before  # the history's shared wire dicts are not touched
    assert validate(params) == []
    # no tools: the system prompt carries the stable breakpoint
    no_tools = with_cache_breakpoints(
        {"model": "m", "max_tokens": 10, "system": "s" * 4000, "messages": [m.to_wire() for m in history(0, 0)]}
    )
    assert [w for w, _ in breakpoints(no_tools)] == ["system.0", "messages.0.content.0"]
    # a small request is left as it was (the API caches nothing under 1024 tokens)
    tiny = {
        "model": "m",
        "max_tokens": 10,
        "system": "s",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    assert with_cache_breakpoints(tiny) == tiny
    own = {
        "model": "m",
        "max_tokens": 10,
        "system": "sys",
        "tools": tools,
        "messages": [
            *msgs[:-1],
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
        ],
    }
    assert with_cache_breakpoints(own) is own  # breakpoints already placed by the caller are left alone


def test_the_server_rejects_bad_cache_control():
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": f"m{i}", "cache_control": {"type": "ephemeral"}}]}
        if i % 2 == 0
        else {"role": "assistant", "content": [{"type": "text", "text": f"a{i}"}]}
        for i in range(9)
    ]
    assert any("maximum of 4" in p for p in validate({"model": "m", "max_tokens": 5, "messages": msgs}))
    bad = [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "persistent"}}]}]
    assert any("ephemeral" in p for p in validate({"model": "m", "max_tokens": 5, "messages": bad}))


# ---------------------------------------------------------------- prompt caching: the server's simulation


def test_token_counts_are_deterministic_bytes_over_four():
    body = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "x" * 400}]}]}
    n = count_tokens(body)
    assert n == -(-len('{"text":"' + "x" * 400 + '","type":"text"}') // 4)
    marked = json.loads(json.dumps(body))
    marked["messages"][0]["content"][0]["cache_control"] = {"type": "ephemeral"}
    assert count_tokens(marked) == n  # cache_control is not counted


async def test_a_second_request_reads_what_the_first_wrote_through_the_real_sdk():
    first = [
        {"role": "user", "content": [{"type": "text", "text": "a" * 8000, "cache_control": {"type": "ephemeral"}}]}
    ]
    second = [
        {"role": "user", "content": [{"type": "text", "text": "a" * 8000, "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        {"role": "user", "content": [{"type": "text", "text": "b" * 8000, "cache_control": {"type": "ephemeral"}}]},
    ]
    plain = [{"role": "user", "content": [{"type": "text", "text": "a" * 8000}]}]
    with ScriptedServer([reply("ok"), reply("ok"), reply("ok"), reply("ok")]) as server:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0)
        u1 = (await client.messages.create(model="m", max_tokens=5, messages=first)).usage
        u2 = (await client.messages.create(model="m", max_tokens=5, messages=second)).usage
        u3 = (await client.messages.create(model="m", max_tokens=5, messages=plain)).usage
        async with client.messages.stream(model="m", max_tokens=5, messages=second) as s:
            u4 = (await s.get_final_message()).usage
        await client.close()
    a = count_tokens({"messages": first})
    total2 = count_tokens({"messages": second})
    assert (u1.cache_creation_input_tokens, u1.cache_read_input_tokens, u1.input_tokens) == (a, 0, 0)
    assert (u2.cache_read_input_tokens, u2.cache_creation_input_tokens, u2.input_tokens) == (a, total2 - a, 0)
    assert (u3.cache_read_input_tokens, u3.cache_creation_input_tokens, u3.input_tokens) == (0, 0, a)  # no breakpoint
    assert (u4.cache_read_input_tokens, u4.cache_creation_input_tokens) == (total2, 0)  # streamed: all read


def test_the_cache_misses_on_a_changed_prefix_and_under_the_minimum():
    cache = PromptCache()
    mark = {"type": "ephemeral"}
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "a" * 8000, "cache_control": mark}]}],
    }
    assert cache.use(body).cache_creation_input_tokens > 0
    changed = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "A" + "a" * 7999, "cache_control": mark}]}],
    }
    assert cache.use(changed).cache_read_input_tokens == 0
    other_model = dict(body, model="n")
    assert cache.use(other_model).cache_read_input_tokens == 0
    tiny = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": mark}]}],
    }
    u = cache.use(tiny)
    assert (u.cache_creation_input_tokens, u.cache_read_input_tokens) == (0, 0) and u.input_tokens > 0


async def test_the_provider_caches_by_default_and_not_when_turned_off():
    h = history(4, 8000)
    tools = [{"name": "fetch", "description": "Fetch a record.", "input_schema": {"type": "object"}}]
    with ScriptedServer([reply("a"), reply("b"), reply("c")]) as server:
        on = model_for(server)
        r1 = await on.respond(ModelRequest(h[:-2], "sys", tools, 100))
        r2 = await on.respond(ModelRequest(h, "sys", tools, 100))
        off = model_for(server, prompt_caching=False)
        r3 = await off.respond(ModelRequest(h, "sys", tools, 100))
        assert [len(breakpoints(q.body)) for q in server.requests] == [2, 2, 0]
    assert (
        r1.usage.cache_creation_input_tokens > 0
        and r2.usage.cache_read_input_tokens == r1.usage.cache_creation_input_tokens
    )
    assert r3.usage.cache_read_input_tokens == 0 and r3.usage.input_tokens > r2.usage.cache_read_input_tokens
    env = {"ANTHROPIC_API_KEY": "k", "DISABLE_PROMPT_CACHING": "1"}
    assert AnthropicModel.from_env(None, env).prompt_caching is False


async def test_a_breakpoint_the_caller_placed_anywhere_in_the_history_stands_and_none_are_added():
    """The provider asks each message once whether it carries one and how large it is (``Message.cache_marked``,
    ``wire_chars``), not every block of the history on every request: the answers must be the same as looking."""
    image = RawBlock(
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
            "cache_control": {"type": "ephemeral"},
        }
    )
    h = history(4, 8000)
    placed = [Message("user", (*h[0].content, image)), *h[1:]]  # the very first message, far from the end
    assert placed[0].cache_marked and not any(m.cache_marked for m in h)
    tools = [{"name": "fetch", "description": "Fetch a record.", "input_schema": {"type": "object"}}]
    with ScriptedServer([reply("a"), reply("b")]) as server:
        model = model_for(server)
        await model.respond(ModelRequest(placed, "sys", tools, 100))
        await model.respond(ModelRequest(h, "sys", tools, 100))
        marks = [[w for w, _ in breakpoints(q.body)] for q in server.requests]
    assert marks[0] == ["messages.0.content.1"]  # theirs, alone
    assert marks[1] == ["messages.6.content.0", "messages.8.content.0"]  # ours, where the full scan puts them
    for msgs in (placed, h):
        params = {
            "model": "m",
            "max_tokens": 10,
            "system": "sys",
            "tools": tools,
            "messages": [m.to_wire() for m in msgs],
        }
        assert with_cache_breakpoints(params, msgs) == with_cache_breakpoints(params)


# ---------------------------------------------------------------- clearing


def test_clearing_keeps_the_last_rounds_keeps_calls_and_cuts_whole_rounds():
    s = ContextSettings(clear_at=0.5, clear_to=0.25, keep_rounds=3)
    h = history(40, 8000)  # ~80k tokens of results
    view = clear_old_results(h, s, window=100_000)
    assert [m.role for m in view] == [m.role for m in h] and [m.tool_uses for m in view] == [m.tool_uses for m in h]
    results = [m.content[0] for m in view[2::2]]
    cleared = [b.text.startswith("[Output cleared") for b in results]
    assert cleared[-3:] == [False] * 3 and all(b == a for a, b in zip(h[-6::2], view[-6::2]))
    assert cleared == sorted(cleared, reverse=True)  # the oldest first, a prefix of rounds
    assert all(b.tool_use_id == f"t{k}" for k, b in enumerate(results))
    assert "fetch call again" in results[0].text
    assert clear_old_results(h, s, window=10_000_000) == h  # under the threshold: as is
    tight = clear_old_results(h, s, window=10_000)  # even the last three rounds pass the low-water mark
    assert [b.content[0] == a.content[0] for a, b in zip(h[2::2], tight[2::2])] == [False] * 37 + [True] * 3


def test_clearing_points_to_a_saved_output(tmp_path):
    h = history(10, 8000)
    (tmp_path / "t0.txt").write_text("whole")
    view = clear_old_results(h, ContextSettings(), window=20_000, outputs=tmp_path)
    assert str(tmp_path / "t0.txt") in view[2].content[0].text and "Read" in view[2].content[0].text


def test_clearing_happens_in_batches_and_old_views_stay_prefixes():
    """Growing the history a round at a time, the view's prefix changes only at a few batches."""
    s = ContextSettings()
    h = history(200, 8000)
    changes, previous = 0, None
    for n in range(1, 201):
        view = [m.to_wire() for m in clear_old_results(h[: 1 + 2 * n], s, window=200_000)]
        if previous is not None and view[: len(previous)] != previous:
            changes += 1
        previous = view
        last = [m["content"][0] for m in view if m["content"][0]["type"] == "tool_result"][-3:]
        assert all(b["content"] == record(int(b["tool_use_id"][1:]), 8000) for b in last)
    assert 3 <= changes <= 8  # ~2k tokens a round, 100k high-water, 50k low-water: a batch every ~25 rounds


async def test_an_agent_run_clears_in_batches_against_a_validating_server_and_keeps_the_last_rounds():
    size = 8000
    turns = 60

    @tool
    def fetch(n: int) -> str:
        """Fetch record n."""
        return record(n, size)

    def intact(body):
        rounds = [m for m in body["messages"] if m["role"] == "user" and m["content"][0].get("type") == "tool_result"]
        calls = {b["id"]: b["input"]["n"] for m in body["messages"] if m["role"] == "assistant" for b in m["content"]}
        return all(b["content"] == record(calls[b["tool_use_id"]], size) for m in rounds[-3:] for b in m["content"])

    steps = [respond([tool_call("fetch", {"n": i})], expect=intact) for i in range(turns - 1)] + [
        reply("done", expect=intact)
    ]
    with ScriptedServer(steps) as server:  # every request validated; assert_complete on exit
        agent = Agent(model=model_for(server, context_window=60_000), tools=[fetch], system="s")
        result = await agent.run("go")
        bodies = [r.body for r in server.requests]
    assert result.subtype == "success" and all(len(breakpoints(b)) <= 4 for b in bodies)
    changed = sum(
        1 for a, b in itertools.pairwise(bodies) if _strip(b["messages"])[: len(a["messages"])] != _strip(a["messages"])
    )
    assert 2 <= changed <= 12
    assert max(count_tokens(b) for b in bodies) < 0.55 * 60_000
    assert all(b.content[0].text == record(k, size) for k, b in enumerate(result.history[2::2][: turns - 1]))  # the log


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


@pytest.mark.parametrize("settings", [CONTEXT_OFF, ContextSettings(clear=False)])
async def test_clearing_can_be_turned_off(settings):
    size = 8000

    @tool
    def fetch(n: int) -> str:
        """Fetch record n."""
        return record(n, size)

    steps = [respond([tool_call("fetch", {"n": i})]) for i in range(12)] + [reply("done")]
    with ScriptedServer(steps) as server:
        agent = Agent(model=model_for(server, context_window=20_000), tools=[fetch], context_settings=settings)
        await agent.run("go")
        last = server.requests[-1].body
    assert "[Output cleared" not in json.dumps(last)


def test_outputs_folder_is_in_the_session_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("DRIVETRAIN_HOME", str(tmp_path))
    assert session_outputs("abc") == tmp_path / "sessions" / "abc" / "outputs"
    assert session_outputs("../x").parent.parent == tmp_path / "sessions"
    assert isinstance(session_outputs("abc"), Path)

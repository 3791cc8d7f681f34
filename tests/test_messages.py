import pytest

from drivetrain.messages import (
    HistoryError,
    Message,
    RawBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    block_from_wire,
    ensure_valid,
    lint,
    repair,
)


def use(i, name="Read"):
    return ToolUseBlock(f"toolu_{i}", name, {"file_path": f"{i}.py"})


def res(i, text="ok", err=False):
    return ToolResultBlock(f"toolu_{i}", text, err)


def good_history():
    return [
        Message.user("count lines"),
        Message.assistant("reading", use(1), use(2)),
        Message("user", (res(1), res(2))),
        Message.assistant("done"),
    ]


def test_valid_history_passes():
    assert not lint(good_history())


@pytest.mark.parametrize(
    "history, problem",
    [
        ([Message.user("x"), Message.assistant(use(1))], "no tool_result message"),
        (
            [Message.user("x"), Message.assistant(use(1), use(2)), Message("user", (res(1),))],
            "toolu_2 answered 0 times",
        ),
        ([Message.user("x"), Message.assistant(use(1)), Message("user", (res(1), res(1)))], "answered 2 times"),
        (
            [Message.user("x"), Message.assistant(use(1)), Message("user", (TextBlock("hi"), res(1)))],
            "after other content",
        ),
        (
            [Message.user("x"), Message.assistant(use(1)), Message("user", (res(1), res(9)))],
            "stray tool_result toolu_9",
        ),
        ([Message.user(""), Message.assistant("a")], "empty text block"),
        (
            [
                Message.user("x"),
                Message.assistant(use(1)),
                Message("user", (res(1),)),
                Message.assistant(use(1)),
                Message("user", (res(1),)),
            ],
            "duplicate tool_use id",
        ),
    ],
)
def test_lint_finds_each_violation(history, problem):
    report = lint(history)
    assert any(problem in p for p in report.problems), report.problems
    with pytest.raises(HistoryError):
        ensure_valid(history, strict=True)
    repaired = ensure_valid(history, strict=False)
    assert not lint(repaired), lint(repaired).problems


def test_repair_fills_missing_results_with_errors_and_keeps_real_ones():
    history = [Message.user("x"), Message.assistant(use(1), use(2)), Message("user", (TextBlock("note"), res(2)))]
    fixed = repair(history)
    blocks = fixed[2].content
    assert [b.tool_use_id for b in blocks if isinstance(b, ToolResultBlock)] == ["toolu_1", "toolu_2"]
    assert blocks[0].is_error and "never run" in blocks[0].text
    assert blocks[1].text == "ok" and not blocks[1].is_error
    assert isinstance(blocks[2], TextBlock)


def test_repair_answers_a_trailing_tool_use():
    fixed = repair([Message.user("x"), Message.assistant(use(1))])
    assert fixed[-1].role == "user" and fixed[-1].content[0].is_error


def test_server_blocks_round_trip_verbatim():
    wire = [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://e.com",
                    "title": "E",
                    "encrypted_content": "abc",
                    "page_age": None,
                }
            ],
        },
        {"type": "thinking", "thinking": "hmm", "signature": "sig=="},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "hi", "citations": [{"type": "web_search_result_location", "url": "u"}]},
    ]
    msg = Message.from_wire({"role": "assistant", "content": wire})
    assert isinstance(msg.content[0], RawBlock) and isinstance(msg.content[2], ThinkingBlock)
    assert msg.to_wire()["content"] == wire


def test_tool_result_is_error_only_sent_when_true():
    assert "is_error" not in res(1).to_wire()
    assert res(1, err=True).to_wire()["is_error"] is True
    assert block_from_wire(res(1, err=True).to_wire()) == res(1, err=True)

"""Canonical (Anthropic-shaped) messages <-> OpenAI chat completions, both ways, without a server."""

import json

import pytest

from drivetrain.messages import (
    Message,
    RawBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    lint,
)
from drivetrain.models.base import ModelResponse
from drivetrain.models.openai_wire import (
    InvalidToolUseBlock,
    finish_reason_to_stop_reason,
    from_chat_completion,
    from_chat_messages,
    from_chat_tools,
    stop_reason_to_finish_reason,
    to_chat_completion,
    to_chat_messages,
    to_chat_tools,
)
from drivetrain.testing import validate_chat

READ = {
    "name": "Read",
    "description": "Read a file.",
    "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]},
}
PNG = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}

HISTORY = [
    Message.user("Read a.py and b.py"),
    Message.assistant(
        "Reading both.",
        ToolUseBlock("call_1", "Read", {"file_path": "a.py"}),
        ToolUseBlock("call_2", "Read", {"file_path": "b.py", "opts": {"lines": [1, 2]}}),
    ),
    Message(
        "user",
        (
            ToolResultBlock("call_1", "print('a')"),
            ToolResultBlock("call_2", "no such file", is_error=True),
            TextBlock("Also, be brief."),
        ),
    ),
    Message.assistant(ToolUseBlock("call_3", "Read", {"file_path": "ünï.py"})),
    Message("user", (ToolResultBlock("call_3", "x = 1"),)),
    Message.assistant("Done: a.py prints a."),
]


def chat(history=HISTORY, system="Be careful."):
    return to_chat_messages(system, history)


def test_history_to_chat_shape():
    msgs = chat()
    assert [m["role"] for m in msgs] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assistant = msgs[2]
    assert assistant["content"] == "Reading both."
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_1", "call_2"]
    assert assistant["tool_calls"][1] == {
        "id": "call_2",
        "type": "function",
        "function": {"name": "Read", "arguments": json.dumps({"file_path": "b.py", "opts": {"lines": [1, 2]}})},
    }
    # results in order, before the user's own text from the same message; is_error made visible
    assert msgs[3] == {"role": "tool", "tool_call_id": "call_1", "content": "print('a')"}
    assert msgs[4] == {"role": "tool", "tool_call_id": "call_2", "content": "Error: no such file"}
    assert msgs[5] == {"role": "user", "content": "Also, be brief."}
    assert msgs[6]["content"] is None and json.loads(msgs[6]["tool_calls"][0]["function"]["arguments"]) == {
        "file_path": "ünï.py"
    }
    assert validate_chat({"model": "m", "messages": msgs, "tools": to_chat_tools([READ])}) == []


def test_round_trip_history_chat_history():
    system, history = from_chat_messages(chat())
    assert system == "Be careful."
    assert history == HISTORY
    assert not lint(history)


def test_round_trip_chat_history_chat():
    msgs = chat()
    assert to_chat_messages(*from_chat_messages(msgs)) == msgs


def test_result_text_that_looks_like_an_error_prefix_survives():
    history = [
        Message.user("go"),
        Message.assistant(ToolUseBlock("c", "Read", {})),
        Message("user", (ToolResultBlock("c", "Error: disk full", is_error=True),)),
    ]
    assert chat(history, "")[2]["content"] == "Error: Error: disk full"
    assert from_chat_messages(chat(history, ""))[1] == history


def test_tool_result_list_content_is_joined_text():
    history = [
        Message.user("go"),
        Message.assistant(ToolUseBlock("c", "Read", {})),
        Message("user", (ToolResultBlock("c", [{"type": "text", "text": "one "}, {"type": "text", "text": "two"}]),)),
    ]
    assert chat(history, "")[2] == {"role": "tool", "tool_call_id": "c", "content": "one two"}


def test_thinking_is_dropped_and_a_thinking_only_message_disappears():
    history = [
        Message.user("hi"),
        Message.assistant(ThinkingBlock("hmm", "sig"), "Hello"),
        Message.user("again"),
        Message.assistant(ThinkingBlock("only thoughts", "sig")),
    ]
    assert chat(history, "") == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "again"},
    ]


def test_images_become_image_url_parts_and_come_back():
    url_image = {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
    history = [Message("user", (TextBlock("What is this?"), RawBlock(PNG), RawBlock(url_image)))]
    msgs = chat(history, "")
    assert msgs == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            ],
        }
    ]
    assert from_chat_messages(msgs)[1] == history


def test_image_in_a_tool_result_moves_to_a_user_message_after_the_tool_messages():
    history = [
        Message.user("shoot"),
        Message.assistant(ToolUseBlock("c", "Screenshot", {})),
        Message("user", (ToolResultBlock("c", [{"type": "text", "text": "taken"}, PNG]),)),
    ]
    msgs = chat(history, "")
    assert msgs[2] == {"role": "tool", "tool_call_id": "c", "content": "taken"}
    assert msgs[3]["role"] == "user" and msgs[3]["content"][1]["type"] == "image_url"
    assert "c" in msgs[3]["content"][0]["text"]


def test_uninterpretable_blocks_are_dropped_with_a_warning(caplog):
    search = RawBlock({"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"q": "x"}})
    doc = RawBlock({"type": "document", "source": {"type": "file", "file_id": "f1"}})
    msgs = chat([Message("user", (TextBlock("read"), doc)), Message.assistant(search, "Found it.")], "")
    assert msgs == [{"role": "user", "content": "read"}, {"role": "assistant", "content": "Found it."}]
    assert "document" in caplog.text and "server_tool_use" in caplog.text


def test_tools_both_ways():
    server_tool = {"type": "web_search_20250305", "name": "web_search"}
    chat_tools = to_chat_tools([READ, server_tool])
    assert chat_tools == [
        {
            "type": "function",
            "function": {"name": "Read", "description": "Read a file.", "parameters": READ["input_schema"]},
        }
    ]
    assert from_chat_tools(chat_tools) == [READ]
    assert from_chat_tools([{"type": "function", "function": {"name": "Now"}}]) == [
        {"name": "Now", "input_schema": {"type": "object", "properties": {}}}
    ]


@pytest.mark.parametrize(
    "finish, stop",
    [
        ("stop", "end_turn"),
        ("tool_calls", "tool_use"),
        ("length", "max_tokens"),
        ("content_filter", "refusal"),
        ("function_call", "tool_use"),
        (None, "end_turn"),
        ("something_new", "end_turn"),
    ],
)
def test_finish_reason_map(finish, stop):
    assert finish_reason_to_stop_reason(finish) == stop


@pytest.mark.parametrize(
    "stop, finish",
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
    ],
)
def test_stop_reason_map(stop, finish):
    assert stop_reason_to_finish_reason(stop) == finish


def completion(message, finish="stop", usage=None):
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": usage,
    }


def call(name, arguments, id="call_1"):
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_completion_with_text_tool_calls_and_cached_usage():
    data = completion(
        {"content": "Reading.", "tool_calls": [call("Read", '{"file_path": "a.py"}'), call("Read", "", id="call_2")]},
        "tool_calls",
        {"prompt_tokens": 120, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 100}},
    )
    r = from_chat_completion(data)
    assert r.content == (
        TextBlock("Reading."),
        ToolUseBlock("call_1", "Read", {"file_path": "a.py"}),
        ToolUseBlock("call_2", "Read", {}),
    )
    assert r.stop_reason == "tool_use" and (r.id, r.model) == ("chatcmpl-1", "m")
    # chat counts cached tokens inside prompt_tokens; canonical input_tokens does not
    assert r.usage == Usage(input_tokens=20, output_tokens=30, cache_read_input_tokens=100)


def test_tool_calls_with_finish_reason_stop_still_run():
    r = from_chat_completion(completion({"content": None, "tool_calls": [call("Read", "{}")]}, "stop"))
    assert r.stop_reason == "tool_use"


def test_length_stays_max_tokens_even_with_a_cut_off_call():
    r = from_chat_completion(completion({"content": None, "tool_calls": [call("Write", '{"content": "abc')]}, "length"))
    assert r.stop_reason == "max_tokens" and isinstance(r.content[-1], InvalidToolUseBlock)


def test_refusal_and_legacy_function_call():
    r = from_chat_completion(completion({"content": None, "refusal": "I can't help with that."}))
    assert (r.content, r.stop_reason) == ((TextBlock("I can't help with that."),), "refusal")
    r = from_chat_completion(
        completion({"content": None, "function_call": {"name": "Read", "arguments": "{}"}}, "function_call")
    )
    assert r.stop_reason == "tool_use" and r.content[0].name == "Read" and r.content[0].id


@pytest.mark.parametrize(
    "arguments, problem",
    [
        ('{"file_path": "a.py"', "not valid JSON"),
        ('["a.py"]', "JSON list, not an object"),
        ("file_path=a.py", "not valid JSON"),
    ],
)
def test_malformed_arguments_never_become_a_runnable_call(arguments, problem):
    r = from_chat_completion(completion({"content": None, "tool_calls": [call("Read", arguments)]}, "tool_calls"))
    (block,) = r.content
    assert isinstance(block, InvalidToolUseBlock) and isinstance(block, ToolUseBlock)
    assert (block.id, block.name, block.input, r.stop_reason) == ("call_1", "Read", {}, "tool_use")
    assert problem in block.input_error and arguments in block.input_error and "Read" in block.input_error
    # sent back as valid JSON, so strict servers accept the history; the result carries the raw text
    assert to_chat_messages("", [Message.user("x"), r.message])[1]["tool_calls"][0]["function"]["arguments"] == "{}"


def test_canonical_response_to_chat_completion_and_back():
    response = ModelResponse(
        (TextBlock("Reading."), ToolUseBlock("call_9", "Read", {"file_path": "a.py"})),
        "tool_use",
        Usage(20, 30, 0, 100),
        "local-model",
        "msg_1",
    )
    data = to_chat_completion(response, "served-name")
    assert data["object"] == "chat.completion" and data["model"] == "served-name" and data["id"] == "msg_1"
    assert data["choices"][0]["finish_reason"] == "tool_calls"
    assert data["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "Read",
        "arguments": '{"file_path": "a.py"}',
    }
    assert data["usage"] == {
        "prompt_tokens": 120,
        "completion_tokens": 30,
        "total_tokens": 150,
        "prompt_tokens_details": {"cached_tokens": 100},
    }
    back = from_chat_completion(data)
    assert (back.content, back.stop_reason, back.usage) == (response.content, "tool_use", response.usage)


def test_empty_response_to_chat_completion():
    data = to_chat_completion(ModelResponse((), "end_turn"), "m")
    assert data["choices"][0]["message"] == {"role": "assistant", "content": ""}
    assert data["id"].startswith("chatcmpl-")


def test_chat_request_with_system_developer_and_parts():
    system, history = from_chat_messages(
        [
            {"role": "system", "content": "One."},
            {"role": "developer", "content": [{"type": "text", "text": "Two."}]},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        ]
    )
    assert system == "One.\n\nTwo."
    assert history == [Message("user", (TextBlock("a"), TextBlock("b")))]

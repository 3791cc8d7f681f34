"""Qwen tool calls: parsing them out of text, and the grammar that constrains generation to them."""

from __future__ import annotations

import ctypes
import importlib.util
import math

import pytest

from drivetrain.models.toolcall import (
    AnswerStream,
    parse_tool_calls,
    render_call,
    tool_call_grammar,
)

OFFERED = {"Read", "Bash", "Glob"}


def _schema(props: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": props, "required": required}


S, I, B = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}
BUILTIN_TOOLS = [
    {
        "name": "Read",
        "description": "Read a file.",
        "input_schema": _schema({"file_path": S, "offset": I, "limit": I}, ["file_path"]),
    },
    {
        "name": "Write",
        "description": "Write a file.",
        "input_schema": _schema({"file_path": S, "content": S}, ["file_path", "content"]),
    },
    {
        "name": "Edit",
        "description": "Edit a file.",
        "input_schema": _schema(
            {"file_path": S, "old_string": S, "new_string": S, "replace_all": B},
            ["file_path", "old_string", "new_string"],
        ),
    },
    {
        "name": "Bash",
        "description": "Run a command.",
        "input_schema": _schema({"command": S, "timeout": I, "description": S}, ["command"]),
    },
    {
        "name": "Grep",
        "description": "Search files.",
        "input_schema": _schema(
            {
                "pattern": S,
                "path": S,
                "glob": S,
                "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
                "-i": B,
                "-n": B,
                "-A": I,
                "-B": I,
                "-C": I,
                "head_limit": I,
            },
            ["pattern"],
        ),
    },
    {"name": "Glob", "description": "Find files.", "input_schema": _schema({"pattern": S, "path": S}, ["pattern"])},
]


# --------------------------------------------------------------------- parsing


def test_one_tagged_call():
    out = parse_tool_calls('<tool_call>\n{"name": "Read", "arguments": {"file_path": "a.py"}}\n</tool_call>', OFFERED)
    assert [(c.name, c.arguments) for c in out.calls] == [("Read", {"file_path": "a.py"})]
    assert out.text == "" and out.problems == []


def test_several_tagged_calls_with_text_before_them():
    text = (
        "Let me look.\n"
        '<tool_call>\n{"name": "Read", "arguments": {"file_path": "a.py"}}\n</tool_call>\n'
        '<tool_call>{"name": "Bash", "arguments": {"command": "ls -la"}}</tool_call>'
    )
    out = parse_tool_calls(text, OFFERED)
    assert [c.name for c in out.calls] == ["Read", "Bash"]
    assert out.calls[1].arguments == {"command": "ls -la"}
    assert out.text == "Let me look."


def test_unclosed_last_tag_still_counts():
    out = parse_tool_calls('<tool_call>\n{"name": "Glob", "arguments": {"pattern": "*.py"}}', OFFERED)
    assert [c.arguments for c in out.calls] == [{"pattern": "*.py"}]


def test_bare_json_call():
    out = parse_tool_calls('  {"name": "Bash", "arguments": {"command": "pytest -q"}}\n', OFFERED)
    assert [(c.name, c.arguments) for c in out.calls] == [("Bash", {"command": "pytest -q"})]
    assert out.text == ""


def test_fenced_json_and_lists_of_calls():
    fenced = '```json\n{\n  "name": "Read",\n  "arguments": {"file_path": "setup.py"}\n}\n```'
    assert [c.arguments for c in parse_tool_calls(fenced, OFFERED).calls] == [{"file_path": "setup.py"}]
    listed = (
        '```\n[{"name": "Read", "arguments": {"file_path": "a"}}, {"name": "Glob", "arguments": {"pattern": "b"}}]\n```'
    )
    assert [c.name for c in parse_tool_calls(listed, OFFERED).calls] == ["Read", "Glob"]
    wrapped = '<tools>\n  {"name": "Glob", "arguments": {"pattern": "*.py"}}\n</tools>'  # the 1.5B's habit
    assert [c.name for c in parse_tool_calls(wrapped, OFFERED).calls] == ["Glob"]


def test_arguments_given_as_a_json_string():
    out = parse_tool_calls('{"name": "Read", "arguments": "{\\"file_path\\": \\"x\\"}"}', OFFERED)
    assert out.calls[0].arguments == {"file_path": "x"}


def test_unknown_names_are_rejected():
    out = parse_tool_calls('<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>', OFFERED)
    assert out.calls == [] and "'rm_rf' was not offered" in out.problems[0]
    assert out.text.startswith("<tool_call>")  # nothing was taken out, so it stays the answer
    bare = parse_tool_calls('{"name": "Write", "arguments": {"file_path": "x", "content": ""}}', OFFERED)
    assert bare.calls == [] and bare.text.startswith("{")
    mixed = parse_tool_calls(
        '[{"name": "Nope", "arguments": {}}, {"name": "Glob", "arguments": {"pattern": "*"}}]', OFFERED
    )
    assert [c.name for c in mixed.calls] == ["Glob"] and len(mixed.problems) == 1


def test_malformed_json():
    out = parse_tool_calls('<tool_call>\n{"name": "Read", "arguments": {"file_path": "a.py"\n</tool_call>', OFFERED)
    assert out.calls == [] and "not valid JSON" in out.problems[0]
    assert parse_tool_calls('{"name": "Read", "arguments": [1, 2]}', OFFERED).calls == []
    assert parse_tool_calls('<tool_call>\n{"arguments": {}}\n</tool_call>', OFFERED).problems == [
        'tool call without a name: {"arguments": {}}'
    ]


def test_plain_answers_stay_text():
    for text in ["The answer is 4.", '{"answer": 4}', "```python\nprint({'name': 1})\n```", "[1, 2, 3]"]:
        out = parse_tool_calls(text, OFFERED)
        assert out.calls == [] and out.text == text and out.problems == []


def test_render_call_matches_qwens_template():
    assert render_call("Read", {"file_path": "é.py"}) == (
        '<tool_call>\n{"name": "Read", "arguments": {"file_path": "é.py"}}\n</tool_call>'
    )


# --------------------------------------------------------------------- streaming


def _stream(pieces: list[str], final: str | None, stops=()) -> list[str]:
    out: list[str] = []
    stream, text = AnswerStream(out.append, list(stops)), ""
    for piece in pieces:
        text += piece
        stream.feed(text)
    if final is not None:  # no calls were found: the answer is final
        stream.finish(final)
    return out


def test_stream_passes_text_on_as_it_comes():
    out = _stream(["The", " answer", " is", " 4."], "The answer is 4.")
    assert out[:3] == ["The", " answer", " is"] and "".join(out) == "The answer is 4."


def test_stream_holds_back_what_may_be_a_call():
    assert _stream(["```", "json\n", '{"name"'], None) == []  # a call after all: nothing was shown
    assert _stream(["{", '"a": 1}'], '{"a": 1}') == ['{"a": 1}']  # JSON that was no call: shown at the end
    assert "".join(_stream(["```", "python\n", "x = 1\n```"], "```python\nx = 1\n```")) == "```python\nx = 1\n```"
    assert "".join(_stream(["Sure.", "\n<tool", "_call>"], None)) == "Sure.\n"  # text before a call is shown


def test_stream_never_shows_a_stop_sequence():
    assert "".join(_stream(["one, two", ", th"], "one, two", stops=[", three"])) == "one, two"


# --------------------------------------------------------------------- grammar

needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python (drivetrain[local-small]) is not installed"
)


@pytest.fixture(scope="module")
def vocab():
    """The 0.5B's tokenizer only (vocab_only: no weights loaded); the grammar is compiled against it."""
    from drivetrain.errors import ConfigError
    from drivetrain.models.local import _llama_class
    from drivetrain.models.weights import resolve_model

    try:
        path = resolve_model("small")
    except ConfigError as exc:
        pytest.skip(f"the 0.5B model is not installed: {exc}")
    return _llama_class()(model_path=str(path), vocab_only=True, verbose=False)


def accepts(llm, gbnf: str, text: str) -> bool:
    """Does the grammar allow exactly this output (then end of generation)? Asked of llama.cpp's own sampler."""
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode(), b"root")
    assert sampler, "grammar did not compile"
    try:
        for token in llm.tokenize(text.encode(), add_bos=False, special=True) + [llm.token_eos()]:
            data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
            cur = llama_cpp.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(cur))
            if math.isinf(data[0].logit):
                return False
            llama_cpp.llama_sampler_accept(sampler, token)
        return True
    finally:
        llama_cpp.llama_sampler_free(sampler)


@needs_llama
def test_grammar_compiles_for_the_builtin_tools_and_odd_schemas(vocab):
    from drivetrain.models.local import compile_grammar

    odd = [
        {"name": "NoSchema"},
        {"name": "Empty", "input_schema": {"type": "object", "properties": {}}},
        {"name": "AllOptional", "input_schema": _schema({"a": S, "b-c": I, "d e": {"type": "number"}}, [])},
        {
            "name": "Nested",
            "input_schema": _schema(
                {
                    "items": {"type": "array", "items": _schema({"k": {"enum": ["x", 1, None]}}, ["k"])},
                    "any": {"anyOf": [S, I]},
                    "flag": {"type": ["boolean", "null"]},
                    "c": {"const": "ok"},
                },
                ["items", "undeclared"],
            ),
        },
    ]
    for tools in (BUILTIN_TOOLS, odd, BUILTIN_TOOLS + odd):
        for allow_text in (True, False):
            assert compile_grammar(vocab, tool_call_grammar(tools, allow_text=allow_text)) is not None


@needs_llama
@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "Read", "arguments": {"file_path": "a.py"}}\n</tool_call>',
        (
            '<tool_call>\n{"name": "Read", "arguments": {"file_path": "a.py", "offset": 10, "limit": 5}}\n</tool_call>\n'
            '<tool_call>\n{"name": "Grep", "arguments": {"pattern": "TODO", "output_mode": "count", "-i": true}}\n</tool_call>'
        ),
        '{"name": "Edit", "arguments": {"file_path": "a", "old_string": "x\\n\\"y\\"", "new_string": "é", "replace_all": false}}',
        '```json\n[{"name": "Glob", "arguments": {"pattern": "*.py"}}, {"name": "Bash", "arguments": {"command": "ls"}}]\n```',
        "The answer is 4.",
        "Done: see <b>bold</b> and <tool_cal> but no call.",
        "```python\nprint('hi')\n```",
    ],
)
def test_grammar_accepts(vocab, text):
    assert accepts(vocab, tool_call_grammar(BUILTIN_TOOLS), text)


@needs_llama
@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "Delete", "arguments": {"file_path": "a.py"}}\n</tool_call>',  # not offered
        '<tool_call>\n{"name": "Read", "arguments": {"offset": 1}}\n</tool_call>',  # required field missing
        '<tool_call>\n{"name": "Read", "arguments": {"file_path": 7}}\n</tool_call>',  # wrong type
        '<tool_call>\n{"name": "Read", "arguments": {"file_path": "a", "offset": "1"}}\n</tool_call>',
        '<tool_call>\n{"name": "Read", "arguments": {"file_path": "a", "mode": "x"}}\n</tool_call>',  # unknown key
        '<tool_call>\n{"name": "Grep", "arguments": {"pattern": "x", "output_mode": "all"}}\n</tool_call>',  # enum
        '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}',  # unfinished
        '{"answer": 4}',  # text may not start like JSON
        " The answer is 4.",  # nor with whitespace
        '```json\n{"answer": 4}\n```',
        'Sure.\n<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>',  # text, then a call
    ],
)
def test_grammar_rejects(vocab, text):
    assert not accepts(vocab, tool_call_grammar(BUILTIN_TOOLS), text)


@needs_llama
def test_grammar_without_text_requires_a_call(vocab):
    gbnf = tool_call_grammar(BUILTIN_TOOLS, allow_text=False)
    assert not accepts(vocab, gbnf, "The answer is 4.")
    assert accepts(vocab, gbnf, '<tool_call>\n{"name": "Glob", "arguments": {"pattern": "*"}}\n</tool_call>')


def test_grammar_needs_a_tool():
    with pytest.raises(ValueError):
        tool_call_grammar([])


def test_a_generation_stuck_in_a_short_cycle_is_stopped():
    from drivetrain.models.local import _stuck

    assert _stuck([5] * 128) and _stuck([1, 2, 3] * 60) and _stuck(list(range(10)) + [7, 8] * 80)
    assert not _stuck(list(range(200))) and not _stuck([5] * 127) and not _stuck([0, 0, 1] * 20 + list(range(100)))
    sentence = list(range(100, 150))  # a sentence of 50 tokens said over and over
    assert _stuck(list(range(40)) + sentence * 4) and not _stuck(list(range(40)) + sentence * 2 + list(range(8)))
    assert not _stuck(list(range(100)) + [9] * 8 + list(range(200, 220)) + [9] * 8 + list(range(300, 400)))

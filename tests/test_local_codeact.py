"""The small profile on the real 0.5B model: the code-block grammar as llama.cpp runs it, and the prefix cache."""

from __future__ import annotations

import ctypes
import importlib.util

import pytest

from drivetrain.messages import Message
from drivetrain.models.base import ModelRequest
from drivetrain.small.codeact import CodeActionModel, grammar
from drivetrain.small.prompts import small_system_prompt

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None,
        reason="llama-cpp-python (drivetrain[local-small]) is not installed",
    ),
    pytest.mark.xdist_group("local_codeact"),  # one model for the module, on one worker
]

BASH = {
    "name": "Bash",
    "description": "Run a shell command.",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}


@pytest.fixture(scope="module")
def model():
    from drivetrain.errors import ConfigError
    from drivetrain.models.local import LocalModel

    m = LocalModel("small", n_ctx=4096, n_threads=1, seed=7, temperature=0.0)  # one thread: see test_local_model.py
    m.prefix_cache = True  # the system turn's KV from the disk cache: see test_local_model.py
    try:
        m.load()
    except ConfigError as exc:
        pytest.skip(f"the 0.5B model is not installed: {exc}")
    return m


def accepts(llm, gbnf: str, text: str) -> bool:
    """Does llama.cpp's grammar sampler let the model write exactly ``text`` (and then stop)?"""
    import llama_cpp as lc

    sampler = lc.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode(), b"root")
    assert sampler, "llama.cpp rejected the grammar"
    try:
        tokens = llm.tokenize(text.encode(), add_bos=False, special=False) + [llm.token_eos()]
        for token in tokens:
            one = (lc.llama_token_data * 1)(lc.llama_token_data(token, 0.0, 0.0))
            lc.llama_sampler_apply(sampler, ctypes.byref(lc.llama_token_data_array(one, 1, -1, False)))
            if one[0].logit == float("-inf"):
                return False
            if token != llm.token_eos():
                lc.llama_sampler_accept(sampler, token)
        return True
    finally:
        lc.llama_sampler_free(sampler)


def test_the_grammar_allows_one_block_or_the_answer(model):
    llm = model._llm
    auto = grammar("auto")
    assert accepts(llm, auto, "List the files.\n```bash\nls -l\n```")
    assert accepts(llm, auto, "```bash\nls -la *.py\n```")
    assert accepts(llm, auto, "```python\nprint(2)\n```")
    assert accepts(llm, auto, "DONE: there are 3 files")
    assert not accepts(llm, auto, "```bash\nls -la\r\n```")  # no carriage return (the 1.5B tried it)
    assert not accepts(llm, auto, "```bash\nls -la \n```")  # nor blanks at a line's end: dropped when read,
    assert not accepts(llm, auto, "```python\nprint(1)\t\n```")  # a refused block came back with them five times
    body = "def f(x):\n    return x"
    edit = grammar("auto", files=True)
    assert not accepts(llm, edit, f"```python a.py\n{body} \n```") and accepts(
        llm, edit, f"```python a.py\n{body}\n```"
    )
    assert accepts(llm, edit, "```python a.py\ndef f(x):\n\n    return x + 1\n```")  # blank lines are fine
    assert not accepts(llm, auto, "I think there are 3 files.")  # prose is neither
    assert not accepts(llm, auto, "```bash\nls\n```\n```bash\npwd\n```")  # one block per reply
    assert not accepts(llm, grammar("any"), "DONE: nothing to do")
    assert not accepts(llm, grammar("any"), "```bash\nsudo wc -l *.py\n```")  # never root rights, never an editor
    assert not accepts(llm, auto, "```bash\nnano notes.txt\n```")
    assert not accepts(llm, auto, "```bash\nnano.service.ini\n```")  # the 1.5B's spelling, seven times
    assert not accepts(llm, auto, "```bash\ncd conf && vim app.ini\n```")
    assert not accepts(llm, auto, "```bash\nnanoledger.py\n```")
    assert not accepts(llm, auto, "```bash\nvi/app.cfg\n```") and accepts(llm, auto, "```bash\ncat view.py\n```")
    assert not accepts(llm, auto, "```bash\nvi\tservice.ini\n```")
    assert not accepts(llm, auto, "```bash\nsudoapt-get install wc\n```")  # nor root rights spelled together
    assert accepts(llm, auto, "```bash\necho sudo\n```")
    assert accepts(llm, auto, "x" * 200 + "\n```bash\nls\n```")  # a plan line of up to 200 characters
    assert not accepts(llm, auto, "x" * 201 + "\n```bash\nls\n```")
    # the plan line is never the answer's mark (the 1.5B, made to act after a check, wrote "DONE: …" there)
    assert not accepts(llm, grammar("any"), "DONE: Created it.\n```bash\ncat -n t.txt\n```")
    assert accepts(llm, grammar("any"), "DONUT count.\n```bash\nls\n```")
    # nor a block's body (bash ran "DONE: Added the Status page …" as a command: exit 127)
    assert not accepts(llm, auto, "```bash\nDONE: Added the page.\n```")
    assert not accepts(llm, auto, "```python\nDONE: Added the page.\n```")
    assert accepts(llm, auto, "```bash\nDONEFILE=1 make\n```")
    assert accepts(llm, grammar("any"), "Done with reading; now write.\n```bash\nls\n```")
    # nor a line the harness just said, nor is the answer (the 1.5B took the harness's words for its own, each turn)
    said = ["The file already holds exactly this block: nothing changed. Write the lines as they must be."]
    echo = grammar("auto", heard=said)
    assert not accepts(llm, echo, "The file already holds exactly this block: nothing changed.\n```bash\nls\n```")
    assert not accepts(llm, echo, "DONE: The file already holds exactly this block: nothing changed.")
    assert accepts(llm, echo, "The file\n```bash\nls\n```")  # a line shorter than the start (16 characters)
    assert accepts(llm, echo, "The file has it already; write the fix.\n```bash\nls\n```")
    assert accepts(llm, echo, "The file.\n```bash\nls\n```") and accepts(llm, echo, "DONE: The file is fixed.")
    assert accepts(llm, echo, "x" * 200 + "\n```bash\nls\n```")
    assert not accepts(llm, echo, "x" * 201 + "\n```bash\nls\n```")
    odd = grammar("auto", heard=['^^^ "a\\b" [x-y] \x7f\tline', "- Error: `not allowed`"])  # escaped, or left out
    assert not accepts(llm, odd, 'DONE: ^^^ "a\\b" [x-y] \x7f\tline') and accepts(llm, odd, "DONE: ^^ fine")


def test_with_edit_tools_a_block_may_name_a_file_to_change(model):
    llm = model._llm
    files = grammar("any", files=True)
    assert accepts(llm, files, "Fix it.\n```python greet.py\ndef greet(n):\n    return n\n```")
    assert accepts(llm, files, '```json conf/app.json\n{"port": 80}\n```')
    assert accepts(llm, files, "```bash\nls\n```")
    assert not accepts(llm, files, "```python greet.py extra\nx = 1\n```")  # one file name, then the body
    assert not accepts(llm, files, "```text 18\nreports.py 6\n```")  # a file name has an extension
    assert not accepts(llm, files, "```python3 -c.0.0\nx\n```")  # and does not start with a dash
    assert not accepts(llm, files, "```text " + "a" * 120 + ".txt\nx\n```")  # nor run on
    assert not accepts(llm, files, "``` notes.txt\nx\n```")  # and comes after a language
    assert not accepts(llm, grammar("any"), "```python greet.py\nx = 1\n```")  # without Edit and Write: no


def test_a_denied_program_cannot_be_written_as_a_command_word(model):
    llm = model._llm
    g = grammar("any", denied=["wc"])
    for text in ("find . -name '*.py' -exec wc -l {} +", "cat *.py | wc -l", "cat *.py | wc", "wc;ls", "sudo wc -l a"):
        assert not accepts(llm, g, f"```bash\n{text}\n```"), text
    for text in ("awk 'END {print NR}' *.py", "echo wcx", "grep -c '' *.py"):
        assert accepts(llm, g, f"```bash\n{text}\n```"), text
    assert accepts(llm, g, "```python\nprint('wc -l')\n```")  # python is not a shell command line
    g = grammar("auto", denied=["python3"])
    assert not accepts(llm, g, "```python\nprint(1)\n```")  # python blocks run as python3
    assert not accepts(llm, g, "```bash\npython3 - <<'PY'\nprint(1)\nPY\n```")
    assert accepts(llm, g, "```bash\nls\n```") and accepts(llm, g, "DONE: 3 files")
    assert not accepts(llm, grammar("none"), "```bash\nls\n```")


async def test_a_reply_under_the_grammar_is_a_bash_call(model):
    wrapped = CodeActionModel(model)
    request = ModelRequest(
        [Message.user("Show the files in this folder.")],
        small_system_prompt(True, True),
        [BASH],
        max_tokens=80,
        tool_choice="any",
    )
    response = await wrapped.respond(request)
    assert response.stop_reason == "tool_use"
    assert [b.name for b in response.content if b.type == "tool_use"] == ["Bash"]


async def test_the_prefix_cache_saves_the_system_turn_and_a_new_process_loads_it(model, tmp_path):
    from drivetrain.models.local import LocalModel

    # the first part of the small profile's system turn: the cache works alike for any, and all ~900 tokens of it
    # take ~18 s of one core to evaluate
    system = small_system_prompt(True, True)[:1000]
    request = ModelRequest([Message.user("Say hello.")], system, [], max_tokens=8, grammar=grammar("none"))
    fresh = []
    for _ in range(2):  # two new models: as two CLI starts
        m = LocalModel("small", n_ctx=4096, n_threads=1, seed=7, temperature=0.0)
        m.prefix_cache, m.prefix_cache_dir = True, tmp_path
        fresh.append((await m.respond(request), m.prefix_cache_hit, m.last_stats))
        del m
    (first, hit1, stats1), (second, hit2, stats2) = fresh
    assert (hit1, hit2) == (False, True) and len(list(tmp_path.glob("*.bin"))) == 1
    prefix = len(model._system_tokens(request))
    assert stats2.prompt_eval_tokens < stats1.prompt_eval_tokens - prefix // 2  # the prefix was not evaluated again
    assert first.content == second.content  # the same state: the same greedy answer


def test_under_the_grammar_a_control_token_is_never_sampled(model):
    """The grammar matches a control token by its text ("<|im_start|>"), which is never shown: a body
    "ls -la<|im_start|>" passes a trie that refuses "ls -la", and then reads as the refused call."""
    import llama_cpp as lc
    import numpy as np

    from drivetrain.models.local import compile_grammar

    llm = model._llm
    start = llm.tokenize(b"<|im_start|>", add_bos=False, special=True)[0]
    assert not lc.llama_vocab_is_eog(llm._model.vocab, start)

    def push(_ids, scores):  # <|im_start|> becomes the favourite wherever it is still allowed
        if np.isfinite(scores[start]):
            scores[start] = scores.max() + 50.0
        return scores

    gbnf = grammar("any", echoed=["total 12 files listed"])
    prompt = llm.tokenize(b"<|im_start|>user\nList the files.<|im_end|>\n<|im_start|>assistant\n", special=True)
    out = []
    for token in llm.generate(
        prompt,
        grammar=compile_grammar(llm, gbnf),
        reset=True,
        temp=0.0,
        logits_processor=lc.LogitsProcessorList([push]),
    ):
        if lc.llama_vocab_is_eog(llm._model.vocab, token) or len(out) >= 40:
            break
        out.append(token)
    assert out and start not in out
    assert not any(lc.llama_vocab_is_control(llm._model.vocab, t) for t in out)


def test_a_block_never_starts_with_a_line_of_the_output_just_shown(model):
    from drivetrain.messages import ToolResultBlock, ToolUseBlock
    from drivetrain.small.codeact import echoes

    output = "./storage.py:12:    # TODO: test tickets\n./alerts.py:4:# TODO: speed up\nok"
    history = [
        Message.user("List the TODOs."),
        Message.assistant(ToolUseBlock("t1", "Bash", {"command": "grep -rn TODO ."})),
        Message("user", (ToolResultBlock("t1", output),)),
    ]
    assert echoes(history) == ["./storage.py:12:    # TODO: test tickets", "./alerts.py:4:# TODO: speed up"]
    assert echoes(history[:2]) == []  # only right after a tool result
    gbnf = grammar("any", echoed=echoes(history))
    llm = model._llm
    assert not accepts(llm, gbnf, "```bash\n./storage.py:12:    # TODO: test tickets\n```")
    assert not accepts(llm, gbnf, "Copy.\n```python\n./alerts.py:4:# TODO: speed up\nx\n```")
    assert accepts(llm, gbnf, "```bash\ngrep -rn TODO . | cut -d: -f1,2 > todo.txt\n```")
    assert accepts(llm, gbnf, "```bash\n./storage.py --help\n```")  # a line's start alone is fine
    # characters llama.cpp cannot take escaped with a backslash in a class (a traceback's caret line)
    carets = grammar("any", echoed=["    return min(xs) - [1] ^ 2", "           ^^^^^^^^^^^^^^^^"])
    assert not accepts(llm, carets, "```bash\n    return min(xs) - [1] ^ 2\n```")
    assert accepts(llm, carets, "```bash\npython3 test_x.py\n```")


def test_a_denied_program_is_banned_before_a_colon_or_a_dot_and_package_installs_never_start_a_block(model):
    llm = model._llm
    g = grammar("any", denied=["wc"])
    for text in (
        "wc: *.py: Permission denied",
        "find . -exec wc.exe -l {} +",
        "apt-get install coreutils",
        "apt install wc",
    ):
        assert not accepts(llm, g, f"```bash\n{text}\n```"), text
    assert accepts(llm, g, "```bash\ngrep -c '' *.py\n```")

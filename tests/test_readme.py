"""Every ```python block of README.md runs as written, in order, in one namespace (later blocks use what
earlier ones defined), against the scripted server: ANTHROPIC_BASE_URL points at it, so
``AnthropicModel.from_env()`` works unchanged."""

import json
import os
import re
from pathlib import Path

from drivetrain.testing import ScriptedServer, reply, respond, tool_call

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number of the block's first line, code) for each ```python block."""
    return [
        (text.count("\n", 0, m.start(1)) + 1, m.group(1))
        for m in re.finditer(r"^```python\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)
    ]


def last_results(body) -> list[dict]:
    return [b for b in body["messages"][-1]["content"] if b["type"] == "tool_result"]


def read_came_back(body):
    (res,) = last_results(body)
    assert not res.get("is_error") and "drivetrain is a loop" in res["content"], res


def count_came_back(body):
    (res,) = last_results(body)
    assert res["content"] == "4", res


def rm_was_denied(body):
    (res,) = last_results(body)
    assert res["is_error"] and res["content"] == "Do not delete anything; move it to old/ instead.", res


def saw_first_prompt(body):
    texts = [b.get("text") for m in body["messages"] for b in m["content"] if b.get("type") == "text"]
    assert texts[0] == "Start NOTES.md with a title." and texts[-1] == "Is it there?", texts


# The model's side of each example, in the order the examples ask.
STEPS = [
    # the runner: "How many words are in README.md?"
    respond([tool_call("Read", {"file_path": "README.md"})]),
    respond([tool_call("word_count", {"text": "drivetrain is a loop"})], expect=read_came_back),
    reply("README.md has 4 words.", expect=count_came_back),
    # the manual loop, on the same agent, in a new event loop
    reply("There is no tests/test_math.py to fix."),
    # the control layer: the approver refuses the rm
    respond([tool_call("Bash", {"command": "rm -rf build"})]),
    reply("I left the build folder alone.", expect=rm_was_denied),
    # sessions: the first run writes NOTES.md (Verify passes), the resumed one sees the first prompt
    respond([tool_call("Write", {"file_path": "NOTES.md", "content": "# Notes\n"})]),
    reply("Started NOTES.md."),
    reply("Yes: NOTES.md starts with # Notes.", expect=saw_first_prompt),
]


def test_readme_python_examples_run_as_written(tmp_path, monkeypatch, capsys):
    blocks = python_blocks(README.read_text())
    assert len(blocks) == 5, "a new README example that calls the model needs its turns in STEPS"
    (tmp_path / "README.md").write_text("drivetrain is a loop\n")
    for name in ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_MODEL", "DRIVETRAIN_MAX_RETRIES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    with ScriptedServer(STEPS) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        for line, code in blocks:
            exec(compile("\n" * line + code, str(README), "exec"), namespace)  # tracebacks name README lines
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("success README.md has 4 words. 3 ")
    assert out[1:3] == ["1 end_turn", "There is no tests/test_math.py to fix."]
    assert out[3] == "I left the build folder alone."
    assert out[4] == "True success 3"  # one session, three turns across its two prompts
    log = Path(os.environ["DRIVETRAIN_HOME"]) / "sessions" / "tidy-up.jsonl"
    audit = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["kind"], r["tool"], r["decided_by"]) for r in audit] == [("denied", "Bash", "callback")]
    assert namespace["result"].result == "a.py has 3 lines"  # the testing example's own scripted server


def test_the_readme_stays_short_enough_to_read_in_ten_minutes():
    assert len(README.read_bytes()) <= 12 * 1024  # the rest lives in docs/

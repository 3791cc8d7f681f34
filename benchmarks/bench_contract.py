"""Can the model read what a task asks into a contract the checks could hold it to? (issue #21's alternative to
the checks that read the run.)

Asks the bundled model, once per prompt and under a grammar, the JSON form the small profile would ask at the
start of a run (files to change, files to create, the form of the answer, read-only or not), and prints what it
filled in next to what the task wants. Measured 2026-12-02 on the 1.5B (8 prompts, 4 English and 3 Chinese):
every prompt, the two read-only questions included, came back with a file "to change"; neither read-only task
was marked read-only; the answer's form was right 6 of 8 times; 25–100 s a form on the loaded machine. A check
built on that contract would send a read-only question back to edit the file it asks about, so the profile reads
the run and the workspace instead, and this form stays a benchmark.

    python benchmarks/bench_contract.py
"""

from __future__ import annotations

import asyncio
import json
import re
import time

from drivetrain.messages import Message
from drivetrain.models.base import ModelRequest
from drivetrain.models.local import LocalModel
from drivetrain.small.prompts import small_system_prompt

ASK = (
    "Before you start, read the task and fill in this JSON form about it (do not do the task yet):\n"
    '- "change": the existing files the task asks you to modify (not the ones only to read)\n'
    '- "create": the new files the task asks you to write\n'
    '- "answer": "value" if the task asks for a number, name or place in your answer, "text" for an '
    'explanation, "none" if it only asks for changes\n'
    '- "readonly": true only if the task says not to change or create any file\n'
    "Reply with the JSON only."
)

_FILE = r'"\"" [A-Za-z0-9_./-]{1,60} "\""'
GRAMMAR = "\n".join(
    [
        'root ::= "{\\"change\\": " files ", \\"create\\": " files ", \\"answer\\": " answer ", \\"readonly\\": " bool "}"',
        'files ::= "[]" | "[" file ("," " "? file){0,3} "]"',
        f"file ::= {_FILE}",
        'answer ::= "\\"value\\"" | "\\"text\\"" | "\\"none\\""',
        'bool ::= "true" | "false"',
    ]
)


def parse(text: str, prompt: str, existing: set[str]) -> dict | None:
    """The contract in ``text``, kept to what the task's own names support (None when there is no JSON object): a
    file to change is named in the task and exists; a file to create is named in the task and does not; a task
    that names a file to change is not read-only."""
    m = re.search(r"\{.*\}", text, re.S)
    try:
        data = json.loads(m.group(0)) if m else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return None

    def names(key: str) -> tuple[str, ...]:
        value = data.get(key)
        return tuple(str(v) for v in value if isinstance(v, str)) if isinstance(value, list) else ()

    named = set(re.findall(r"[A-Za-z0-9_./-]+", prompt))
    change = tuple(n for n in names("change") if n in named and n in existing)
    create = tuple(n for n in names("create") if n in named and n not in existing)
    answer = data.get("answer") if data.get("answer") in ("value", "text", "none") else "none"
    return {
        "change": change,
        "create": create,
        "answer": answer,
        "readonly": data.get("readonly") is True and not change and not create,
    }


# (prompt, the workspace's files, what the task wants: files to change, the answer's form, read-only)
PROMPTS = [
    (
        "Remove the duplicate lines from requirements.txt, keeping the first occurrence of each line in its original "
        "place.",
        {"requirements.txt"},
        (("requirements.txt",), "none", False),
    ),
    (
        "Just a question, no changes please: how many functions does pricing.py define? Don't edit or create any "
        "files.",
        {"pricing.py", "ledger.py"},
        ((), "value", True),
    ),
    (
        "Compute the mean of the price column in sales.csv, write it to mean.txt, and tell me the value.",
        {"sales.csv"},
        ((), "value", False),
    ),
    (
        "The pytest suite fails. Fix stats.py so that the tests pass; do not change the tests.",
        {"stats.py", "tests/test_stats.py"},
        (("stats.py",), "none", False),
    ),
    (
        "status.py 的输出格式不对。我需要它运行后只打印一行，内容必须和 `Processed 7 reviews.` 完全一致。",
        {"status.py"},
        (("status.py",), "none", False),
    ),
    ("只是问一下，不要修改任何文件：config.ini 里 port 设置的是多少？", {"config.ini"}, ((), "value", True)),
    (
        "把 app.py 里的 clamp 函数移到新模块 utils.py 里，并让 app.py 从那里导入。",
        {"app.py"},
        (("app.py",), "none", False),
    ),
    ("What does checksum('falcon') in reports.py return?", {"reports.py"}, ((), "value", False)),
]


async def main() -> None:
    model = LocalModel()
    system = small_system_prompt(True, True)
    right = {"change": 0, "answer": 0, "readonly": 0}
    for prompt, files, (change, answer, readonly) in PROMPTS:
        start = time.perf_counter()
        reply = await model.respond(
            ModelRequest([Message.user(prompt + "\n\n" + ASK)], system, [], 200, grammar=GRAMMAR)
        )
        got = parse(reply.message.text, prompt, files) or {}
        right["change"] += tuple(got.get("change", ())) == change
        right["answer"] += got.get("answer") == answer
        right["readonly"] += got.get("readonly") == readonly
        print(f"{time.perf_counter() - start:6.1f} s  {json.dumps(got, ensure_ascii=False)}  <- {prompt[:60]}")
    print(" ".join(f"{k} right {v}/{len(PROMPTS)}" for k, v in right.items()))


if __name__ == "__main__":
    asyncio.run(main())

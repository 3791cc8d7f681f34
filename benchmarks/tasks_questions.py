"""Task kinds whose result is mostly an answer: a value computed from data, a value only running code tells,
and a question about the workspace that must leave every file as it was."""

from __future__ import annotations

import ast
import csv
import io
import json
import math
import random
import re
from pathlib import Path

from taskkit import (
    MODULES,
    WORDS,
    Check,
    Setup,
    Task,
    check_number_file,
    digest,
    fmt_number,
    func_names,
    mentions_number,
    python_module,
    run_python,
)

# ---------------------------------------------------------------- a statistic of a CSV or JSON data file

# what is asked: (English phrase, Chinese phrase); {num} is a numeric field, {cat} = {val} a filter
STATS = {
    "mean": ("the average {num}", "{num} 的平均值"),
    "max": ("the largest {num}", "{num} 的最大值"),
    "count": ("the number of records whose {cat} is {val}", "{cat} 为 {val} 的记录条数"),
    "sum_where": ("the total {num} of the records whose {cat} is {val}", "{cat} 为 {val} 的那些记录的 {num} 之和"),
}


def _stat(rows: list[dict], stat: str, num: str, cat: str, val: str) -> float:
    if stat == "mean":
        return sum(r[num] for r in rows) / len(rows)
    if stat == "max":
        return max(r[num] for r in rows)
    if stat == "count":
        return sum(r[cat] == val for r in rows)
    return sum(r[num] for r in rows if r[cat] == val)


def gen_data_stat(rng: random.Random, ws: Path) -> Setup:
    noun = rng.choice(["orders", "shipments", "tickets", "payments", "jobs"])
    num = rng.choice(["amount", "weight", "duration", "score"])
    cat, values = rng.choice(
        [
            ("status", ["open", "closed", "pending"]),
            ("region", ["north", "south", "east"]),
            ("priority", ["low", "medium", "high"]),
        ]
    )
    n = rng.choice([10, 20, 25])  # a mean of n integers then ends within two decimals
    rows = [
        {
            "id": i + 1,
            "name": f"{rng.choice(WORDS)}-{rng.randint(10, 99)}",
            num: rng.randint(1, 500),
            cat: rng.choice(values),
        }
        for i in range(n)
    ]
    val = rng.choice(values)
    stat = rng.choice(list(STATS))
    fmt = rng.choice(["csv", "json"])
    data = f"{noun}.{fmt}"
    if fmt == "json":
        (ws / data).write_text(json.dumps(rows, indent=1) + "\n")
    else:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        (ws / data).write_text(buf.getvalue())
    out = rng.choice(["result.txt", "answer.txt", f"{stat}.txt", "stat.txt"])
    value = round(_stat(rows, stat, num, cat, val), 6)
    en, zh = STATS[stat]
    return Setup(
        {
            "data": data,
            "out": out,
            "stat": en.format(num=num, cat=cat, val=val),
            "stat_zh": zh.format(num=num, cat=cat, val=val),
        },
        {
            "data": data,
            "out": out,
            "value": value,
            "stat": stat,
            "num": num,
            "cat": cat,
            "val": val,
            "data_digest": digest(ws / data),
        },
    )


def check_data_stat(ws: Path, answer: str, e: dict) -> Check:
    if digest(ws / e["data"]) != e["data_digest"]:
        return False, f"{e['data']} was changed"
    return check_number_file(ws, e["out"], e["value"], answer)


def solve_data_stat(ws: Path, e: dict) -> str:
    text = (ws / e["data"]).read_text()
    rows = (
        json.loads(text)
        if e["data"].endswith(".json")
        else [{k: int(v) if v.isdigit() else v for k, v in r.items()} for r in csv.DictReader(io.StringIO(text))]
    )
    value = _stat(rows, e["stat"], e["num"], e["cat"], e["val"])
    (ws / e["out"]).write_text(fmt_number(value) + "\n")
    return f"The result is {fmt_number(value)}; I wrote it to {e['out']}."


# ---------------------------------------------------------------- what a function returns: run it to know


def _checksum(rng: random.Random) -> tuple[str, str, str]:
    a, b, m = rng.randint(3, 17), rng.choice([31, 33, 37]), rng.choice([997, 1009, 9973])
    word = rng.choice(WORDS)
    code = (
        f"def checksum(text):\n    h = {a}\n    for ch in text:\n        h = (h * {b} + ord(ch)) % {m}\n    return h\n"
    )
    return code, "checksum", repr(word)


def _steps(rng: random.Random) -> tuple[str, str, str]:
    code = (
        "def steps(n):\n    count = 0\n    while n != 1:\n        n = n // 2 if n % 2 == 0 else 3 * n + 1\n"
        "        count += 1\n    return count\n"
    )
    return code, "steps", str(rng.randint(27, 97))


def _scramble(rng: random.Random) -> tuple[str, str, str]:
    word = rng.choice([w for w in WORDS if len(w) in (5, 6, 7)])
    k = rng.choice([k for k in (2, 3, 4, 5) if math.gcd(k, len(word)) == 1])  # a permutation of the letters
    code = f'def scramble(word):\n    return "".join(word[(i * {k}) % len(word)] for i in range(len(word)))\n'
    return code, "scramble", repr(word)


def _tally(rng: random.Random) -> tuple[str, str, str]:
    k = rng.randint(5, 13)
    code = f"def tally(n):\n    return sum((i * i) % {k} for i in range(n))\n"
    return code, "tally", str(rng.randint(15, 60))


def gen_run_question(rng: random.Random, ws: Path) -> Setup:
    mod = rng.choice(MODULES)
    parts = [python_module(rng, func_names(rng, rng.randint(1, 2)))]
    for _ in range(50):  # a value that cannot be read off the source
        code, func, arg = rng.choice([_checksum, _steps, _scramble, _tally])(rng)
        proc = run_python(ws, ["-c", code + f"\nprint(repr({func}({arg})))"])
        value = ast.literal_eval(proc.stdout.strip())
        if str(value) not in code + parts[0] and str(value) != arg.strip("'"):
            break
    else:
        raise RuntimeError("no call whose value is not in the source")
    parts.insert(rng.randint(0, len(parts)), code)
    (ws / f"{mod}.py").write_text("\n\n".join(parts))
    call = f"{func}({arg})"
    return Setup(
        {"module": mod, "call": call},
        {"module": mod, "call": call, "value": value, "module_digest": digest(ws / f"{mod}.py")},
    )


def _names_value(answer: str, value) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return mentions_number(answer, value)
    return re.search(rf"(?<![\w]){re.escape(str(value))}(?![\w])", answer or "") is not None


def check_run_question(ws: Path, answer: str, e: dict) -> Check:
    if digest(ws / f"{e['module']}.py") != e["module_digest"]:
        return False, f"{e['module']}.py was changed"
    if not _names_value(answer, e["value"]):
        return False, f"the answer does not give {e['call']} = {e['value']!r}"
    return True, f"the answer gives {e['call']} = {e['value']!r}"


def solve_run_question(ws: Path, e: dict) -> str:
    func = e["call"].split("(")[0]
    proc = run_python(ws, ["-c", f"from {e['module']} import {func}\nprint({e['call']})"])
    return f"{e['call']} returns {proc.stdout.strip()}."


# ---------------------------------------------------------------- a question that must change nothing


def tree_digests(ws: Path) -> dict[str, str]:
    """{path: sha256} of the workspace's files; Python's byte-code caches are not the user's files."""
    return {
        p.relative_to(ws).as_posix(): digest(p)
        for p in sorted(ws.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def gen_readonly_question(rng: random.Random, ws: Path) -> Setup:
    mods = rng.sample(MODULES, rng.randint(2, 4))
    counts = {}
    for mod in mods:
        names = func_names(rng, rng.randint(2, 6))
        header = rng.choice(["import os", '"""Helpers."""', "DEFAULTS = {'retries': 3}"])  # DEFAULTS: not a def
        (ws / f"{mod}.py").write_text(python_module(rng, names, header))
        counts[mod] = len(names)
    port, workers = rng.choice([8000, 8080, 5000, 9000]) + rng.randint(1, 80), rng.randint(2, 16)
    region = rng.choice(["eu-west", "us-east", "ap-south"])
    (ws / "settings.ini").write_text(f"[server]\nport = {port}\nworkers = {workers}\nregion = {region}\n")
    (ws / "README.md").write_text(f"# {rng.choice(WORDS)}\n\nModules: {', '.join(mods)}. Settings in settings.ini.\n")
    if rng.random() < 0.5:
        mod = rng.choice(mods)
        fields = {"variant": "functions", "module": mod}
        value = counts[mod]
    else:
        key, value = rng.choice([("port", port), ("workers", workers), ("region", region)])
        fields = {"variant": "setting", "key": key, "file": "settings.ini"}
    return Setup(fields, {"value": value, "files": tree_digests(ws)})


def check_readonly_question(ws: Path, answer: str, e: dict) -> Check:
    now = tree_digests(ws)
    changed = sorted(p for p in e["files"] if now.get(p) != e["files"][p])
    created = sorted(set(now) - set(e["files"]))
    if changed or created:
        found = (("changed or removed", changed), ("created", created))
        return False, "files were " + "; ".join(f"{what}: {', '.join(ps[:3])}" for what, ps in found if ps)
    if not _names_value(answer, e["value"]):
        return False, f"nothing changed, but the answer does not give {e['value']!r}"
    return True, f"nothing changed; the answer gives {e['value']!r}"


def solve_readonly_question(ws: Path, e: dict) -> str:
    return f"It is {e['value']}."


TASKS = [
    Task(
        "data-stat",
        "a mean, max, count or filtered sum over a CSV or JSON file, written to a named file and reported",
        gen_data_stat,
        check_data_stat,
        solve_data_stat,
        names=("data", "out"),
    ),
    Task(
        "run-question",
        "say what a function returns for an input; the value is not in the source, so running it is the sure way",
        gen_run_question,
        check_run_question,
        solve_run_question,
        names=("module", "call"),
    ),
    Task(
        "readonly-question",
        "answer a question about the workspace (a function count, a setting) and change "
        "nothing: any changed or new file fails",
        gen_readonly_question,
        check_readonly_question,
        solve_readonly_question,
        names=("module", "key", "file"),
    ),
]

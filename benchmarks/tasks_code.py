"""Task kinds about code: fix a failing test, an off-by-one, a syntax error; rename, write or locate a function."""

from __future__ import annotations

import difflib
import random
import re
from pathlib import Path

from taskkit import (
    MODULES,
    NOUNS,
    WORDS,
    Check,
    Setup,
    Task,
    call_cases,
    digest,
    filler_function,
    func_names,
    norm_path,
    python_module,
    read_text,
    run_python,
)


def _replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


# ---------------------------------------------------------------- 4: fix the module so its test script passes

# (function, parameters, buggy body, fixed body, cases shown in the test, hidden cases)
BUGS = [
    (
        "average",
        "xs",
        "return sum(xs) / (len(xs) + 1)",
        "return sum(xs) / len(xs)",
        [([[2, 4, 6]], 4.0), ([[5]], 5.0)],
        [([[1, 2]], 1.5), ([[10, 20, 30, 40]], 25.0)],
    ),
    (
        "is_even",
        "n",
        "return n % 2 == 1",
        "return n % 2 == 0",
        [([4], True), ([7], False)],
        [([0], True), ([-3], False), ([10], True)],
    ),
    (
        "clamp",
        "x, lo, hi",
        "return max(lo, min(x, lo))",
        "return max(lo, min(x, hi))",
        [([5, 0, 10], 5), ([-2, 0, 10], 0), ([12, 0, 10], 10)],
        [([3, 1, 4], 3), ([9, 1, 4], 4), ([0, 1, 4], 1)],
    ),
    (
        "to_fahrenheit",
        "celsius",
        "return celsius * 9 / 5 - 32",
        "return celsius * 9 / 5 + 32",
        [([0], 32.0), ([100], 212.0)],
        [([-40], -40.0), ([37], 98.6)],
    ),
    (
        "count_vowels",
        "text",
        "return sum(ch in 'aeio' for ch in text.lower())",
        "return sum(ch in 'aeiou' for ch in text.lower())",
        [(["banana"], 3), (["fun"], 1)],
        [(["Queue"], 4), (["xyz"], 0), (["AEIOU"], 5)],
    ),
    (
        "largest",
        "xs",
        "return min(xs)",
        "return max(xs)",
        [([[3, 9, 2]], 9), ([[7]], 7)],
        [([[-5, -1, -9]], -1), ([[0, 100, 50]], 100)],
    ),
    (
        "initials",
        "name",
        "return ''.join(word[1] for word in name.split()).upper()",
        "return ''.join(word[0] for word in name.split()).upper()",
        [(["ada lovelace"], "AL"), (["Grace Brewster Hopper"], "GBH")],
        [(["alan turing"], "AT"), (["x y"], "XY")],
    ),
]


def gen_fix_test(rng: random.Random, ws: Path) -> Setup:
    func, params, bad, good, shown, hidden = rng.choice(BUGS)
    mod = rng.choice(MODULES)
    fillers = [filler_function(rng, n) for n in func_names(rng, rng.randint(1, 2))]
    fillers.insert(rng.randint(0, len(fillers)), f"def {func}({params}):\n    {bad}\n")
    (ws / f"{mod}.py").write_text("\n\n".join(fillers))
    test = f"test_{mod}.py"
    asserts = "".join(f"assert {func}({', '.join(map(repr, args))}) == {want!r}\n" for args, want in shown)
    (ws / test).write_text(f"from {mod} import {func}\n\n{asserts}print('all tests passed')\n")
    return Setup(
        {"test": test, "module": mod},
        {
            "module": mod,
            "func": func,
            "test": test,
            "bad": bad,
            "good": good,
            "test_digest": digest(ws / test),
            "cases": shown + hidden,
        },
    )


def check_fix_test(ws: Path, answer: str, e: dict) -> Check:
    if digest(ws / e["test"]) != e["test_digest"]:
        return False, f"{e['test']} was changed"
    proc = run_python(ws, [e["test"]])
    if proc.returncode != 0:
        return False, f"{e['test']} still fails: {(proc.stderr.strip().splitlines() or ['?'])[-1][:100]}"
    return call_cases(ws, e["module"], e["func"], e["cases"])


def solve_fix_test(ws: Path, e: dict) -> str:
    _replace_once(ws / f"{e['module']}.py", e["bad"], e["good"])
    return f"Fixed {e['func']} in {e['module']}.py; {e['test']} passes now."


# ---------------------------------------------------------------- 6: fix an off-by-one (hidden cases)

# (function, parameters, what it should do, the same in Chinese, buggy lines, fixed lines, hidden cases)
OFF_BY_ONE = [
    (
        "sum_to",
        "n",
        "return 1 + 2 + ... + n",
        "返回 1 + 2 + ... + n 的和",
        "total = 0\nfor i in range(1, n):\n    total += i\nreturn total",
        "range(1, n):",
        "range(1, n + 1):",
        [([1], 1), ([4], 10), ([10], 55), ([0], 0)],
    ),
    (
        "first_n",
        "items, n",
        "return the first n items of the list",
        "返回列表的前 n 个元素",
        "return items[:n - 1]",
        "items[:n - 1]",
        "items[:n]",
        [([[1, 2, 3, 4], 2], [1, 2]), ([[5, 6], 1], [5]), ([[7, 8, 9], 3], [7, 8, 9])],
    ),
    (
        "in_range",
        "x, lo, hi",
        "return True when lo <= x <= hi, both ends included",
        "在 lo <= x <= hi 时返回 True，两端都算在内",
        "return lo <= x < hi",
        "x < hi",
        "x <= hi",
        [([5, 1, 5], True), ([1, 1, 5], True), ([6, 1, 5], False), ([3, 1, 5], True)],
    ),
    (
        "countdown",
        "n",
        "return the list [n, n-1, ..., 1]",
        "返回列表 [n, n-1, ..., 1]",
        "return list(range(n, 1, -1))",
        "range(n, 1, -1)",
        "range(n, 0, -1)",
        [([3], [3, 2, 1]), ([1], [1]), ([5], [5, 4, 3, 2, 1])],
    ),
    (
        "nth_item",
        "items, n",
        "return the n-th item, counting from 1",
        "返回第 n 个元素（从 1 开始数）",
        "return items[n]",
        "items[n]",
        "items[n - 1]",
        [([["a", "b", "c"], 1], "a"), ([["a", "b", "c"], 3], "c"), ([[10, 20], 2], 20)],
    ),
    (
        "page_count",
        "total, per_page",
        "return how many pages are needed to show total items, per_page on a page",
        "返回 total 条数据按每页 per_page 条显示时一共需要几页",
        "return total // per_page + 1",
        "total // per_page + 1",
        "(total + per_page - 1) // per_page",
        [([10, 5], 2), ([11, 5], 3), ([0, 5], 0), ([1, 5], 1), ([25, 10], 3)],
    ),
]


def gen_off_by_one(rng: random.Random, ws: Path) -> Setup:
    func, params, doc, doc_zh, body, bad, good, cases = rng.choice(OFF_BY_ONE)
    mod = rng.choice(MODULES)
    code = f'def {func}({params}):\n    """{doc[0].upper() + doc[1:]}."""\n' + "".join(
        f"    {ln}\n" for ln in body.split("\n")
    )
    parts = [filler_function(rng, n) for n in func_names(rng, rng.randint(1, 3))]
    parts.insert(rng.randint(0, len(parts)), code)
    (ws / f"{mod}.py").write_text("\n\n".join(parts))
    return Setup(
        {"func": func, "module": mod, "doc": doc, "doc_zh": doc_zh},
        {"module": mod, "func": func, "bad": bad, "good": good, "cases": cases},
    )


def check_off_by_one(ws: Path, answer: str, e: dict) -> Check:
    return call_cases(ws, e["module"], e["func"], e["cases"])


# ---------------------------------------------------------------- 12: fix a syntax error


def _script(rng: random.Random) -> tuple[str, str]:
    noun = rng.choice(NOUNS)
    rows = [(w, rng.randint(1, 40)) for w in rng.sample(WORDS, rng.randint(3, 5))]
    const = f"{noun.upper()}S"
    text = (
        f'"""Print a short summary of the {noun}s."""\n\n{const} = {rows!r}\n\n\n'
        "def total(rows):\n    result = 0\n    for name, qty in rows:\n        result += qty\n"
        "    return result\n\n\n"
        f'def names(rows):\n    return ", ".join(name for name, _ in rows)\n\n\n'
        f'print("{noun}s:", names({const}))\nprint("total:", total({const}))\n'
    )
    out = f"{noun}s: {', '.join(n for n, _ in rows)}\ntotal: {sum(q for _, q in rows)}\n"
    return text, out


BREAKS = [  # (correct text, broken text)
    ("    for name, qty in rows:\n", "    for name, qty in rows\n"),
    ("def total(rows):\n", "def total(rows)\n"),
    ('print("total:", total(', 'print("total:, total('),
    ("        result += qty\n    return result\n", "        result += qty\n      return result\n"),
]


def gen_syntax_fix(rng: random.Random, ws: Path) -> Setup:
    text, out = _script(rng)
    pick = rng.randrange(len(BREAKS) + 1)
    if pick < len(BREAKS):
        good, bad = BREAKS[pick]
    else:  # a missing closing parenthesis on the last line
        good = text.splitlines(keepends=True)[-1]
        bad = good.replace("))", ")", 1)
    name = rng.choice(["report.py", "summary.py", "stats.py", f"{rng.choice(MODULES)}_report.py"])
    (ws / name).write_text(text.replace(good, bad, 1))
    return Setup({"script": name}, {"script": name, "output": out, "original": text})


def check_syntax_fix(ws: Path, answer: str, e: dict) -> Check:
    text = read_text(ws / e["script"])
    if text is None:
        return False, f"{e['script']} is gone"
    proc = run_python(ws, [e["script"]])
    if proc.returncode != 0:
        return False, f"{e['script']} still fails: {(proc.stderr.strip().splitlines() or ['?'])[-1][:100]}"
    if proc.stdout != e["output"]:
        return False, f"{e['script']} runs but prints {proc.stdout[:80]!r}"
    changed = sum(ln.startswith("- ") for ln in difflib.ndiff(e["original"].splitlines(), text.splitlines()))
    if changed > 2:
        return False, f"{e['script']} runs, but {changed} of its lines were changed or removed (a rewrite, not a fix)"
    return True, f"{e['script']} runs and prints the expected output"


def solve_syntax_fix(ws: Path, e: dict) -> str:
    (ws / e["script"]).write_text(e["original"])
    return f"Fixed the syntax error; python3 {e['script']} runs."


# ---------------------------------------------------------------- 5: rename a function across files


def gen_rename(rng: random.Random, ws: Path) -> Setup:
    old, new, helper = func_names(rng, 3)
    lib, user_a, user_b = rng.sample(MODULES, 3)
    k = rng.randint(2, 9)
    (ws / f"{lib}.py").write_text(
        filler_function(rng, helper) + f"\n\ndef {old}(values):\n    return sum(v * {k} for v in values)\n"
    )
    (ws / f"{user_a}.py").write_text(
        f"from {lib} import {old}\n\n\ndef report(rows):\n    return 'total: ' + str({old}(rows))\n"
    )
    (ws / f"{user_b}.py").write_text(
        f"import {lib}\n\n\ndef too_big(rows, limit):\n"
        f"    # {old} weights each value by {k}\n    return {lib}.{old}(rows) > limit\n"
    )
    rows = [rng.randint(1, 9) for _ in range(3)]
    (ws / "main.py").write_text(
        f"from {user_a} import report\nfrom {user_b} import too_big\n\n"
        f"print(report({rows}))\nprint(too_big({rows}, {rng.randint(10, 60)}))\n"
    )
    expected = run_python(ws, ["main.py"]).stdout
    return Setup(
        {"old": old, "new": new}, {"old": old, "new": new, "lib": lib, "users": [user_a, user_b], "output": expected}
    )


def check_rename(ws: Path, answer: str, e: dict) -> Check:
    left = [p.name for p in ws.glob("*.py") if re.search(rf"\b{e['old']}\b", p.read_text(errors="replace"))]
    if left:
        return False, f"{e['old']} is still in {', '.join(sorted(left))}"
    if not re.search(rf"^def {e['new']}\(", read_text(ws / f"{e['lib']}.py") or "", re.M):
        return False, f"{e['lib']}.py does not define {e['new']}"
    missing = [u for u in e["users"] if not re.search(rf"\b{e['new']}\b", read_text(ws / f"{u}.py") or "")]
    if missing:
        return False, f"{', '.join(missing)} no longer use {e['new']}"
    proc = run_python(ws, ["main.py"])
    if proc.returncode != 0 or proc.stdout != e["output"]:
        return (
            False,
            f"main.py {'fails' if proc.returncode else 'prints something else'}: "
            f"{(proc.stderr.strip().splitlines() or [proc.stdout])[-1][:100]}",
        )
    return True, f"{e['old']} renamed to {e['new']} in 3 files; main.py works"


def solve_rename(ws: Path, e: dict) -> str:
    for p in ws.glob("*.py"):
        p.write_text(re.sub(rf"\b{e['old']}\b", e["new"], p.read_text()))
    return f"Renamed {e['old']} to {e['new']}."


# ---------------------------------------------------------------- 7b: write a new function from a description

SPECS = [  # (function, parameters, description, the same in Chinese, code, hidden cases)
    (
        "reverse_words",
        "text",
        "returns the words of text in reverse order, joined by single spaces",
        "把 text 里的单词倒过来排，再用单个空格连起来返回",
        "return ' '.join(reversed(text.split()))",
        [(["a b c"], "c b a"), (["hello"], "hello"), (["red green blue"], "blue green red")],
    ),
    (
        "is_palindrome",
        "text",
        "returns True when text reads the same backwards, ignoring case",
        "判断 text 是不是回文（不区分大小写），是就返回 True",
        "return text.lower() == text.lower()[::-1]",
        [(["Level"], True), (["abc"], False), ([""], True), (["Aa"], True)],
    ),
    (
        "count_words",
        "text",
        "returns how many whitespace-separated words text has",
        "返回 text 里按空白分隔的单词个数",
        "return len(text.split())",
        [(["a b  c"], 3), ([""], 0), (["one"], 1)],
    ),
    (
        "digit_sum",
        "n",
        "returns the sum of the decimal digits of the non-negative integer n",
        "返回非负整数 n 的各位数字之和",
        "return sum(int(d) for d in str(n))",
        [([0], 0), ([1234], 10), ([909], 18)],
    ),
    (
        "dedupe",
        "items",
        "returns the list items without duplicates, keeping the first occurrence of each, in order",
        "返回去重后的 items 列表：每个元素只保留第一次出现的那个，顺序不变",
        "seen = []\n    for x in items:\n        if x not in seen:\n            seen.append(x)\n    return seen",
        [([[3, 1, 3, 2, 1]], [3, 1, 2]), ([[]], []), ([["a", "a"]], ["a"])],
    ),
    (
        "fahrenheit_to_celsius",
        "f",
        "converts a temperature from Fahrenheit to Celsius, rounded to 1 decimal place",
        "把华氏温度 f 换算成摄氏度，保留 1 位小数",
        "return round((f - 32) * 5 / 9, 1)",
        [([32], 0.0), ([212], 100.0), ([100], 37.8), ([-40], -40.0)],
    ),
]


def gen_create_function(rng: random.Random, ws: Path) -> Setup:
    func, params, desc, desc_zh, code, cases = rng.choice(SPECS)
    mod = rng.choice(["textutils", "helpers", "utils", f"{rng.choice(MODULES)}_utils"])
    (ws / "README.md").write_text(f"# {rng.choice(WORDS)}\n\nSmall helpers live in {mod}.py.\n")
    return Setup(
        {"module": mod, "func": func, "params": params, "desc": desc, "desc_zh": desc_zh},
        {"module": mod, "func": func, "params": params, "code": code, "cases": cases},
    )


def check_create_function(ws: Path, answer: str, e: dict) -> Check:
    if not (ws / f"{e['module']}.py").is_file():
        return False, f"{e['module']}.py was not created"
    return call_cases(ws, e["module"], e["func"], e["cases"])


def solve_create_function(ws: Path, e: dict) -> str:
    (ws / f"{e['module']}.py").write_text(f"def {e['func']}({e['params']}):\n    {e['code']}\n")
    return f"Created {e['module']}.py with {e['func']}."


def solve_replace(ws: Path, e: dict) -> str:
    _replace_once(ws / f"{e['module']}.py", e["bad"], e["good"])
    return f"Fixed {e['func']} in {e['module']}.py."


# ---------------------------------------------------------------- 8: answer with a file:line citation


def gen_locate(rng: random.Random, ws: Path) -> Setup:
    mods = rng.sample(MODULES, rng.randint(3, 4))
    names = func_names(rng, 3 * len(mods))
    where: dict[str, str] = {}
    for i, mod in enumerate(mods):
        own = names[3 * i : 3 * i + 3]
        text = python_module(rng, own, rng.choice(["import os", "import json", '"""Helpers."""']))
        other = rng.choice([n for n in names if n not in own])  # calls of functions defined elsewhere
        text += f"\n\ndef run_{mod}(data):\n    return {other}(data)\n"
        (ws / f"{mod}.py").write_text(text)
        lines = text.splitlines()
        for n in own:
            where[n] = f"{mod}.py:{lines.index(next(ln for ln in lines if ln.startswith(f'def {n}('))) + 1}"
    target = rng.choice(names)
    return Setup({"func": target}, {"func": target, "at": where[target]})


def check_locate(ws: Path, answer: str, e: dict) -> Check:
    cited = {f"{norm_path(m.group(1), ws)}:{m.group(2)}" for m in re.finditer(r"([\w./-]+\.py):(\d+)", answer or "")}
    if e["at"] in cited:
        return True, f"cites {e['at']}"
    return False, f"the answer cites {sorted(cited)[:3] or 'no path:line'}, expected {e['at']}"


def solve_locate(ws: Path, e: dict) -> str:
    for p in sorted(ws.glob("*.py")):
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if line.startswith(f"def {e['func']}("):
                return f"{e['func']} is defined at {p.name}:{i}."
    return "not found"


TASKS = [
    Task(
        "fix-test",
        "a test script (python3 test_x.py, no pytest) fails: fix the module, not the test; hidden cases too",
        gen_fix_test,
        check_fix_test,
        solve_fix_test,
        names=("test", "module"),
    ),
    Task(
        "rename",
        "rename a function across three files (definition, import, attribute use); main.py must still run",
        gen_rename,
        check_rename,
        solve_rename,
        names=("old", "new"),
    ),
    Task(
        "off-by-one",
        "fix an off-by-one in a function described in words; checked on hidden cases",
        gen_off_by_one,
        check_off_by_one,
        solve_replace,
        names=("func", "module"),
    ),
    Task(
        "create-function",
        "create a module with a function of a given name and behaviour; checked on hidden cases",
        gen_create_function,
        check_create_function,
        solve_create_function,
        names=("module", "func"),
    ),
    Task(
        "locate",
        "say which file and line define a function, as path:line",
        gen_locate,
        check_locate,
        solve_locate,
        names=("func",),
    ),
    Task(
        "syntax-fix",
        "fix a syntax error so a script runs and prints its output (a rewrite does not count)",
        gen_syntax_fix,
        check_syntax_fix,
        solve_syntax_fix,
        names=("script",),
    ),
]

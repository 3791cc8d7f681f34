"""Task kinds that change files in ways the first fifteen do not: a change across two files, output that must
match exactly, a test suite that only pytest runs, and removing duplicates without sorting."""

from __future__ import annotations

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
    read_text,
    run_python,
)
from tasks_code import BUGS

# ---------------------------------------------------------------- move a function into a new module (two files)

# (function, parameters, body, sample calls the program prints, hidden cases)
MOVABLE = [
    (
        "format_price",
        "cents",
        'return f"${cents // 100}.{cents % 100:02d}"',
        [[1999], [5], [120000], [730]],
        [([1999], "$19.99"), ([5], "$0.05"), ([100], "$1.00")],
    ),
    (
        "slugify",
        "title",
        'return "-".join(title.lower().split())',
        [["Hello World"], ["Quarterly Report 2024"], ["  spaced   out  "]],
        [(["Hello World"], "hello-world"), (["  A  b "], "a-b"), (["x"], "x")],
    ),
    (
        "percent",
        "part, whole",
        "return round(100 * part / whole, 1)",
        [[1, 3], [7, 8], [0, 5], [12, 40]],
        [([1, 3], 33.3), ([5, 5], 100.0), ([0, 7], 0.0)],
    ),
    (
        "initials",
        "name",
        'return "".join(w[0].upper() for w in name.split())',
        [["ada lovelace"], ["grace brewster hopper"], ["linus"]],
        [(["ada lovelace"], "AL"), (["x y z"], "XYZ")],
    ),
    (
        "clamp",
        "x, lo, hi",
        "return max(lo, min(x, hi))",
        [[5, 0, 3], [-1, 0, 3], [2, 0, 3]],
        [([5, 0, 3], 3), ([-1, 0, 3], 0), ([2, 0, 3], 2)],
    ),
]


def _def(func: str, params: str, body: str) -> str:
    return f"def {func}({params}):\n    {body}\n"


def gen_move_function(rng: random.Random, ws: Path) -> Setup:
    func, params, body, samples, hidden = rng.choice(MOVABLE)
    app = rng.choice(["app.py", "main.py", "cli.py", f"{rng.choice(MODULES)}.py"])
    new = rng.choice(["utils", "helpers", "formatting", f"{rng.choice(NOUNS)}_utils"])
    calls = rng.sample(samples, rng.randint(2, len(samples)))
    parts = [filler_function(rng, n) for n in func_names(rng, rng.randint(1, 2))]
    parts.insert(rng.randint(0, len(parts)), _def(func, params, body))
    parts.append("def main():\n" + "".join(f"    print({func}({', '.join(map(repr, c))}))\n" for c in calls))
    (ws / app).write_text("import sys\n\n\n" + "\n\n".join(parts) + '\n\nif __name__ == "__main__":\n    main()\n')
    output = run_python(ws, [app]).stdout
    return Setup(
        {"func": func, "app": app, "new": new},
        {"func": func, "params": params, "body": body, "app": app, "new": new, "output": output, "cases": hidden},
    )


def check_move_function(ws: Path, answer: str, e: dict) -> Check:
    app, new, func = e["app"], f"{e['new']}.py", e["func"]
    if not re.search(rf"^def {func}\(", read_text(ws / new) or "", re.M):
        return False, f"{new} does not define {func}" if (ws / new).is_file() else f"{new} was not created"
    text = read_text(ws / app)
    if text is None:
        return False, f"{app} is gone"
    if re.search(rf"^def {func}\(", text, re.M):
        return False, f"{app} still defines {func} (copied, not moved)"
    if not re.search(
        rf"^\s*(from {e['new']} import .*\b{func}\b|from {e['new']} import \*|import {e['new']}\b)", text, re.M
    ):
        return False, f"{app} does not import {func} from {e['new']}"
    proc = run_python(ws, [app])
    if proc.returncode != 0 or proc.stdout != e["output"]:
        return (
            False,
            f"python3 {app} {'fails' if proc.returncode else 'prints something else'}: "
            f"{(proc.stderr.strip().splitlines() or [proc.stdout])[-1][:100]}",
        )
    return call_cases(ws, e["new"], func, e["cases"])


def solve_move_function(ws: Path, e: dict) -> str:
    code = _def(e["func"], e["params"], e["body"])
    text = (ws / e["app"]).read_text()
    assert code in text
    text = text.replace(code + "\n\n", "", 1) if code + "\n\n" in text else text.replace(code, "", 1)
    (ws / e["app"]).write_text(text.replace("import sys\n", f"import sys\n\nfrom {e['new']} import {e['func']}\n", 1))
    (ws / f"{e['new']}.py").write_text(code)
    return f"Moved {e['func']} into {e['new']}.py; {e['app']} imports it and prints the same."


# ---------------------------------------------------------------- make a script print one exact line


def gen_exact_output(rng: random.Random, ws: Path) -> Setup:
    noun = rng.choice(NOUNS)
    items = rng.sample(WORDS, rng.randint(3, 8)) + [""] * rng.randint(0, 2)  # empty entries do not count
    rng.shuffle(items)
    n = sum(bool(x) for x in items)
    line, near = rng.choice(
        [
            (f"Processed {n} {noun}s.", f'f"Processed {{n}} {noun}s!"'),
            (f"Done: {n} {noun}s", f'"Done:", n, "{noun}s", ""'),  # a trailing space
            (f"{noun.capitalize()} count = {n}", f'f"{noun} count={{n}}"'),
            (f"Total {noun}s: {n}", f'f"Total {noun}s:  {{n}}"'),
            (f"[ok] {n} {noun}s loaded", f'f"[OK] {{n}} {noun}s loaded."'),
        ]
    )
    script = rng.choice(["summary.py", "status.py", f"{noun}_report.py", "run.py"])
    (ws / script).write_text(
        f'"""Count the {noun}s."""\n\n{noun.upper()}S = {items!r}\n\n\n'
        "def count(items):\n    return sum(1 for x in items if x)\n\n\n"
        f'n = count({noun.upper()}S)\nprint("debug:", {noun.upper()}S)\nprint({near})\n'
    )
    return Setup({"script": script, "line": line}, {"script": script, "line": line})


def check_exact_output(ws: Path, answer: str, e: dict) -> Check:
    if not (ws / e["script"]).is_file():
        return False, f"{e['script']} is gone"
    proc = run_python(ws, [e["script"]])
    if proc.returncode != 0:
        return False, f"{e['script']} fails: {(proc.stderr.strip().splitlines() or ['?'])[-1][:100]}"
    if proc.stdout != e["line"] + "\n":
        return False, f"{e['script']} prints {proc.stdout[:80]!r}, not exactly {e['line'] + chr(10)!r}"
    return True, f"{e['script']} prints exactly the line"


def solve_exact_output(ws: Path, e: dict) -> str:
    text = (ws / e["script"]).read_text().splitlines()
    (ws / e["script"]).write_text("\n".join(text[:-2] + [f"print({e['line']!r})"]) + "\n")
    return f"{e['script']} now prints exactly: {e['line']}"


# ---------------------------------------------------------------- a failing test that only pytest runs


def gen_pytest_fix(rng: random.Random, ws: Path) -> Setup:
    func, params, bad, good, shown, hidden = rng.choice(BUGS)
    mod = rng.choice(MODULES)
    fillers = [filler_function(rng, n) for n in func_names(rng, rng.randint(1, 2))]
    fillers.insert(rng.randint(0, len(fillers)), f"def {func}({params}):\n    {bad}\n")
    (ws / f"{mod}.py").write_text("\n\n".join(fillers))
    (ws / "tests").mkdir()
    test = f"tests/test_{mod}.py"
    cases = ",\n".join(f"    ({', '.join(map(repr, args))}, {want!r})" for args, want in shown)
    argnames = ", ".join(p.strip() for p in params.split(",")) + ", expected"
    (ws / test).write_text(
        f"import pytest\n\nfrom {mod} import {func}\n\n\n"
        f"@pytest.mark.parametrize({argnames!r}, [\n{cases},\n])\n"
        f"def test_{func}({argnames}):\n"
        f"    assert {func}({argnames.rsplit(', ', 1)[0]}) == expected\n"
    )
    (ws / "pytest.ini").write_text("[pytest]\npythonpath = .\ntestpaths = tests\n")
    return Setup(
        {"module": mod, "test": test},
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


def check_pytest_fix(ws: Path, answer: str, e: dict) -> Check:
    if digest(ws / e["test"]) != e["test_digest"]:
        return False, f"{e['test']} was changed"
    # only pytest itself: plugins installed beside it would slow every check and could change the verdict
    proc = run_python(
        ws,
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", e["test"]],
        timeout=60,
        env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    if proc.returncode != 0:
        summary = (proc.stdout.strip().splitlines() or ["?"])[-1]
        return False, f"pytest still fails: {summary[:100]}"
    return call_cases(ws, e["module"], e["func"], e["cases"])


def solve_pytest_fix(ws: Path, e: dict) -> str:
    path = ws / f"{e['module']}.py"
    path.write_text(path.read_text().replace(e["bad"], e["good"], 1))
    return f"Fixed {e['func']} in {e['module']}.py; pytest passes."


# ---------------------------------------------------------------- remove duplicate lines in place, keeping the order


def gen_dedupe_order(rng: random.Random, ws: Path) -> Setup:
    name = rng.choice(["requirements.txt", "hosts.txt", "recipients.txt", "tags.txt"])
    pool = [f"{w}{rng.randint(1, 9)}" for w in rng.sample(WORDS, rng.randint(5, 9))]
    if name == "requirements.txt":
        pool = [f"{w}>={rng.randint(1, 4)}.{rng.randint(0, 9)}" for w in rng.sample(WORDS, len(pool))]
    elif name == "hosts.txt":
        pool = [f"{p}.internal" for p in pool]
    elif name == "recipients.txt":
        pool = [f"{p}@example.com" for p in pool]
    while pool == sorted(pool):  # the kept order must not also be the sorted order
        rng.shuffle(pool)
    lines = list(pool)
    for _ in range(rng.randint(3, 7)):  # repeats, each after its first occurrence
        i = rng.randrange(len(pool))
        lines.insert(rng.randint(lines.index(pool[i]) + 1, len(lines)), pool[i])
    (ws / name).write_text("\n".join(lines) + "\n")
    return Setup({"file": name}, {"file": name, "want": pool})


def check_dedupe_order(ws: Path, answer: str, e: dict) -> Check:
    text = read_text(ws / e["file"])
    if text is None:
        return False, f"{e['file']} is gone"
    got = [ln.strip() for ln in text.strip().splitlines()]
    if got == e["want"]:
        return True, f"{e['file']} holds its {len(got)} distinct lines in their first order"
    if sorted(got) == sorted(e["want"]):
        return False, f"{e['file']} has the right lines in another order (sorted?)"
    return False, f"{e['file']} has {len(got)} lines, not the {len(e['want'])} distinct ones in order"


def solve_dedupe_order(ws: Path, e: dict) -> str:
    lines = (ws / e["file"]).read_text().splitlines()
    kept = list(dict.fromkeys(lines))
    (ws / e["file"]).write_text("\n".join(kept) + "\n")
    return f"Removed {len(lines) - len(kept)} duplicate lines from {e['file']}."


TASKS = [
    Task(
        "move-function",
        "move a function into a new module and import it from there; the program prints the same",
        gen_move_function,
        check_move_function,
        solve_move_function,
        names=("func", "app", "new"),
    ),
    Task(
        "exact-output",
        "make a script print one given line exactly (no debug line, no '!', no stray space)",
        gen_exact_output,
        check_exact_output,
        solve_exact_output,
        names=("script", "line"),
    ),
    Task(
        "pytest-fix",
        "a parametrized suite in tests/ fails (only pytest, with its pytest.ini, runs it): fix the "
        "module; hidden cases too",
        gen_pytest_fix,
        check_pytest_fix,
        solve_pytest_fix,
        names=("module",),
    ),
    Task(
        "dedupe-order",
        "remove duplicate lines from a file in place, keeping the first order (not sorted)",
        gen_dedupe_order,
        check_dedupe_order,
        solve_dedupe_order,
        names=("file",),
    ),
]

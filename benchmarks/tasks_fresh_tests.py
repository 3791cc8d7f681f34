"""A fresh task kind (split ``fresh``: never tuned on): write the tests of a function. The checker runs them on the
function as it is (they must pass) and on mutants of it, each breaking one behaviour its docstring states (each
mutant must make them fail)."""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path

from taskkit import MODULES, Check, Setup, Task, digest, read_text, run_python

# Each maker returns (function source, [(what the mutant breaks, mutant source)], assertions of a good test).


def _shipping(rng: random.Random):
    per, free = rng.randint(2, 6), rng.randint(5, 12)
    doc = (
        f'    """The shipping cost of a parcel: {per} for every started kilogram, and free from {free} kg on\n'
        f'    ({free} included). A negative weight raises ValueError."""\n'
    )
    good = (
        "def shipping_cost(weight_kg):\n" + doc + "    if weight_kg < 0:\n"
        '        raise ValueError("negative weight")\n'
        f"    if weight_kg >= {free}:\n        return 0\n"
        f"    return {per} * math.ceil(weight_kg)\n"
    )
    mutants = [
        (f"{free} kg itself is not free (> for >=)", good.replace(f">= {free}:", f"> {free}:")),
        ("a started kilogram is not counted (floor for ceil)", good.replace("math.ceil", "math.floor")),
        ("a negative weight does not raise", good.replace("if weight_kg < 0:", "if weight_kg < -1e9:")),
    ]
    checks = [
        f"assert shipping_cost({free}) == 0",
        f"assert shipping_cost({free} - 0.5) == {per * free}",
        f"assert shipping_cost(1.5) == {2 * per}",
        "try:\n    shipping_cost(-1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError('no ValueError')",
    ]
    return "shipping_cost", "import math\n\n\n" + good, mutants, checks


def _grade(rng: random.Random):
    a = rng.choice([85, 88, 90, 92])
    b = a - rng.choice([8, 10, 12])
    c = b - rng.choice([8, 10, 12])
    doc = (
        f'    """The letter for a score from 0 to 100: A from {a}, B from {b}, C from {c} (each bound included),\n'
        '    F below. A score outside 0..100 raises ValueError."""\n'
    )
    good = (
        "def grade(score):\n" + doc + "    if not 0 <= score <= 100:\n"
        '        raise ValueError(f"score out of range: {score}")\n'
        f'    if score >= {a}:\n        return "A"\n    if score >= {b}:\n        return "B"\n'
        f'    if score >= {c}:\n        return "C"\n    return "F"\n'
    )
    mutants = [
        (f"{a} itself is a B (> for >=)", good.replace(f">= {a}:", f"> {a}:")),
        (f"{c} itself is an F (> for >=)", good.replace(f">= {c}:", f"> {c}:")),
        ("a score above 100 does not raise", good.replace("<= score <= 100", "<= score <= 1000")),
    ]
    checks = [
        f"assert grade({a}) == 'A'",
        f"assert grade({a - 1}) == 'B'",
        f"assert grade({c}) == 'C'",
        f"assert grade({c - 1}) == 'F'",
        "try:\n    grade(101)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError('no ValueError')",
    ]
    return "grade", good, mutants, checks


def _size(rng: random.Random):
    unit = rng.choice([1024, 1000])
    doc = (
        f'    """Bytes in a size such as "512", "10K" or "3 mb": a number, then optionally K, M or G (any case,\n'
        f'    an optional trailing B), where K is {unit} bytes, M {unit}**2 and G {unit}**3."""\n'
    )
    good = (
        "def parse_size(text):\n" + doc + '    m = re.fullmatch(r"\\s*(\\d+)\\s*([kmg]?)b?\\s*", text.lower())\n'
        "    if not m:\n"
        '        raise ValueError(f"not a size: {text!r}")\n'
        f'    return int(m.group(1)) * {unit} ** " kmg".index(m.group(2) or " ")\n'
    )
    other = 1000 if unit == 1024 else 1024
    mutants = [
        (f"K is {other} bytes", good.replace(f"* {unit} **", f"* {other} **")),
        ("upper-case units are refused (no lower())", good.replace("text.lower()", "text")),
        ("a trailing B is refused", good.replace("b?\\s*", "\\s*")),
    ]
    checks = [
        "assert parse_size('512') == 512",
        f"assert parse_size('10k') == {10 * unit}",
        f"assert parse_size('3 MB') == {3 * unit**2}",
        f"assert parse_size('2G') == {2 * unit**3}",
    ]
    return "parse_size", "import re\n\n\n" + good, mutants, checks


MAKERS = [_shipping, _grade, _size]


def gen_write_test(rng: random.Random, ws: Path) -> Setup:
    func, source, mutants, checks = rng.choice(MAKERS)(rng)
    mod = rng.choice(["rules", "pricing", f"{rng.choice(MODULES)}_rules", "calc"])
    test = rng.choice([f"test_{func}.py", f"test_{mod}.py", "check_rules.py"])
    header = '"""Business rules."""\n\n'
    (ws / f"{mod}.py").write_text(header + source)
    good = source[source.index("def ") :]  # the function, after the imports it needs
    return Setup(
        {"module": mod, "func": func, "test": test},
        {
            "module": mod,
            "func": func,
            "test": test,
            "mutants": [[what, header + source.replace(good, m, 1)] for what, m in mutants],
            "checks": checks,
            "module_digest": digest(ws / f"{mod}.py"),
        },
    )


def check_write_test(ws: Path, answer: str, e: dict) -> Check:
    module = f"{e['module']}.py"
    if read_text(ws / e["test"]) is None:
        return False, f"{e['test']} was not written"
    if digest(ws / module) != e["module_digest"]:
        return False, f"{module} was changed (the tests are to check it as it is)"
    proc = run_python(ws, [e["test"]], timeout=60)
    if proc.returncode != 0:
        return False, f"python3 {e['test']} fails on the function as it is: {_last(proc)}"
    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        for what, source in e["mutants"]:
            copy = Path(tmp) / "ws"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(ws, copy, ignore=shutil.ignore_patterns("__pycache__"))
            (copy / module).write_text(source)
            if run_python(copy, [e["test"]], timeout=60).returncode == 0:
                return False, f"python3 {e['test']} still passes when {what}"
    return True, f"{e['test']} passes, and fails on each of {len(e['mutants'])} broken versions"


def _last(proc) -> str:
    return (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["?"])[-1][:100]


def solve_write_test(ws: Path, e: dict) -> str:
    body = "\n".join(e["checks"])
    (ws / e["test"]).write_text(f"from {e['module']} import {e['func']}\n\n{body}\nprint('all tests passed')\n")
    return f"Wrote {e['test']}: {len(e['checks'])} checks of {e['func']}; python3 {e['test']} passes."


TASKS = [
    Task(
        "write-test",
        "write a test script for a function; it must pass, and fail on each of three versions that break a "
        "behaviour the docstring states",
        gen_write_test,
        check_write_test,
        solve_write_test,
        names=("module", "func", "test"),
    ),
]

"""What a benchmark task is, and the small helpers the task kinds share.

A task kind has three functions. ``generate(rng, ws)`` fills the empty folder ``ws`` with
files drawn from ``rng`` and returns a ``Setup``: the fields the user's prompt is worded from, plus what
the checker needs to know. The prompt itself comes from one of the kind's ``Wording``s (several per kind,
in English and Chinese, see ``wordings.py``), so one workspace can be asked for in several ways.
``check(ws, answer, expect)`` inspects the folder and the agent's final answer
afterwards and returns ``(solved, reason)``; it is a program, never a model. ``solve(ws, expect)``
is the reference solution: it does what a correct agent would do and returns a correct answer,
so the self-test can show that every checker fails on the untouched folder and passes on a solved one.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

Check = tuple[bool, str]


@dataclass(frozen=True)
class Wording:
    """One way a user might ask for a task kind: an id (``en-2``, ``zh-1``; the part before the dash is the
    language) and a ``str.format`` template over the instance's fields, or one template per ``fields["variant"]``
    for kinds whose instances ask different questions."""

    id: str
    text: str | Mapping[str, str]

    @property
    def lang(self) -> str:
        return self.id.split("-")[0]

    def render(self, fields: Mapping) -> str:
        text = self.text if isinstance(self.text, str) else self.text[fields["variant"]]
        return text.format_map(fields)


@dataclass(frozen=True)
class Setup:
    """What a generator makes besides the files: the fields the prompt is worded from, and what the checker needs."""

    fields: dict
    expect: dict  # JSON-able: what the checker and the reference solution need
    deny: tuple[str, ...] = ()  # permission rules to deny (drivetrain: --disallowedTools; naive loop: same rules)
    cli_args: tuple[str, ...] = ()  # any other drivetrain CLI arguments this task needs


@dataclass(frozen=True)
class Instance:
    prompt: str
    expect: dict
    deny: tuple[str, ...] = ()
    cli_args: tuple[str, ...] = ()
    wording: str = "en-1"
    lang: str = "en"


@dataclass(frozen=True)
class Task:
    name: str
    summary: str  # one line, for the task list
    generate: Callable[[random.Random, Path], Setup]
    check: Callable[[Path, str, dict], Check]
    solve: Callable[[Path, dict], str]
    names: tuple[str, ...] = ()  # fields every wording must put in the prompt (files, functions, values)
    tags: tuple[str, ...] = field(default=())
    wordings: tuple[Wording, ...] = ()  # the first is the default

    def wording(self, wording_id: str | None = None) -> Wording:
        if wording_id is None:
            return self.wordings[0]
        for w in self.wordings:
            if w.id == wording_id:
                return w
        raise KeyError(f"{self.name} has no wording {wording_id!r} (it has {', '.join(w.id for w in self.wordings)})")

    def make(self, seed: int, ws: Path, wording: str | None = None) -> Instance:
        """The workspace and prompt of ``seed``; the wording changes the prompt only, never the files."""
        w = self.wording(wording)
        ws.mkdir(parents=True, exist_ok=True)
        setup = self.generate(random.Random(f"{self.name}/{seed}"), ws)
        return Instance(w.render(setup.fields), setup.expect, setup.deny, setup.cli_args, w.id, w.lang)


# ---------------------------------------------------------------- vocabulary for generated files

NOUNS = [
    "order",
    "invoice",
    "user",
    "report",
    "cart",
    "ticket",
    "record",
    "sensor",
    "account",
    "message",
    "payment",
    "booking",
    "product",
    "review",
    "shipment",
    "session",
    "task",
    "note",
    "event",
    "batch",
]
VERBS = [
    "load",
    "parse",
    "build",
    "compute",
    "format",
    "check",
    "collect",
    "merge",
    "render",
    "count",
    "filter",
    "update",
    "fetch",
    "export",
    "normalize",
    "summarize",
]
MODULES = [
    "inventory",
    "billing",
    "reports",
    "shipping",
    "accounts",
    "orders",
    "metrics",
    "storage",
    "search",
    "pricing",
    "alerts",
    "scheduler",
    "catalog",
    "payments",
    "ledger",
    "notify",
]
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "falcon",
    "harbor",
    "maple",
    "cobalt",
    "quartz",
    "ember",
    "willow",
    "orbit",
    "summit",
    "atlas",
    "nova",
    "pixel",
]


def func_names(rng: random.Random, n: int) -> list[str]:
    """n distinct verb_noun names."""
    pairs = rng.sample([(v, o) for v in VERBS for o in NOUNS], n)
    return [f"{v}_{o}" for v, o in pairs]


def filler_function(rng: random.Random, name: str) -> str:
    """A small, plausible Python function of 2–5 body lines."""
    arg = rng.choice(["items", "data", "values", "rows", "entries"])
    body = rng.choice(
        [
            ["result = []", f"for x in {arg}:", "    result.append(x)", "return result"],
            ["total = 0", f"for x in {arg}:", "    total += x", "return total"],
            [f"if not {arg}:", "    return None", f"return {arg}[0]"],
            [f"return sorted({arg})"],
            ["seen = set()", f"for x in {arg}:", "    seen.add(x)", "return len(seen)"],
            [f"return [x for x in {arg} if x]"],
        ]
    )
    return f"def {name}({arg}):\n" + "".join(f"    {line}\n" for line in body)


def python_module(rng: random.Random, names: list[str], header: str = "") -> str:
    parts = [header] if header else []
    parts += [filler_function(rng, n) for n in names]
    return "\n\n".join(parts)


# ---------------------------------------------------------------- checking helpers

_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])")


def numbers_in(text: str) -> list[float]:
    out = []
    for m in _NUMBER.finditer(text or ""):
        raw = m.group(0).replace(",", "")
        try:
            out.append(float(raw))
        except ValueError:
            pass
    return out


def mentions_number(text: str, value: float) -> bool:
    return any(abs(x - value) < 1e-6 for x in numbers_in(text))


def fmt_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def read_text(path: Path) -> str | None:
    return path.read_text(errors="replace") if path.is_file() else None


def check_number_file(ws: Path, out: str, value: float, answer: str) -> Check:
    """``out`` holds just the number (surrounding whitespace allowed) and the answer mentions it."""
    text = read_text(ws / out)
    if text is None:
        return False, f"{out} was not written"
    try:
        written = float(text.strip())
    except ValueError:
        return False, f"{out} holds {text.strip()[:40]!r}, not just the number {fmt_number(value)}"
    if abs(written - value) > 1e-6:
        return False, f"{out} holds {text.strip()[:40]}, expected {fmt_number(value)}"
    if not mentions_number(answer, value):
        return False, f"{out} is right but the answer does not report {fmt_number(value)}"
    return True, f"{out} = {fmt_number(value)}, reported"


def norm_path(p: str, ws: Path | None = None) -> str:
    """A path as the model wrote it, relative to the workspace: no quotes, no ./, no absolute workspace prefix."""
    p = p.strip().strip("`'\"")
    if ws is not None:
        for root in {str(ws), str(ws.resolve())}:
            p = p.removeprefix(root.rstrip("/") + "/")
    while p.startswith("./"):
        p = p[2:]
    return p


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def run_python(
    ws: Path, args: list[str], timeout: float = 20, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run a Python script or ``-c`` program in the workspace (the checker's own interpreter)."""
    try:
        return subprocess.run(
            [sys.executable, *args],
            cwd=ws,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env} if env else None,
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", f"timed out after {timeout} s")


def call_cases(ws: Path, module: str, func: str, cases: list[list]) -> Check:
    """Import ``module`` from the workspace in a fresh interpreter and compare ``func(*args)`` with each case's
    expected value (cases are ``[args, expected]``)."""
    prog = (
        "import json, sys\nsys.path.insert(0, '.')\n"
        f"from {module} import {func} as f\n"
        "out = []\n"
        "for args, _ in json.loads(sys.stdin.readline()):\n"
        "    try:\n        out.append(['ok', f(*args)])\n"
        "    except Exception as e:\n        out.append(['raised', type(e).__name__ + ': ' + str(e)])\n"
        "print(json.dumps(out))\n"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", prog],
            cwd=ws,
            input=json.dumps(cases) + "\n",
            capture_output=True,
            text=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        return False, f"{module}.{func} did not return within 20 s"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return False, f"could not call {module}.{func}: {last[:120]}"
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for (args, want), (kind, got) in zip(cases, results):
        if kind != "ok":
            return False, f"{func}{tuple(args)} raised {got[:80]}"
        if got != want and not (isinstance(want, float) and isinstance(got, (int, float)) and abs(got - want) < 1e-6):
            return False, f"{func}{tuple(args)} returned {got!r}, expected {want!r}"
    return True, f"{func} passes {len(cases)} hidden cases"

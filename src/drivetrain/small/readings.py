"""What the small profile's checks read from a command, its output or a file: which program a command runs, whether
it runs tests, what a traceback points at, whether a file still parses, a sum the answer writes out. Pure functions
of text, shared by ``small/checks.py``."""

from __future__ import annotations

import configparser
import difflib
import itertools
import json
import os
import re
import tomllib
from pathlib import Path

from drivetrain.small.changes import looks_like_edit
from drivetrain.small.prompts import FILE_NAME

# Test runners by their program names, which read the same in a task of any language
_RUNNERS = r"\b(pytest|unittest|npm (run )?test|make (check|test)|go test|cargo test|tox)\b"
TEST_RUNNER = re.compile(_RUNNERS)
_INTERPRETERS = ("python", "python3", "bash", "sh", "node")
_INDENT_ERROR = re.compile(r'File "([^"\n]+)", line (\d+)\n(?:.*\n){0,3}?(?:IndentationError|TabError): ')
_BAD_NUMBER = re.compile(
    r"could not convert string to float: '([^'\n]*)'|invalid literal for int\(\) with base 10: "
    r"'([^'\n]*)'"
)
_SUM = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?(?:\s*\+\s*\d+(?:\.\d+)?)+)\s*=\s*(\d+(?:\.\d+)?)(?![\w.]*\d)")
_TEST_FUNCTION = re.compile(r"^(?:async\s+)?def\s+test_\w*\s*\(|^class\s+Test\w*", re.M)
_MAIN = re.compile(r"__name__\s*==\s*['\"]__main__['\"]|unittest\.main\(|pytest\.main\(")
_LIST_ITEM = re.compile(r"\s*(?:\d+[.)、]|[-*•])\s")


def _printed_by(command: str, line: str, files: dict[str, bytes]) -> str:
    """Where the script prints ``line``: the ``print`` of its source most like it (" Line 12 of f.py prints it: …")."""
    script = next((w for w in command.split()[1:] if w in files), None)
    if script is None:
        return ""
    source = files[script].decode("utf-8", "replace").splitlines()
    prints = [(i, ln.strip()) for i, ln in enumerate(source, 1) if "print(" in ln]
    if not prints:
        return ""
    n, text = max(prints, key=lambda p: difflib.SequenceMatcher(None, line, p[1]).ratio())
    return f" Line {n} of {script} prints it: `{text}`."


def _set_apart(prompt: str) -> list[str]:
    """Lines the task sets on a line of their own after a colon (":" or "："): a literal, like a quoted one."""
    lines = prompt.splitlines()
    return [
        ln.strip()
        for before, ln in itertools.pairwise(lines)
        if before.rstrip().endswith((":", "：")) and ln.strip() and not _LIST_ITEM.match(ln)
    ]


def _fence(command: str) -> str:
    """A command to run, as a block the model can copy (a small model copies a block far more readily than
    it follows "e.g." in a sentence)."""
    return f"```bash\n{command}\n```"


def _header_hint(command: str, output: str, files: dict[str, bytes]) -> str:
    """A conversion that failed on a column name of a CSV file the command reads: that is its header row, to be
    skipped, not a reason to filter every row out."""
    m = _BAD_NUMBER.search(output)
    value = (m.group(1) or m.group(2)) if m else None
    for name in dict.fromkeys(n for n in FILE_NAME.findall(command) if n.endswith((".csv", ".tsv"))) if m else ():
        first = files.get(name, b"").decode("utf-8", "replace").partition("\n")[0].strip()
        if value in [f.strip().strip('"') for f in re.split(r"[,\t;]", first)]:
            return (
                f"Note: {value!r} is a column name: line 1 of {name} is its header ({first[:120]}). Skip that "
                "line (next(reader) first, or csv.DictReader), then convert the values."
            )
    return ""


def _indent_hint(output: str, cwd: Path) -> str:
    """An indentation error in a workspace file: the lines up to it with their leading spaces made visible: the
    message alone does not show what is wrong."""
    m = _INDENT_ERROR.search(output)
    if not m:
        return ""
    path, n = cwd / m.group(1), int(m.group(2))  # (an absolute path stays itself)
    try:
        if not path.resolve().is_relative_to(cwd.resolve()):
            return ""
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError, ValueError):
        return ""
    shown = [
        f"{i:4}| " + re.sub(r"^[ \t]+", lambda w: w.group(0).replace(" ", "·").replace("\t", "→"), lines[i - 1])
        for i in range(max(1, n - 4), min(len(lines), n + 1) + 1)
    ]
    rel = path.resolve().relative_to(cwd.resolve()).as_posix()
    return f"Note: {rel} around line {n}, each leading space shown as ·:\n" + "\n".join(shown)


def _arithmetic(answer: str) -> list[str]:
    """A sum written out in the answer ("20 + 5 + 25 = 50") is right, and does not add a total to its own parts
    (wc's total line added to the per-file counts)."""
    out = []
    for m in _SUM.finditer(answer):
        terms = [float(t) for t in re.split(r"\s*\+\s*", m.group(1))]
        result, total = float(m.group(2)), sum(terms)
        written = f"{m.group(1)} = {m.group(2)}"
        part = next((t for t in terms if len(terms) > 2 and abs(t - (total - t)) < 1e-9), None)
        if part is not None:
            out.append(
                f"Your answer adds {written}, but {_num(part)} is already the sum of the other numbers (a "
                f"total line counted as a part), so the total is {_num(part)}. Fix what you wrote and your answer."
            )
        elif abs(total - result) > 1e-6 * max(1.0, abs(result)):
            out.append(
                f"Your answer says {written}, but that sum is {_num(total)}. Fix what you wrote and your answer."
            )
    return out


def _num(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:.10g}"


def _not_citations(content: bytes) -> str:
    """The first line of a file that is not just path:line ("" when all are)."""
    lines = [ln.strip() for ln in content.decode("utf-8", "replace").splitlines()]
    return next((ln for ln in lines if ln and not re.fullmatch(r"\S+:\d+", ln)), "")


def _parse_error(path: str, content: bytes) -> str:
    """Why a .py/.json/.toml/.ini/.cfg file does not parse ("" when it does, or is of another kind)."""
    try:
        text = content.decode("utf-8")
        if path.endswith(".py"):
            compile(text, path, "exec", dont_inherit=True)
        elif path.endswith(".json"):
            json.loads(text)
        elif path.endswith(".toml"):
            tomllib.loads(text)
        elif path.endswith((".ini", ".cfg")):
            configparser.ConfigParser(interpolation=None).read_string(text, path)
    except configparser.Error as e:
        return " ".join(e.message.split())
    except SyntaxError as e:
        return f"{e.msg} at line {e.lineno}"
    except json.JSONDecodeError as e:
        return f"{e.msg} at line {e.lineno}"
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as e:
        return str(e)
    return ""


def _rewritten(old: bytes | None, new: bytes) -> bool:
    """Most of the file's lines are new: written from memory (a targeted edit keeps the rest as it was)."""
    if old is None:
        return False
    old_lines, new_lines = old.splitlines(), new.splitlines()
    kept = sum(
        block.size
        for block in difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_matching_blocks()
    )
    return kept < len(old_lines) / 2


def _shows(value: str, output: str) -> bool:
    """Does the output hold this number (as a number, not inside another; a unit may follow it: 56K, 3ms)?"""
    return re.search(rf"(?<![\w.]){re.escape(value)}(?![\d_]|\.\d)", output) is not None


def _bare_test_file(command: str, files: dict[str, bytes]) -> str:
    """The file a bare interpreter runs, when it only defines pytest-style test functions (so nothing calls them;
    "" otherwise)."""
    m = re.search(r"\bpython3?\s+([A-Za-z0-9_./-]+\.py)\b", command)
    if not m or TEST_RUNNER.search(command):
        return ""
    name = os.path.normpath(m.group(1))
    text = files.get(name, b"").decode("utf-8", "replace")
    return name if _TEST_FUNCTION.search(text) and not _MAIN.search(text) else ""


def _no_tests_run(command: str, files: dict[str, bytes]) -> str:
    """A note for a bare interpreter run of a file of pytest-style test functions: nothing called them."""
    name = _bare_test_file(command, files)
    return (
        (
            f"Note: that ran no test. {name} only defines test functions, and only a test runner calls them: "
            f"run `python3 -m pytest {name}`."
        )
        if name
        else ""
    )


def _program(command: str) -> str:
    """What a command runs: its program, or an interpreter and its script (``python3 greet.py``)."""
    words = _normal(command).split()
    if not words:
        return ""
    return " ".join(words[:2]) if words[0] in _INTERPRETERS and len(words) > 1 else words[0]


def _normal(command: str) -> str:
    return re.sub(r"\bpython\b(?!3)", "python3", " ".join(command.split()))


def _looks_runnable(command: str, cwd: Path) -> bool:
    """A command (its program a script of the workspace or a test runner), not a name or a value in backticks."""
    words = command.split()
    if not words:
        return False
    if words[0] in ("pytest", "make", "npm", "cargo", "go", "tox"):
        return True
    return words[0] in _INTERPRETERS and len(words) > 1 and (cwd / words[1]).is_file()


def _the_part(command: str, pattern: re.Pattern[str]) -> str:
    """The part of a chained command that matches (``sed -i … && python3 test_x.py`` → ``python3 test_x.py``):
    the edits before it must not run twice."""
    if not looks_like_edit(command):
        return command
    parts = [p.strip() for p in re.split(r"&&|\|\||;|\n", command)]
    return next((p for p in reversed(parts) if pattern.search(p)), command)

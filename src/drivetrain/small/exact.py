"""The fix of a script that prints a line like the one the task quotes but not exactly it, found by running it.

A small model told "line 12 prints 'Total orders:  4', the task wants 'Total orders: 4'" often answers that it
fixed it and changes nothing. The harness can find the change itself, from the script and its run alone: the
script is run once with ``print`` recorded (which line printed what), the printed line is compared with the
quoted one, and the difference is made in the source line that printed it, where that text stands in the source
(a literal, the constant part of an f-string): the changed middle as one piece, else each changed piece where it
stands. A second version also removes every other ``print`` the run made, for a task that wants that line alone.
Each version is run, and kept only if it prints what it promises: the quoted line among the others, or the quoted
line alone (a print of several values is first made the same print of one f-string, so text that only the
separator puts in the output stands in the line). The model is then made to choose one (``WorkChecks._fixes``);
which one the task wants, it reads.

Every run goes through the check's runner: in a run, the harness's own Bash call (audited, sandboxed).
"""

from __future__ import annotations

import ast
import difflib
import json
from typing import Awaitable, Callable

from drivetrain.small.codeact import to_command

Runner = Callable[[str], Awaitable[tuple[int | None, str]]]  # a command -> (exit code or None if not run, output)
MARK = "@@drivetrain-prints@@"
NEAR = 0.6  # how alike the printed and the quoted line must be for the one to be the other gone wrong
_MAX_CONTEXT = 40

# The script, run from its source as ``python3 SCRIPT`` would run it (``__main__``, its own file name), with each
# print of its own recorded as (line, text); the records follow its output after MARK.
_TRACE = """import builtins, json, sys
path, src, records, real = {path!r}, {src!r}, [], builtins.print
def traced(*args, sep=" ", end="\\n", file=None, flush=False):
    frame = sys._getframe(1)
    if (file is None or file is sys.stdout) and frame.f_code.co_filename == path:
        records.append((frame.f_lineno, (" " if sep is None else sep).join(map(str, args))))
    real(*args, sep=sep, end=end, file=file, flush=flush)
builtins.print, sys.argv = traced, [path]
try:
    exec(compile(src, path, "exec"), {{"__name__": "__main__", "__file__": path}})
finally:
    real({mark!r} + json.dumps(records))
"""


def _run_source(path: str, src: str) -> str:
    """The command that runs ``src`` as the script at ``path`` (without writing it anywhere)."""
    return to_command("python", f"import sys\nsys.argv = [{path!r}]\nexec(compile({src!r}, {path!r}, 'exec'), "
                                f"{{'__name__': '__main__', '__file__': {path!r}}})")


async def repairs(run: Runner, path: str, src: str, quoted: str) -> list[str]:
    """Versions of the script ``path`` (source ``src``) that print ``quoted`` exactly: the near line fixed, then
    also with the other prints gone. Empty when no print of it is near ``quoted``, or no version checks out."""
    code, output = await run(to_command("python", _TRACE.format(path=path, src=src, mark=MARK)))
    if code is None or MARK not in output:
        return []
    try:
        records = [(int(n), str(t)) for n, t in json.loads(output.rsplit(MARK, 1)[1].strip())]
    except (ValueError, TypeError):
        return []
    near = [(n, t) for n, t in records if t != quoted and difflib.SequenceMatcher(None, t, quoted).ratio() >= NEAR]
    if not near or any(t == quoted for _, t in records):
        return []
    line_no, printed = max(near, key=lambda r: difflib.SequenceMatcher(None, r[1], quoted).ratio())
    lines = src.splitlines(keepends=True)
    source_line = lines[line_no - 1]
    fixed_line = _patched(source_line, printed, quoted)
    if fixed_line is None and (as_one := _one_string(source_line)) is not None:
        fixed_line = _patched(as_one, printed, quoted)  # print("Done:", n, "users", ""): the space is sep's
    if fixed_line is None:
        return []
    fixed = "".join(lines[:line_no - 1] + [fixed_line] + lines[line_no:])
    alone = _without_statements(fixed, {n for n, _ in records if n != line_no})
    out = []
    for version, wants in ((fixed, None), (alone, quoted)):
        if version is None or version in out:
            continue
        code, output = await run(_run_source(path, version))
        printed_lines = output.rstrip("\n").split("\n")
        if code == 0 and (printed_lines == [quoted] if wants else quoted in printed_lines):
            out.append(version)
    return out


def _patched(source_line: str, printed: str, quoted: str) -> str | None:
    """``source_line`` with the difference between ``printed`` and ``quoted`` made where that text stands in it:
    the changed middle as one piece, else each changed piece alone (``[OK] {n} users.`` → ``[ok] {n} users``, where
    the value between them is computed), each widened by the text around it until it occurs in the line once."""
    p = 0
    while p < min(len(printed), len(quoted)) and printed[p] == quoted[p]:
        p += 1
    s = 0
    while s < min(len(printed), len(quoted)) - p and printed[-1 - s] == quoted[-1 - s]:
        s += 1
    whole = _patch_piece(source_line, printed, p, len(printed) - s, quoted[p:len(quoted) - s], 0, len(printed))
    if whole is not None:
        return whole
    pieces = [op for op in difflib.SequenceMatcher(None, printed, quoted, autojunk=False).get_opcodes()
              if op[0] != "equal"]
    if len(pieces) < 2:
        return None
    line = source_line
    for k in range(len(pieces) - 1, -1, -1):  # right to left: the text left of a piece is still as printed
        _, i1, i2, j1, j2 = pieces[k]
        lo = pieces[k - 1][2] if k else 0  # its context stops at the pieces beside it
        hi = pieces[k + 1][1] if k + 1 < len(pieces) else len(printed)
        line = _patch_piece(line, printed, i1, i2, quoted[j1:j2], lo, hi)
        if line is None:
            return None
    return line


def _patch_piece(line: str, printed: str, i1: int, i2: int, new: str, lo: int, hi: int) -> str | None:
    """``line`` with ``printed[i1:i2]`` made ``new``, found with as little of the text around it (within
    ``printed[lo:hi]``) as makes it occur in the line exactly once."""
    for total in range(_MAX_CONTEXT):
        for left in range(min(total, i1 - lo) + 1):
            right = total - left
            if right > hi - i2:
                continue
            before, after = printed[i1 - left:i1], printed[i2:i2 + right]
            snippet = before + printed[i1:i2] + after
            if snippet and line.count(snippet) == 1:
                return line.replace(snippet, before + new + after)
    return None


def _one_string(source_line: str) -> str | None:
    """A ``print`` of several values as the same ``print`` of one f-string (``print("n =", n)`` →
    ``print(f'n = {n}')``), so that text which only the separator puts in the output stands in the line."""
    indent = source_line[:len(source_line) - len(source_line.lstrip())]
    try:
        [statement] = ast.parse(source_line.strip()).body
    except (SyntaxError, ValueError):
        return None
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print" and call.args
            and not any(isinstance(a, ast.Starred) for a in call.args)):
        return None
    sep = next((k.value for k in call.keywords if k.arg == "sep"), ast.Constant(" "))
    if not isinstance(sep, ast.Constant) or not isinstance(sep.value, str):
        return None
    parts: list[ast.expr] = []
    for i, arg in enumerate(call.args):
        if i:
            parts.append(ast.Constant(sep.value))
        if isinstance(arg, ast.JoinedStr):
            parts.extend(arg.values)
        else:
            plain = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            parts.append(arg if plain else ast.FormattedValue(arg, -1, None))
    call.args, call.keywords = [ast.JoinedStr(parts)], [k for k in call.keywords if k.arg != "sep"]
    return indent + ast.unparse(statement) + "\n"


def _without_statements(src: str, line_numbers: set[int]) -> str | None:
    """``src`` without the statements that start on ``line_numbers`` (a block left empty gets ``pass``)."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    lines = src.splitlines(keepends=True)
    for node in ast.walk(tree):
        for body in (getattr(node, f, None) for f in ("body", "orelse", "finalbody")):
            if not isinstance(body, list):
                continue
            gone = [st for st in body if isinstance(st, ast.Expr) and st.lineno in line_numbers]
            for st in gone:
                indent = lines[st.lineno - 1][:st.col_offset]
                keep = f"{indent}pass\n" if len(gone) == len(body) and st is gone[0] else ""
                lines[st.lineno - 1:st.end_lineno] = [keep] + [""] * (st.end_lineno - st.lineno)
    return "".join(lines)

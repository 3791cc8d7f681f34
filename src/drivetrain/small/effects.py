"""Work the run's own calls show was left half done, read from the workspace and the calls, not the task's words.

- A command printed a reordered or de-duplicated version of a file the task names (``sort -u f``, ``awk '!seen[$0]++'
  f``), and the file did not change: the result was shown, not written.
- A function the run put in a new file is still defined in the file it came from: a move left a copy behind.
- A call the task writes out (``checksum('falcon')``) of a function a workspace file defines was never run: what it
  returns is known only by running it.
- An import the run wrote names a module that is nowhere (no file of the workspace, not Python's own, not
  installed), or a name its workspace module does not define: the program no longer starts.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Protocol

from drivetrain.small.codeact import to_command
from drivetrain.small.fragments import TOP_DEF

HALF = 0.5  # a printed version of a file keeps at least this share of its distinct lines


class Call(Protocol):
    command: str
    failed: bool
    output: str


def shown_not_written(
    named: Sequence[str], before: dict[str, bytes], now: dict[str, bytes], calls: Sequence[Call]
) -> list[str]:
    """A named file unchanged by the run, whose reordered or de-duplicated lines a command printed."""
    out = []
    for name in named:
        if name not in before or now.get(name) != before[name]:
            continue
        lines = [ln for ln in before[name].decode("utf-8", "replace").splitlines() if ln.strip()]
        for call in calls:
            printed = [ln for ln in call.output.splitlines() if ln.strip()]
            if call.failed or name not in call.command or not _transformed(lines, printed):
                continue
            out.append(
                f"`{call.command.strip()}` printed a changed version of {name} ({len(printed)} of its "
                f"{len(lines)} lines), but {name} itself did not change. If the task asks for {name} to change, "
                f"write the result into it (to a temporary file, then move that over {name}) and show it."
            )
            break
    return out


def _transformed(lines: list[str], printed: list[str]) -> bool:
    """``printed`` is made of the file's own lines, most of them, in another order or without its repeats."""
    distinct = set(lines)
    if not printed or not set(printed) <= distinct or len(set(printed)) < HALF * len(distinct) or printed == lines:
        return False
    order = [ln for ln in dict.fromkeys(lines) if ln in set(printed)]
    reordered = list(dict.fromkeys(printed)) != order
    return reordered or (len(distinct) < len(lines) and len(set(printed)) == len(printed))


def left_behind(named: Sequence[str], before: dict[str, bytes], now: dict[str, bytes]) -> list[str]:
    """A function or class the run defined in a new .py file the task names that a file it existed in before still
    defines. (A new file the task does not name is a stray: ``checks_work.strays``.)"""
    return [
        f"{', '.join(names)} is now defined both in {path} (new) and in {old}. Code lives in one place: remove it "
        f"from {old} and import it there (`from {module} import {', '.join(names)}`), then run what uses it again."
        for path, old, names, module in _copies(named, before, now)
    ]


def _copies(
    named: Sequence[str], before: dict[str, bytes], now: dict[str, bytes]
) -> Iterator[tuple[str, str, list[str], str]]:
    """(new file, old file, the names both define, the new file's module)."""
    for path in sorted(now.keys() - before.keys()):
        if not path.endswith(".py") or path not in named:
            continue
        moved = set(TOP_DEF.findall(now[path].decode("utf-8", "replace")))
        for old in sorted(before):
            if not old.endswith(".py") or old not in now:
                continue
            was = set(TOP_DEF.findall(before[old].decode("utf-8", "replace")))
            still = sorted(moved & was & set(TOP_DEF.findall(now[old].decode("utf-8", "replace"))))
            if still:
                yield path, old, still, path.removesuffix(".py").replace("/", ".")


# a call written out in a task, in any language: a name, then parentheses (its arguments are read by ``ast``)
_CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\(([^()\n]{0,200})\)")


def named_calls(prompt: str, files: dict[str, bytes]) -> list[tuple[str, str]]:
    """(the call as the task writes it, the command that prints what it returns) for each call in the task of a
    top-level function a .py file of the workspace defines, with literal arguments (``f(3, 'a')``, not ``f(x)``)."""
    defined: dict[str, str] = {}
    for path in sorted(files):
        if path.endswith(".py") and not path.rsplit("/", 1)[-1].startswith("test_"):
            for name in TOP_DEF.findall(files[path].decode("utf-8", "replace")):
                defined.setdefault(name, path.removesuffix(".py").replace("/", "."))
    out = []
    for m in _CALL.finditer(prompt):
        name, text = m.group(1), m.group(0)
        if name not in defined or not _literal_args(m.group(2)):
            continue
        out.append((text, to_command("python", f"from {defined[name]} import {name}\nprint(repr({text}))")))
    return list(dict.fromkeys(out))


def _literal_args(args: str) -> bool:
    try:
        call = ast.parse(f"f({args})", mode="eval").body
    except SyntaxError:
        return False
    if not isinstance(call, ast.Call):  # it always is: the arguments hold no parenthesis (``_CALL``)
        return False
    try:
        for node in [*call.args, *(k.value for k in call.keywords)]:
            ast.literal_eval(node)
    except ValueError:
        return False
    return True


def dangling_imports(before: dict[str, bytes], now: dict[str, bytes]) -> list[tuple[str, str]]:
    """Top-level imports the run added to a .py file that cannot work: a module neither in the workspace, nor
    Python's own, nor installed here, nor imported anywhere before the run; or a name the workspace's module does
    not define. Each with the line it replaced, when it replaced one: (what is wrong, the module to look for with
    the workspace's own ``python3`` first — "" when the workspace's files alone show it)."""
    out = []
    known = None  # the modules imported anywhere before the run: read once, when an import needs it
    for path, content in now.items():
        if not path.endswith(".py") or before.get(path) == content:
            continue
        old = _imports(before.get(path, b""))
        for key, (module, names, line) in _imports(content).items():
            if key in old:
                continue
            where = f"{path} line {line} imports {', '.join(names) + ' from ' if names else ''}{module}"
            source = _module_file(module, now)
            if source is None:
                if known is None:
                    known = {m for c in before.values() for m, _, _ in _imports(c).values()}
                if module.split(".")[0] not in known and not _installed(module):
                    out.append(
                        (
                            f"{where}, but there is no {module.replace('.', '/')}.py here, and no installed "
                            f"module {module}{_replaced(before.get(path, b''), content, line)}."
                            f"{_defined_where(names, now)}",
                            module,
                        )
                    )
                continue
            defined = _top_names(now[source])
            if "*" not in defined and (missing := [n for n in names if n != "*" and n not in defined]):
                out.append(
                    (
                        f"{where}, but {source} does not define {', '.join(missing)}"
                        f"{_replaced(before.get(path, b''), content, line)}."
                        f"{_defined_where(missing, now)}",
                        "",
                    )
                )
    return out


def _defined_where(names: Sequence[str], files: dict[str, bytes]) -> str:
    """Where each name is defined in the workspace (a def, a class), or that no file defines it."""
    said = []
    for name in names:
        where = [
            p for p, c in files.items() if p.endswith(".py") and name in TOP_DEF.findall(c.decode("utf-8", "replace"))
        ]
        said.append(f" {name} is defined in {', '.join(where)}." if where else f" No file here defines {name}.")
    return "".join(said)


def _imports(content: bytes) -> dict[tuple[str, tuple[str, ...]], tuple[str, tuple[str, ...], int]]:
    """The top-level absolute imports of a .py file: (module, names) -> (module, names, line)."""
    try:
        tree = ast.parse(content)
    except (SyntaxError, ValueError):
        return {}
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = tuple(a.name for a in node.names)
            out[(node.module, names)] = (node.module, names, node.lineno)
        elif isinstance(node, ast.Import):
            for a in node.names:
                out[(a.name, ())] = (a.name, (), node.lineno)
    return out


def _module_file(module: str, files: dict[str, bytes]) -> str | None:
    base = module.replace(".", "/")
    return next((p for p in (f"{base}.py", f"{base}/__init__.py") if p in files), None)


def _installed(module: str) -> bool:
    top = module.split(".")[0]
    if top in sys.stdlib_module_names:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return True  # cannot tell: not flagged


def _top_names(content: bytes) -> set[str]:
    """What a module defines at its top level: defs, classes, assignments, imports (a name may be re-exported)."""
    try:
        tree = ast.parse(content)
    except (SyntaxError, ValueError):
        return {"*"}  # cannot tell: every name counts as defined
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            return {"*"}  # names defined under a condition: not read, so not judged
    return names


def _replaced(old: bytes, new: bytes, line: int) -> str:
    """What a message about line ``line`` of ``new`` adds: the line of ``old`` it took the place of, when a change
    replaced lines there (``" (before your change that line was `…`)"``), else nothing."""
    old_lines = old.decode("utf-8", "replace").splitlines()
    new_lines = new.decode("utf-8", "replace").splitlines()
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes():
        if op == "replace" and j1 < line <= j2:
            return f" (before your change that line was `{old_lines[min(i1 + line - 1 - j1, i2 - 1)].strip()}`)"
    return ""

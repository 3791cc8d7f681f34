"""The checks of a run's work: each reads ``RunFacts`` and says what is not done, in words the model can act on.

Each is a function of the facts alone (no check reads what another concluded); ``small/checks.py`` declares them, in
order, as ``Check`` objects. The files and commands a task names are read as it writes them (ASCII in any language);
no check reads an English word of the task or the answer.
"""

from __future__ import annotations

import ast
import difflib
import re
from pathlib import Path, PurePath

from drivetrain.small.codeact import file_block, to_block
from drivetrain.small.effects import dangling_imports, left_behind, shown_not_written
from drivetrain.small.facts import NUMBER, TEST_CMD, Call, RunFacts, line_count
from drivetrain.small.fragments import TOP_DEF, definitions
from drivetrain.small.prompts import EXTENSIONS, FILE_NAME
from drivetrain.small.readings import (
    _INTERPRETERS,
    _fence,
    _indent_hint,
    _looks_runnable,
    _parse_error,
    _printed_by,
    _set_apart,
    _shows,
    _the_part,
)

CODE_FILES = (".py", ".js", ".ts", ".sh", ".rb", ".go", ".rs", ".c", ".h", ".cpp", ".java", ".html", ".css", ".sql")
# A value left as a template's slot: <total>, <总数>, {count}, ${result} (its letters in any script)
_PLACEHOLDER = re.compile(r"<(?!/)[^\W\d][\w -]{0,24}>|\$?\{[^\W\d]\w{0,24}\}")
_HTML_TAGS = frozenset(
    ("html", "head", "body", "div", "span", "p", "a", "b", "i", "ul", "li", "ol", "br", "hr", "table", "tr", "td")
    + ("th", "title", "script", "style", "pre", "code", "h1", "h2", "h3", "em", "strong")
)
CITATION = re.compile(rf"(?<![A-Za-z0-9_/.-])((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_-]+\.{EXTENSIONS}):(\d+)(?![A-Za-z0-9_])")
_MORE_LINES = re.compile(r"(?:\s*,\s*\d+(?![\w:.]))+")  # ", 13, 20" after a path:line (not ", 13.5" or ", 2:")
# Literals the task quotes, in any language's quotation marks: an exact output it expects
_QUOTED = re.compile(
    r'"([^"\n]{1,200})"|“([^”\n]{1,200})”|「([^」\n]{1,200})」|『([^』\n]{1,200})』|'
    r"(?<![A-Za-z0-9])'([^'\n]{1,200})'(?![A-Za-z0-9])|`([^`\n]{1,200})`"
)
_TOKEN = re.compile(r"[A-Za-z0-9_.:/-]+")  # one name, number or path: no line of output by itself
_SCRIPT_RUN = re.compile(r"(?:python3?|node|bash|sh)\s+[\w./-]+(?:\s+[\w./=-]+)*")


# -- the task's outputs


async def missing_outputs(f: RunFacts) -> list[str]:
    """A file the task asks for exists and is not empty; when the model's code or answer already holds it, the block
    that writes it goes back with the failure."""
    out = []
    for name in f.outputs:
        if not (not f.now[name].strip() if name in f.now else not (f.cwd / name).exists()):
            continue
        what = (
            f"{name} is empty. Write the result the task asks for into it."
            if name in f.now
            else f"The task asks for {name}, but it does not exist. Create it with the right content."
        )
        out.append(what + _hint(f, name))
    return out


def _hint(f: RunFacts, name: str) -> str:
    known = _from_script(f, name) or _from_new_file(f, name) or _from_answer(f, name)
    if not known:
        fix = cite_into(f, name)
        return f" Your search found them; this writes them as path:line:\n{_fence(fix)}" if fix else ""
    why, content = known
    if f.file_blocks:  # the form the model is made to write a missing file in (models/codeact.py)
        return f" {why}\n{file_block(name, content)}"
    lines = content.splitlines()
    command = f"echo {lines[0]} > {name}" if len(lines) == 1 else f"printf '%s\\n' {' '.join(lines)} > {name}"
    return f" {why}\n{_fence(command)}"


def _from_script(f: RunFacts, name: str) -> tuple[str, str] | None:
    """A .py file asked for, and the model's last python block only defined functions (it ran, and wrote nothing):
    the same code, in the file (a block naming it; see models/fragments.py)."""
    last = next((c for c in reversed(f.calls) if c.command), None)
    if not f.file_blocks or not name.endswith(".py") or last is None or last.failed:
        return None
    lang, code = to_block(last.command)
    if lang != "python" or not definitions(code):
        return None
    return "Your last python block only defined it, and wrote no file. This writes it:", code


def _from_new_file(f: RunFacts, name: str) -> tuple[str, str] | None:
    """A .py file asked for, and the run created one other .py file that only defines functions or classes: the
    code went to the wrong file."""
    if not f.file_blocks or not name.endswith(".py"):
        return None
    made = [
        (p, c.decode("utf-8", "replace"))
        for p, c in f.now.items()
        if p not in f.before and p != name and p.endswith(".py")
    ]
    if len(made) != 1 or not definitions(made[0][1]):
        return None
    return f"You wrote the code to {made[0][0]}, not {name}. This writes it:", made[0][1].rstrip("\n")


def places(text: str) -> list[str]:
    """The path:line places a text cites, a path's further lines written after it included ("billing.py:9, 13" is
    billing.py:9 and billing.py:13: the 1.5B listed four places so, and a file written from only the first lost two)."""
    out = []
    for m in CITATION.finditer(text):
        out.append(f"{m.group(1)}:{m.group(2)}")
        more = _MORE_LINES.match(text, m.end())
        out += [f"{m.group(1)}:{n}" for n in re.findall(r"\d+", more.group(0))] if more else []
    return out


def _from_answer(f: RunFacts, name: str) -> tuple[str, str] | None:
    """When the answer already holds what the file should (the path:line places it cites, or the one number a
    command printed): a small model that answered often does not connect the two."""
    cited = list(dict.fromkeys(places(f.answer)))
    # the value, not the parts it came from: "18 (app.py:9, config.py:3, util.py:6)", unless the run searched for
    # places (its own grep -n): then the places are the result
    numbers = set(NUMBER.findall(CITATION.sub(" ", f.answer)))
    value = numbers.pop() if len(numbers) == 1 else ""
    if cited and (f.search() or not (value and f.computed(value))):
        return "If your answer is right, this writes it:", "\n".join(cited)
    if value and f.computed(value):
        return "If your answer is right, this writes it:", value
    return None


def cite_into(f: RunFacts, name: str) -> str:
    """The model's own last search (a ``grep -n``), cut to path:line and written into ``name`` ("" when it made
    none)."""
    search = f.search()
    if not search:
        return ""
    # the list is not searched while it is written (grep -rn . read the half-written TODO_LIST.txt)
    return f"grep --exclude={PurePath(name).name} {search.removeprefix('grep ')} | cut -d: -f1,2 > {name}"


# -- what the run wrote


async def placeholders(f: RunFacts) -> list[str]:
    """A value the run wrote as a template's slot (``<total>``, ``{count}``), or a function it left without a body
    (``pass``, ``raise NotImplementedError``): the work is not done."""
    out = []
    for path, content in f.changed.items():
        text, was = content.decode("utf-8", "replace"), f.before.get(path, b"").decode("utf-8", "replace")
        if path.endswith(".py"):
            if stubs := sorted(_stubs(text) - _stubs(was)):
                out.append(
                    f"In {path}, {', '.join(stubs)} has no body (a stub) instead of real code. Write the code, or "
                    "remove what you added if the task does not need it."
                )
            continue
        if path.endswith(CODE_FILES):  # in code, {n} and <x> are code (a template, a comparison)
            continue
        for m in _PLACEHOLDER.finditer(text):
            inner = m.group(0).strip("<>{}$ ").lower()
            if m.group(0) in was or (
                m.group(0).startswith("<")
                and (inner in _HTML_TAGS or (not path.endswith((".txt", ".md", ".csv")) and len(text) > 200))
            ):
                continue  # (one the file had before is not the run's)
            out.append(
                f"{path} contains the placeholder {m.group(0)!r} instead of a real value. Compute the value with a "
                "command and write it."
            )
            break
    return out


def _stubs(source: str) -> set[str]:
    """The functions of a Python file whose body is only a docstring and ``pass`` or ``raise NotImplementedError``
    (``...`` is left alone: a Protocol's or an overload's body)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.decorator_list:
            continue
        body = node.body[1:] if isinstance(node.body[0], ast.Expr) and len(node.body) > 1 else node.body
        if len(body) == 1 and (
            isinstance(body[0], ast.Pass)
            or (isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0]))
        ):
            out.add(node.name)
    return out


async def missing_paths(f: RunFacts) -> list[str]:
    """A file the run wrote that holds just a path (one line, with a ``/`` or a file name's extension) names a file
    that exists: in the folder, or, if absolute, on the machine."""
    out = []
    for path, content in f.changed.items():
        value = content.decode("utf-8", "replace").strip()
        if not (
            re.fullmatch(r"[\w./-]{1,200}", value)
            and re.search(r"[A-Za-z]", value)
            and (FILE_NAME.fullmatch(PurePath(value).name) or "/" in value)
        ):
            continue  # not a path: a value, a URL, a list, a date
        if not ((f.cwd / value).exists() if not value.startswith("/") else Path(value).exists()):
            near = [p for p in f.now if PurePath(p).name == PurePath(value).name]
            where = f" (the folder has {', '.join(near[:3])}: a path from the folder has no leading /)" if near else ""
            out.append(
                f"{path} holds {value!r}, but there is no such file{where}. Write the path of a file that exists."
            )
    return out


async def uncomputed(f: RunFacts) -> list[str]:
    """A number the run wrote alone in a file is one a command printed, or the count of the lines one printed, or one
    the task gives: else it was made up (asked how many ERROR lines, the 1.5B saw six and wrote 4)."""
    out = []
    for path, value in f.written_values.items():
        if not _shows(value, f.writers.get(path, "")) or f.computed(value) or _shows(value, f.prompt):
            continue  # a command wrote it (wc -l < a.py > total.txt), or a command printed it
        last = next((c for c in reversed(f.calls) if c.command and not c.failed and c.output.strip()), None)
        seen = f" (`{last.command.strip()}` printed {line_count(last.output)} lines)" if last else ""
        out.append(
            f"You wrote {value} to {path}, but no command of this run printed {value}, or {value} "
            f"lines{seen}. Compute it with a command that prints the number, then write that."
        )
    return out


async def unread(f: RunFacts) -> list[str]:
    return [
        f"You rewrote {p} without looking at its content first, so what you wrote may be invented. "
        f"Show it (cat -n {p}), check your change against what was there, and fix it if needed."
        for p in f.unread
        if p in f.changed
    ]


async def broken(f: RunFacts) -> list[str]:
    """A .py, .json or .toml file the run changed no longer parses (and did before): the error says where."""
    out = []
    for path, content in f.changed.items():
        error = _parse_error(path, content)
        if error and not (path in f.before and _parse_error(path, f.before[path])):
            out.append(
                f"{path} no longer parses after your change: {error}. Show it (cat -n {path}) and fix that line."
            )
    return out


async def renamed(f: RunFacts) -> list[str]:
    """A rename the run began is finished: the old name is gone from the workspace's text files."""
    return [
        f"You renamed {old} to {new}, but {old} still occurs at {', '.join(places[:8])}"
        f"{' …' * (len(places) > 8)}. This changes every one of them:\n{_fence(fix)}\nThen check again."
        for old, new, places, fix in f.renames
    ]


async def misnamed(f: RunFacts) -> list[str]:
    """The run gave a name the task names to a defined name the task does not name, while the defined name the task
    names is still there: it renamed another function than the one the task means."""
    asked, defined, pairs = f.swaps
    meant = sorted((asked & defined) - {new for _, new in pairs})
    text = "\n".join(c.decode("utf-8", "replace") for c in f.now.values())
    left = [m for m in meant if re.search(rf"(?<!\w){re.escape(m)}(?!\w)", text)]
    out = []
    for new in dict.fromkeys(new for old, new in pairs if new in asked and old in defined and old not in asked):
        olds = [old for old, n in pairs if n == new and old in defined and old not in asked]
        if left:
            them, were = ("them", "they were") if len(olds) > 1 else ("it", "it was")
            out.append(
                f"You renamed {' and '.join(olds)} to {new}, but the task does not name {them}: it names "
                f"{', '.join(left)}, which is still there. Put {' and '.join(olds)} back as {were}, and make "
                f"the change the task asks for to {', '.join(left)}."
            )
    return out


async def strays(f: RunFacts) -> list[str]:
    """A new .py file the task does not name defines what an existing file defines: the change went to a new file
    instead of that one."""
    out = []
    for path in f.now.keys() - f.before.keys():
        if not path.endswith(".py") or path in f.prompt:
            continue
        names = set(TOP_DEF.findall(f.now[path].decode("utf-8", "replace")))
        for old, content in f.before.items():
            common = (
                sorted(names & set(TOP_DEF.findall(content.decode("utf-8", "replace"))))
                if old.endswith(".py") and old in f.now
                else []
            )
            if common:
                how = f" (a block naming {old})" if f.file_blocks else ""
                out.append(
                    f"You created {path}, but {', '.join(common)} is defined in {old}: the task is "
                    f"about that file. Make the change in {old}{how}, and remove {path}."
                )
                break
    return out


async def half_done(f: RunFacts) -> list[str]:
    """A move that left a copy behind; a named file whose changed version a command only printed (effects.py)."""
    out = left_behind(f.named_files, dict(f.before), dict(f.now))
    return out + (shown_not_written(f.named_files, dict(f.before), dict(f.now), f.calls) if not f.changed else [])


async def unchanged(f: RunFacts) -> list[str]:
    """The run's own calls meant a change (an Edit whose new text the file already held), and no file changed."""
    if f.changed:
        return []
    return [
        f"Your change to {p} wrote what it already held, and this run changed no file. If the task asks "
        f"for a change, write the lines of {p} as they must be (not as they are now)."
        for p in dict.fromkeys(c.unchanged for c in f.calls if c.unchanged)
    ]


# -- commands run again


async def dangling(f: RunFacts) -> list[str]:
    """Imports the run wrote that cannot work (effects.py); a module this interpreter lacks is looked for with the
    workspace's ``python3`` before it is called missing."""
    out = []
    for text, module in dangling_imports(dict(f.before), dict(f.now)):
        if module:
            code, printed = await f.run(
                f"python3 -c 'import importlib.util as u; print(u.find_spec(\"{module.split('.')[0]}\") is None)'"
            )
            if code != 0 or printed.strip() != "True":
                continue  # it is there (or cannot tell): not said
        out.append(text)
    return out


async def tests(f: RunFacts) -> list[str]:
    """Once the run has changed files, or when their last run failed, the tests the model ran pass when run again;
    tests the task names (a test file or runner: ASCII in any language) were run at all."""
    if not f.ran_tests:
        if TEST_CMD.search(f.prompt) and f.has_tests:
            named = next((f" (`{c}`)" for c in f.named_commands if TEST_CMD.search(c)), "")
            return [f"The task is about tests, but you have not run them. Run them{named} and make sure they pass."]
        return []
    last = f.ran_tests[-1]
    command = _the_part(last.command, TEST_CMD)
    if not f.changed and not last.failed:
        return []
    code, output = await f.run(command)
    if code is None or code == 0:  # did not run (denied, say): nothing is known
        return []
    if not f.changed:  # a run that changed nothing may have been asked only why they fail
        return [
            f"The test command `{command}` still fails (exit code {code}), and this run changed no file:\n"
            f"{output[-1500:]}\nIf the task is to make the tests pass, change the code they test (not the "
            "tests) and run them again. If it only asks about them, answer that they fail, and why."
        ]
    return [f"The test command `{command}` fails now (exit code {code}):\n{output[-1500:]}"]


async def named_commands(f: RunFacts) -> list[str]:
    """Once the run has changed files, a command the task names must work: run again if the model ran it, asked for
    if it never did. (A run that changed nothing may have been asked why it fails.)"""
    out = []
    for command in f.named_commands if f.changed else ():
        if TEST_CMD.search(command):
            continue  # a test run (``tests`` checks those)
        if not f.ran(command):
            out.append(f"The task names `{command}`, and you have not run it. Run it to check that it works.")
            continue
        code, output = await f.run(command)
        if code is not None and code != 0:
            words = command.split()
            fix = f"Change {words[1]} itself (the file)" if words[0] in _INTERPRETERS else "Fix the cause"
            hint = _indent_hint(output, f.cwd)
            out.append(
                f"`{command}` fails now (exit code {code}):\n{output[-1500:]}\n{hint + chr(10) * bool(hint)}"
                f"{fix} so that it works, then run `{command}` again."
            )
    return out


def quoted_lines(f: RunFacts) -> list[str]:
    """The literals the task quotes (in quotation marks of any language, or set on a line of their own after a
    colon) that are neither a command nor a file name: a line some command must print."""
    quoted = [q for m in _QUOTED.finditer(f.prompt) for q in m.groups() if q and q.strip()] + _set_apart(f.prompt)
    return [q for q in dict.fromkeys(quoted) if not _looks_runnable(q, f.cwd) and not FILE_NAME.fullmatch(q)]


def output_like(quoted: list[str]) -> list[str]:
    """Those that read as a line of output: a name or a number in quotes (`load`, `8080`) is what a rename or a
    setting names, not what a script must print."""
    return [q for q in quoted if not _TOKEN.fullmatch(q)]


def printing_commands(f: RunFacts, quoted: list[str]) -> list[str]:
    """The commands that should print a quoted line: the ones the task names that the model ran, else the script
    the model last ran, else the Python scripts the task names that print (for a literal that reads as output)."""
    commands = (
        [c for c in f.named_commands if not TEST_CMD.search(c) and f.ran(c)]
        or [c.command.strip() for c in f.calls[-1:] if _SCRIPT_RUN.fullmatch(c.command.strip())]
        or [
            f"python3 {n}"
            for n in f.named_files
            if n.endswith(".py") and b"print(" in f.before.get(n, b"") and output_like(quoted)
        ]
    )
    return list(dict.fromkeys(commands))[:2]  # a script the task names twice: once


async def exact_output(f: RunFacts) -> list[str]:
    """The task quotes a line a command must print: the command is run again, and an output line like the quoted one
    but not exactly it goes back with both (an extra ``!``, a missing space)."""
    quoted = quoted_lines(f)
    out = []
    for command in printing_commands(f, quoted) if quoted else ():
        code, output = await f.run(command.strip())
        if code is None:
            continue
        lines = output.splitlines()
        for q in quoted:
            if q in lines:
                continue
            near = max(lines, key=lambda ln: difflib.SequenceMatcher(None, q, ln).ratio(), default=None)
            if near is not None and difflib.SequenceMatcher(None, q, near).ratio() >= 0.6:
                printed = near if len(lines) == 1 else "\n".join(lines[:10])
                where = _printed_by(command, near, dict(f.now))
                out.append(
                    f"The task asks for exactly {q!r}, but `{command.strip()}` prints {printed!r}.{where} "
                    "Make it print exactly that line, then run it again."
                )
    return out


async def unrun_calls(f: RunFacts) -> list[str]:
    """A call the task writes out that the run never made is made by the harness (its own Bash call: the policy
    decides, the audit log records), and what it printed goes back: told to run it, the model often did not."""
    out = []
    for text, command in f.unrun_calls:
        code, output = await f.run(command)
        if code is None:  # not run (denied, or waiting for a person): the model is asked to
            out.append(f"The task writes out the call {text}. Run it to see what it returns:\n{_fence(command)}")
            continue
        f.made.append(Call(f"{command}\n{output}", command, code != 0, output))  # the run has seen it now
        printed = output.strip()[-1500:] or "(nothing)"
        out.append(
            f"The task writes out the call {text}, and no command of yours made it. Run here, it gives:\n"
            f"{_fence(command)}\nExit code {code}; it printed:\n{printed}\nUse what it printed."
        )
    return out

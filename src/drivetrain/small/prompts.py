"""The small profile's prompts: a fixed system prompt (cacheable), and the context that goes with the task."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from drivetrain.prompts import workspace_context

# A file name as a task writes it: "sales.csv", "src/app.py" (checks.py reads outputs and inputs with it too).
EXTENSIONS = r"(?:txt|md|json|csv|tsv|py|ya?ml|toml|ini|cfg|log|sh|js|ts|html|css|xml|sql|rs|go|c|h|cpp|java|rb|out)"
# ASCII only: a name is ASCII in any language, and the text around it may not be ("把结果写入total.txt").
FILE_NAME = re.compile(rf"(?<![A-Za-z0-9_/.-])((?:[A-Za-z0-9_-]+/)*[A-Za-z0-9_-]+\.{EXTENSIONS})(?![A-Za-z0-9_])")


def named_files(
    cwd: Path,
    prompt: str,
    readable: Callable[[str], bool] = lambda _: True,
    files: int = 3,
    lines: int = 30,
    chars: int = 2000,
) -> str:
    """The first lines of the existing text files the task names that ``readable`` (the permission policy's
    answer for a Read) lets through, numbered as ``cat -n`` numbers them: what an @-mention attaches. A small
    model otherwise spends its first turn on ``ls`` and then guesses at what it has not seen."""
    out = []
    for name in _names_in(cwd, prompt):
        path = cwd / name
        if not readable(name):
            continue
        try:
            if not path.is_file() or path.stat().st_size > 1_000_000:
                continue
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if not text.strip() or "\x00" in text:
            continue
        all_lines = text.splitlines()
        shown, size = [], 0
        for i, line in enumerate(all_lines[:lines], 1):
            size += len(line) + 8
            if size > chars:
                break
            shown.append(f"{i:6}\t{line}")
        more = f"\n  … {len(all_lines) - len(shown)} more lines" if len(shown) < len(all_lines) else ""
        out.append(f"$ cat -n {name}\n" + "\n".join(shown) + more)
        if len(out) == files:
            break
    return "\n\n".join(out)


def _names_in(cwd: Path, prompt: str) -> list[str]:
    """The file names in the task, in the order it names them: those with a known extension, and the names of the
    folder's own files whatever they end in (``app.env``, ``Makefile``), standing as a word in any language."""
    found = {m.start(1): m.group(1) for m in FILE_NAME.finditer(prompt)}
    try:
        own = [p.name for p in cwd.iterdir() if p.is_file()]
    except OSError:
        own = []
    for name in own:
        m = re.search(rf"(?<![A-Za-z0-9_/.-]){re.escape(name)}(?![A-Za-z0-9_])", prompt)
        if m and m.start() not in found:
            found[m.start()] = name
    return list(dict.fromkeys(found[k] for k in sorted(found)))


def task_context(cwd: Path, prompt: str, show: bool = True, readable: Callable[[str], bool] = lambda _: True) -> str:
    """What goes with the task in the small profile: the workspace, and (``show``) the files it names."""
    shown = named_files(cwd, prompt, readable) if show else ""
    return workspace_context(cwd) + (f"\n\nThe files the task names:\n{shown}" if shown else "")


# The small profile's prompt: fixed (the workspace listing goes in the first user message instead), so
# its KV state can be cached on disk, and short, with one worked example in the reply format itself.
SMALL_CODEACT = """You are a coding agent. You work in a folder on the user's computer by writing code that \
is run for you.

Each reply is ONE of these:
- one short line saying what you do next, then ONE code block: ```bash (shell commands) or ```python \
(a script). It is run in the working folder and you get its output.
- when the task is done and checked: DONE: followed by the answer for the user (the result, with the \
values and files).

Rules:
- First look at what the task is about (ls, cat -n FILE, grep -n), then act on what you saw.
- Compute values with code (wc -l, grep -c, python); never guess them or count in your head.
- When the task asks you to write something to a file, write just what it asks for (a value, not a whole \
command output; never a placeholder), then show the file to check it.
- To write a file, put its name after the block's language: ```python greet.py. A new file gets the block \
as its content. In an existing file (show it with cat -n first; never invent its content) each function in \
the block replaces the function of that name and each other line the line most like it; the rest stays.
- No editors (nano, vi), no sudo, nothing that waits for input.
- After changing code, run it or its tests. Say tests pass only after running them.
- Never repeat a command that already gave its result. If a command is denied, do it another way.
- DONE: gives the answer with the values you found (numbers, names, file:line), in the language of the \
task, saying what you did ("I wrote …").

Three examples of how a task goes.

User: How many of the .md files mention "deprecated"? Write the number to result.txt and tell me.
Assistant: List the .md files that mention it.
```bash
grep -l deprecated *.md
```
User: Error:
Permission denied: `grep -l deprecated *.md`: deny (rule Bash(grep:*) from settings)
It will be denied again (with sudo too): do it another way.
Assistant: grep is denied; find them with python instead.
```python
import glob
print([f for f in sorted(glob.glob("*.md")) if "deprecated" in open(f).read()])
```
User: Output:
['api.md', 'setup.md']
Assistant: Two files. Write the number.
```text result.txt
2
```
User: Created result.txt (1 line):
   1| 2
Assistant: DONE: 2 of the .md files mention "deprecated" (api.md, setup.md); I wrote 2 to result.txt.

User: greet.py should print "Hello, NAME!" but prints "Hi NAME". Fix it.
Assistant: Show greet.py with line numbers.
```bash
cat -n greet.py
```
User: Output:
     1	import sys
     2
     3
     4	def welcome(name):
     5	    return "Hi " + name
     6
     7
     8	print(welcome(sys.argv[1]))
Assistant: Fix the welcome function in greet.py.
```python greet.py
def welcome(name):
    return "Hello, " + name + "!"
```
User: Changed greet.py (- old line, + new line):
-   5|     return "Hi " + name
+   5|     return "Hello, " + name + "!"
Assistant: Run it to check.
```bash
python3 greet.py Ann
```
User: Output:
Hello, Ann!
Assistant: DONE: Fixed greet.py line 5: it now prints "Hello, NAME!" (checked: `python3 greet.py Ann` prints \
"Hello, Ann!").

User: Where is parse_date defined? Answer as path:line.
Assistant: Search for its definition.
```bash
grep -rn "def parse_date" .
```
User: Output:
./utils/dates.py:14:def parse_date(text):
Assistant: DONE: utils/dates.py:14"""

SMALL_TOOLS = """You are a coding agent working in a folder on the user's computer. You act only through tools.

- Call one tool at a time, read its result, then decide the next step.
- Read a file before you change it; never invent file contents.
- Compute values with Bash (wc, grep -c, python3); never guess them. Write real values, never placeholders.
- After a change, run the code or its tests to check it.
- When the task is done, answer briefly with the result, without calling tools."""


def small_system_prompt(codeact: bool, example: bool) -> str:
    if not codeact:
        return SMALL_TOOLS
    return SMALL_CODEACT if example else SMALL_CODEACT.split("\n\nThree examples")[0]

"""Strong evidence that an attempt did what the task asks, read from its facts (``small/facts.py``): when one attempt
has it, no further attempt starts (``small/attempts.py``).

Besides a command that fails on the pristine copy and passes on the attempt's (read from the reruns, in
``selection.strong``), two kinds, both from the run and the workspace, in any language:

- a line the task quotes is printed, exactly, by the command that should print it, run again on the attempt's copy,
  and was not printed so on the pristine copy;
- a file the task asks for holds what its own command prints: the attempt wrote it with ``command > file``, and
  ``command`` run again on its copy prints just that (a command that holds the value itself, ``echo 51``, typed it).
"""

from __future__ import annotations

import re

from drivetrain.small.checks_work import output_like, printing_commands, quoted_lines
from drivetrain.small.facts import RunFacts, Runner


async def strong_evidence(f: RunFacts, on_base: Runner) -> str:
    """What strongly shows the attempt's work is done ("" when nothing does). ``f.run`` runs a command on the
    attempt's copy, ``on_base`` on the pristine one."""
    return await _exact_output(f, on_base) or await _own_output(f)


async def _exact_output(f: RunFacts, on_base: Runner) -> str:
    quoted = output_like(quoted_lines(f))
    for command in printing_commands(f, quoted) if quoted and f.changed else ():
        code, output = await f.run(command)
        if code != 0 or not all(q in output.splitlines() for q in quoted):
            continue
        _, before = await on_base(command)
        if not all(q in before.splitlines() for q in quoted):
            return f"`{command}` prints {quoted[0]!r} exactly"
    return ""


async def _own_output(f: RunFacts) -> str:
    for name in f.outputs:
        content = f.now.get(name, b"").decode("utf-8", "replace").strip()
        if not content:
            continue
        redirect = re.compile(rf"^(?P<cmd>[^>&;\n]+?)\s*>\s*(?:\./)?{re.escape(name)}\s*$")
        writes = [m for c in f.calls if c.command and not c.failed and (m := redirect.match(c.command.strip()))]
        if not writes or content in (command := writes[-1].group("cmd")):
            continue  # `echo 51 > total.txt` typed the value: its command only repeats it
        code, output = await f.run(command)
        if code == 0 and output.strip() == content:
            return f"{name} holds what `{command}` prints"
    return ""

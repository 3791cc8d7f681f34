"""The checks of a run's answer against its work: each reads ``RunFacts`` (``small/checks.py`` declares their order).

An answer is checked by what it cites (path:line, a quoted command, a number) against what the run wrote and what
its commands printed, never by its words: the same holds in any language.
"""

from __future__ import annotations

import os
import re
import shutil

from drivetrain.small.answer import disagreements
from drivetrain.small.checks_work import CITATION
from drivetrain.small.facts import NUMBER, RunFacts
from drivetrain.small.readings import _arithmetic, _looks_runnable, _normal, _program, _shows

# A command the answer quotes: what it says the command showed is checked against what the command printed
_QUOTED_CMD = re.compile(r"`([^`\n]{2,200})`")
_IDENT = re.compile(
    r"`([A-Za-z_][\w.]*)`|(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*_[A-Za-z0-9_]*|[a-z]+[A-Z][A-Za-z0-9_]*)(?![A-Za-z0-9_])"
)


async def mismatch(f: RunFacts) -> list[str]:
    """The value the run wrote to a file is the one its answer gives."""
    said = set(NUMBER.findall(f.answer))
    if len(said) > 3:
        return []  # an answer quoting output (dates, line numbers): which number is its result is not known
    return [
        f"You wrote {value} to {path}, but your answer says {', '.join(sorted(said))}. Find out which is "
        "right (recompute it), fix the file or the answer, then answer again."
        for path, value in f.written_values.items()
        if said and value not in said
    ]


async def unreported(f: RunFacts) -> list[str]:
    """An answer gives the value the run wrote (it only needs writing again)."""
    if NUMBER.search(f.answer):
        return []
    return [
        f"Your answer does not give the value you wrote to {path} ({value}). Answer again, with the value."
        for path, value in f.written_values.items()
    ]


async def citations(f: RunFacts) -> list[str]:
    """Each path:line the answer cites exists and mentions what the task asks about (a name it writes in code form)."""
    cited = list(dict.fromkeys(CITATION.findall(f.answer)))
    if not cited:
        return []
    texts = {p: c.decode("utf-8", "replace") for p, c in f.now.items()}
    subjects = [
        w for m in _IDENT.finditer(f.prompt) if (w := m.group(1) or m.group(2)) and any(w in t for t in texts.values())
    ]
    out = []
    for path, number in cited[:5]:
        key = os.path.normpath(path)  # ./storage.py is storage.py (grep -rn . prints it so)
        lines = texts[key].splitlines() if key in texts else None
        n = int(number)
        if lines is None:
            out.append(f"You cite {path}:{n}, but there is no file {path}. Find the right place with grep -n.")
        elif not 1 <= n <= len(lines):
            out.append(f"You cite {path}:{n}, but {path} has {len(lines)} lines. Find the right line with grep -n.")
        elif subjects and not any(s in lines[n - 1] for s in subjects):
            out.append(
                f"You cite {path}:{n}, but that line is {lines[n - 1].strip()!r}, which does not mention "
                f"{' or '.join(subjects[:3])}. Find the right line with grep -n."
            )
    return out


async def claimed(f: RunFacts) -> list[str]:
    """A command the answer quotes (its check of the result, in any language) is one the model ran, and a number the
    answer gives right after it is one the command printed: a claimed check that never ran, or printed something
    else, hides a wrong value."""
    ran = f.ran_programs()
    out = []
    for m in _QUOTED_CMD.finditer(f.answer):
        command = m.group(1).strip()
        program = _program(command)
        if not program or not (shutil.which(program.split()[0]) or _looks_runnable(command, f.cwd)):
            continue  # `total.txt`, `fetch_account`: not a command
        if program in f.denied:  # a denied program cannot have shown anything
            out.append(
                f"Your answer says what `{command}` showed, but {program} is denied here and never ran. "
                "Do not claim it: check the value another way (print the value of each part), then answer "
                "with what that showed."
            )
            continue
        same = [c for c in f.seen if c.command and not c.failed and _normal(command) in _normal(c.command)]
        if program not in ran and not same:
            out.append(
                f"Your answer says what `{command}` showed, but you did not run {program} (or it failed). "
                "Check the result with a command that runs, then answer with what it showed."
            )
            continue
        said = NUMBER.findall(re.split(r"[.;。；\n)）]\s*", f.answer[m.end() : m.end() + 80])[0])
        last = same[-1] if same else None
        if last is not None and said and not any(_shows(v, last.output) for v in said):
            shown = last.output.strip()[:300]
            printed = f"{shown!r}" if shown else "nothing"
            out.append(
                f"Your answer says `{command}` gave {', '.join(dict.fromkeys(said))}, but it printed {printed}. "
                "Answer with what it printed, or run what shows the value."
            )
    return out


async def arithmetic(f: RunFacts) -> list[str]:
    """A sum the answer writes out adds up."""
    return _arithmetic(f.answer)


async def unanswered_calls(f: RunFacts) -> list[str]:
    """A call the task writes out that the run made, and that printed one short line: the answer gives that value
    (shown 'gmaam' by the harness, the 1.5B answered 'agm'). Only asked of a run that changed no file: after a change,
    what the call printed before it may no longer be what it returns. (A call the harness made for the run is said
    by ``unrun_calls``.)"""
    if f.changed:
        return []
    out = []
    for text, _ in (w for w in f.written_calls if w not in f.unrun_calls):
        call = f.made_call(text)
        lines = [ln.strip() for ln in call.output.splitlines() if ln.strip()] if call else []
        value = lines[0] if len(lines) == 1 else ""  # more lines: which is the call's value is not known
        bare = value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"" else value
        if call is not None and 0 < len(bare) <= 80 and bare not in f.answer:
            out.append(
                f"`{call.command.strip()}` printed {value} for {text}, but your answer does not give "
                f"{bare}. Answer with what it printed."
            )
    return out


async def agreement(f: RunFacts) -> list[str]:
    """Once the work holds, the answer agrees with it (small/answer.py); an answer copying what the harness said is
    no answer."""
    return disagreements(f.prompt, f.answer, f.corpus, bool(f.changed), dict(f.now), list(f.said))

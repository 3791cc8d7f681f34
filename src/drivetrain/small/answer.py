"""The final answer agrees with the run: what it reports was seen, and it is written with the run's facts in view.

A small model's last message is often written from its intentions, not its results: "I wrote it to out.txt" when no
such file exists, a number no command printed, "Tests passed." after a listing. The harness knows what the run did —
the files it created or changed and what they hold, the commands it ran and how they exited — so when the answer
reports something nothing in the run shows, or reports nothing checkable about a run that changed files, the model
is asked once more for its answer with those facts in front of it, in the language the task is written in.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Sequence
from typing import Protocol

from drivetrain.sessions.report import evidence, grounding

FACT_CALLS = 6  # the last commands listed
FACT_FILES = 6  # the files listed
SHOWN_BYTES = 120  # a small file's content is shown when it is at most this long

# Scripts that name the language a task is written in (the task's script, not its words)
_SCRIPTS = (
    ("Chinese", re.compile(r"[\u4e00-\u9fff]")),
    ("Japanese", re.compile(r"[\u3040-\u30ff]")),
    ("Korean", re.compile(r"[\uac00-\ud7af]")),
    ("Russian", re.compile(r"[\u0400-\u04ff]")),
)
_SUM = re.compile(r"\d+(?:\.\d+)?(?:\s*[-+*/×]\s*\d+(?:\.\d+)?)+\s*=\s*\d+(?:\.\d+)?")
_QUESTION = re.compile(r"[?？]")  # a question mark, in any language's form
_DIGITS = re.compile(r"\d+(?:\.\d+)?")
_PROSE = re.compile(r"(?<![\w./-])[A-Za-z]{2,}(?![\w./-])")  # a Latin-script word, not a path or a name
_CODE = re.compile(r"`[^`]*`")
PROSE_WORDS = 4  # an answer with this many Latin-script words is prose, not a value or a file name
FACTS_HEAD = "What I did:"  # the record's head (``facts``)
_NOT_WORD = re.compile(r"[\W_]+")  # what an echo may drop or change: marks, spaces (letters of any script stay)


class Call(Protocol):
    command: str
    failed: bool
    output: str
    text: str


def language(text: str) -> str:
    """The language a text is written in, by its script ("" for Latin script or none). Japanese before Chinese:
    Japanese text holds kanji too."""
    found = [name for name, script in _SCRIPTS if script.search(text)]
    return "Japanese" if "Japanese" in found else found[0] if found else ""


def facts(before: dict[str, bytes], now: dict[str, bytes], calls: Sequence[Call]) -> str:
    """What the run did, as the harness saw it: files created, changed or deleted (a small one with what it holds),
    the last commands and how they exited. "" when the run neither changed a file nor ran a command.

    It is written as the agent's own record, in the first person and with no instruction in it: a small model copies
    or translates the text in front of it, and a copy of this record (in any language) is an answer in the agent's
    voice. (An instruction here came back as the answer, translated:
    "你做了以下几件事，作为 harness 看到的（告诉用户…）".)"""
    rows = []
    changed = [p for p in sorted(set(before) | set(now)) if before.get(p) != now.get(p) and "__pycache__" not in p]
    for path in changed[:FACT_FILES]:
        if path not in now:
            rows.append(f"- I deleted {path}")
            continue
        verb = "I created" if path not in before else "I changed"
        content = now[path].decode("utf-8", "replace").strip()
        rows.append(
            f"- {verb} {path}"
            + (
                f", which now holds: {content!r}"
                if len(content) <= SHOWN_BYTES
                else f" ({len(content.splitlines())} lines)"
            )
        )
    if len(changed) > FACT_FILES:
        rows.append(f"- … and {len(changed) - FACT_FILES} more files")
    for call in [c for c in calls if c.command][-FACT_CALLS:]:
        out = call.output.strip()
        head = out.splitlines()[0][:100] if out else ""
        # no exit code written: a number right after a quoted command is read as what it printed (checks_answer)
        printed = f"{head!r}" + (" …" if out.count("\n") else "") if head else "nothing"
        how = f"it failed, printing {printed}" if call.failed else f"it printed {printed}"
        rows.append(f"- I ran `{call.command.strip()[:120]}`: {how}")
    if not rows:
        return ""
    if not changed:
        rows.insert(0, "- I created or changed no file")
    return FACTS_HEAD + "\n" + "\n".join(rows)


def unseen(answer: str, corpus: str, files: dict[str, bytes]) -> list[str]:
    """The numbers and paths the answer reports that appear in no tool result, no file and not the task. A path:line
    of a file that has that line is seen (the citation check reads what is there); so is the result of a sum the
    answer writes out (the arithmetic check reads that)."""
    sums = {n for m in _SUM.finditer(answer) for n in _DIGITS.findall(m.group(0))}
    out = []
    for token in grounding(answer, corpus).not_found:
        path, _, line = token.rpartition(":")
        path = os.path.normpath(path) if path else path  # ./a.py is a.py
        if token in sums or (line.isdigit() and path in files and int(line) <= files[path].count(b"\n") + 1):
            continue
        out.append(token)
    return out


def echoes(answer: str, said: str) -> bool:
    """Whether the answer is a copy of what the harness said of the last call ("Created totaltxt (1 line): 18" for
    the note "Created total.txt (1 line):\n   1| 18"): its letters and digits are most of the note's, or a long run
    of them. The grammar keeps an answer from starting as that note does, and the 1.5B dropped a dot to copy it."""
    mine, note = _NOT_WORD.sub("", answer.lower()), _NOT_WORD.sub("", said.lower())
    if not mine or not note:
        return False
    return difflib.SequenceMatcher(None, mine, note, autojunk=False).ratio() >= 0.8 or (
        len(mine) >= 12 and mine in note
    )


def disagreements(
    prompt: str, answer: str, corpus: str, did_work: bool, files: dict[str, bytes], said: Sequence[str] = ()
) -> list[str]:
    """Why the answer should be written again from the run's facts ([] when it agrees with the run). ``said``: what
    the harness said (what it added to the last call's result, what the checks sent back): none is an answer."""
    out = []
    missing = unseen(answer, corpus, files)
    if any(echoes(answer, s) for s in said):
        out.append(
            "Your answer copies the note on your last call's result; it is not an answer. Tell the user "
            "the result the task asks for and what you did, in your own words."
        )
    elif missing:
        out.append(
            f"Your answer reports {', '.join(missing[:4])}, but no command printed "
            f"{'it' if len(missing) == 1 else 'them'} and no file holds {'it' if len(missing) == 1 else 'them'}. "
            "Report only what the run shows; if a value is still unknown, run a command that prints it."
        )
    elif did_work and not evidence(answer):
        out.append(
            "Your answer does not say what you did. Say which files you created or changed and what they "
            "hold, and what the commands you ran printed."
        )
    elif _QUESTION.search(prompt) and not evidence(answer) and not re.search(r"\d", answer):
        out.append(
            "The task asks a question, and your answer does not give what the run found. Answer it with the "
            "value or place the run showed; if no command has shown it yet, run one that prints it."
        )
    wanted = language(prompt)
    if wanted and language(answer) != wanted:
        if out:
            out[-1] += f" Write the answer in {wanted}, the language of the task."
        elif len(_PROSE.findall(_CODE.sub("", answer))) >= PROSE_WORDS:  # prose in another language, not a value
            out.append(f"The task is written in {wanted}: write the answer in {wanted}.")
    return out

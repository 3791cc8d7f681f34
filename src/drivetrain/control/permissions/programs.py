"""What one program invocation does: the built-in read-only set and each program's escape hatches.

``effects(words)`` looks at the words of one simple command (wrappers already removed) and
says whether it is read-only, what it reads and writes, which other commands it runs, and
its *dangers*: flags that make an otherwise harmless program run other code or write files
(``find -exec``… is handled as a nested command; ``find -delete``, ``sort -o``,
``git -c``, ``rg --pre``, ``sed w``, ``awk system()``, ``tar --checkpoint-action``…).
A danger is tied to the word that causes it, so a prefix rule approves it only when the
rule's own words include that word (``Bash(sed -i:*)`` approves ``-i``; ``Bash(sed:*)`` does not).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from .words import Word, dynamic


@dataclass
class Effects:
    readonly: bool = False  # in the built-in read-only set (only meaningful without dangers)
    dangers: list[tuple[int, str]] = field(default_factory=list)  # (word index, why)
    reads: list[Word] = field(default_factory=list)
    writes: list[Word] = field(default_factory=list)
    nested: list[list[Word]] = field(default_factory=list)  # commands it runs itself
    problems: list[str] = field(default_factory=list)  # not understood: ask
    edit_ok: bool = False  # a file-editing command acceptEdits may allow inside the workspace
    cd: Word | None = None  # cd's target (a dynamic word when unknown)
    changes_dir: bool = False
    # For Read deny/ask rules only: folders whose every file it reads (grep -r, rg, cp -r, tar), and
    # words that may name a file it reads (the arguments of a program drivetrain does not know).
    trees: list[Word] = field(default_factory=list)
    mentions: list[Word] = field(default_factory=list)


def runtime(w: Word) -> bool:
    """Only known at run time, or a glob that could expand to a file named like an option (-delete)."""
    return w.value is None or (w.glob and w.value[:1] in "*?[")


def scan(words: list[Word], value_short: str = "", value_long: tuple[str, ...] = ()) -> Iterator[tuple[int, str]]:
    """(index, role) for words[1:]: role is 'opt', 'val' (an option's value) or 'arg'."""
    i, ended = 1, False
    while i < len(words):
        v = words[i].value
        if ended or v is None or not v.startswith("-") or v == "-":
            yield i, "arg"
        elif v == "--":
            ended = True
            yield i, "opt"
        else:
            yield i, "opt"
            takes = (
                (v[2:] in value_long)
                if v.startswith("--")
                else (v[-1] in value_short and not any(c in value_short for c in v[1:-1]))
            )
            if takes and i + 1 < len(words):
                i += 1
                yield i, "val"
        i += 1


def opt_hits(v: str, short: str, long: tuple[str, ...]) -> bool:
    """Whether option word v is one of the given short letters or (an abbreviation of) a long one."""
    if v.startswith("--"):
        name = v[2:].split("=", 1)[0]
        return bool(name) and any(lng == name or (len(name) >= 3 and lng.startswith(name)) for lng in long)
    return v.startswith("-") and any(c in short for c in v[1:])


@dataclass(frozen=True)
class Spec:
    """A program in the read-only set: its positional args are paths ('paths') or not ('text')."""

    kind: Literal["paths", "text"] = "paths"
    bad_short: str = ""  # letters that write files or run code
    bad_long: tuple[str, ...] = ()
    inert: bool = False  # no dangerous flags at all: a run-time-only argument is harmless
    implicit_cwd: bool = False  # reads the working directory when given no path
    value_short: str = ""
    value_long: tuple[str, ...] = ()
    check: Callable[[list[Word], Effects], None] | None = None
    follow_short: str = ""  # options that follow symlinks while recursing: reads anywhere
    follow_long: tuple[str, ...] = ()


def _generic(spec: Spec, words: list[Word]) -> Effects:
    fx = Effects(readonly=True)
    paths = 0
    for i, role in scan(words, spec.value_short, spec.value_long):
        w = words[i]
        if runtime(w) and not spec.inert:
            fx.dangers.append((i, f"{w.raw} is only known at run time and could be an option"))
        if w.value is None:
            if spec.kind == "paths" and role != "opt":
                fx.reads.append(w)
            continue
        if role == "opt" and opt_hits(w.value, spec.bad_short, spec.bad_long):
            fx.dangers.append((i, f"{w.value} makes {words[0].value} write files or run commands"))
        elif role == "opt" and opt_hits(w.value, spec.follow_short, spec.follow_long):
            fx.reads.append(dynamic(w.raw, "follows symlinks wherever they lead"))
        elif spec.kind != "paths" or w.value == "-":
            continue
        elif role == "opt":  # a value attached to an option may be a file it reads: --file=/x, -f/x
            m = re.match(r"--[^=]+=(.+)", w.value) or re.match(r"-[^-/~.][^/~.]*([/~.].*)", w.value)
            if m:
                fx.reads.append(Word(w.raw, m.group(1)))
        else:  # positional arguments, and the values of options, may all be files it reads
            fx.reads.append(w)
            paths += role == "arg"
    if spec.implicit_cwd and not paths:
        fx.reads.append(Word(".", "."))
    if spec.check:
        spec.check(words, fx)
    return fx


def _positionals(words: list[Word], fx: Effects, vs: str = "", vl: tuple[str, ...] = ()) -> list[int]:
    return [i for i, role in scan(words, vs, vl) if role == "arg"]


def _second_is_output(words: list[Word], fx: Effects) -> None:  # uniq IN OUT, xxd IN OUT
    pos = _positionals(words, fx, "fsw" if words[0].value == "uniq" else "clgos")
    if len(pos) > 1:
        fx.dangers.append((pos[1], f"{words[0].value} writes its second file argument"))


def _date(words: list[Word], fx: Effects) -> None:
    for i, role in scan(words, "dfrI", ("date", "file", "reference")):
        v = words[i].value or ""
        if role == "val" and words[i - 1].value in ("-f", "--file", "-r", "--reference"):
            fx.reads.append(words[i])
            continue
        if role == "opt" and re.match(r"--(file|reference)=.", v):
            fx.reads.append(Word(v, v.split("=", 1)[1]))
        if (role == "arg" and not v.startswith("+")) or (role == "opt" and opt_hits(v, "s", ("set",))):
            fx.dangers.append((i, "date sets the system clock"))


def _hostname(words: list[Word], fx: Effects) -> None:
    for i, role in scan(words):
        if role == "arg" or opt_hits(words[i].value or "", "Fb", ("file", "boot")):
            fx.dangers.append((i, "hostname sets the host name"))


def _test(words: list[Word], fx: Effects) -> None:
    for i, w in enumerate(words[1:], 1):
        if w.value in ("-v", "-R"):
            fx.dangers.append((i, "test -v evaluates an array subscript"))


def _search(words: list[Word], fx: Effects) -> None:
    """grep and rg: the first argument is the pattern (unless -e/-f give it), not a file; with -r (rg:
    always, unless it only lists file names) every file under each folder is read."""
    rg = words[0].value == "rg"
    spec = READONLY[words[0].value or ""]
    roles = list(scan(words, spec.value_short, spec.value_long))
    opts = [words[i].value or "" for i, role in roles if role == "opt"]
    args = [i for i, role in roles if role == "arg"]
    listing = rg and any(v in ("--files", "--type-list") for v in opts)
    patterns = [
        words[i]
        for i, role in roles
        if role == "val"
        and ((words[i - 1].value or "") == "--regexp" or re.fullmatch(r"-[^-]*e", words[i - 1].value or ""))
    ]
    if args and not listing and not any(opt_hits(v, "ef", ("regexp", "file")) for v in opts):
        patterns.append(words[args.pop(0)])
    fx.reads[:] = [r for r in fx.reads if not any(r is w for w in patterns)]
    vals = [words[i].value for i, role in roles if role == "val" and words[i - 1].value in ("-d", "--directories")]
    recursive = (
        rg
        or any(opt_hits(v, "rR", ("recursive", "dereference-recursive")) or v == "--directories=recurse" for v in opts)
        or "recurse" in vals
    )
    if recursive and not listing:
        fx.trees.extend([words[i] for i in args] or [Word(".", ".")])
        if not args and not rg:
            fx.reads.append(Word(".", "."))


def _diff(words: list[Word], fx: Effects) -> None:
    if any(opt_hits(words[i].value or "", "r", ("recursive",)) for i, role in scan(words) if role == "opt"):
        fx.trees.extend(words[i] for i, role in scan(words) if role == "arg")


def _cd(words: list[Word], fx: Effects) -> None:
    fx.reads.clear()
    args = [words[i] for i, role in scan(words) if role == "arg"]
    fx.changes_dir = True
    if len(args) > 1:
        fx.problems.append("cd with more than one argument")
    fx.cd = args[0] if args else Word("~", None, why="cd to $HOME")
    if fx.cd.value == "-":
        fx.cd = dynamic("-", "cd - goes to $OLDPWD")


def _dirstack(words: list[Word], fx: Effects) -> None:
    fx.reads.clear()
    fx.changes_dir = True
    fx.cd = dynamic(words[0].raw, f"{words[0].value} changes the directory stack")


# The built-in read-only set. Conservative: a program is here only if no flag of it runs other
# programs or writes files, or if every such flag is listed (and so becomes a danger).
READONLY: dict[str, Spec] = {
    **{
        n: Spec(inert=True)
        for n in (
            "cat",
            "head",
            "tail",
            "wc",
            "stat",
            "nl",
            "tac",
            "rev",
            "od",
            "hexdump",
            "hd",
            "strings",
            "cut",
            "paste",
            "column",
            "fold",
            "expand",
            "unexpand",
            "cmp",
            "comm",
            "md5sum",
            "sha1sum",
            "sha224sum",
            "sha256sum",
            "sha384sum",
            "sha512sum",
            "b2sum",
            "cksum",
            "sum",
            "readlink",
            "realpath",
            "jq",
        )
    },
    "diff": Spec(inert=True, check=_diff),
    **{
        n: Spec(
            inert=True,
            follow_short="R",
            follow_long=("dereference-recursive",),
            check=_search,
            value_short="efmABCdD",
            value_long=(
                "regexp",
                "file",
                "max-count",
                "after-context",
                "before-context",
                "context",
                "directories",
                "devices",
                "include",
                "exclude",
                "exclude-dir",
                "exclude-from",
                "label",
            ),
        )
        for n in ("grep", "egrep", "fgrep")
    },
    **{n: Spec(inert=True, implicit_cwd=True, follow_short="L", follow_long=("dereference",)) for n in ("ls", "du")},
    "df": Spec(inert=True),
    **{
        n: Spec(kind="text", inert=True)
        for n in (
            "echo",
            "pwd",
            "true",
            "false",
            ":",
            "whoami",
            "id",
            "uname",
            "nproc",
            "printenv",
            "which",
            "type",
            "basename",
            "dirname",
            "seq",
            "sleep",
            "locale",
            "arch",
            "groups",
            "tty",
            "env",
            "tr",
        )
    },
    "printf": Spec(kind="text", bad_short="v"),
    "date": Spec(kind="text", check=_date),
    "hostname": Spec(kind="text", check=_hostname),
    "test": Spec(kind="text", check=_test),
    "[": Spec(kind="text", check=_test),
    "file": Spec(bad_short="C", bad_long=("compile",), value_short="mfFeP"),
    "tree": Spec(
        bad_short="oR",
        bad_long=("output",),
        implicit_cwd=True,
        value_short="LPIHTo",
        follow_short="l",
        follow_long=("follow",),
    ),
    "rg": Spec(
        bad_long=("pre", "pre-glob", "hostname-bin"),
        implicit_cwd=True,
        follow_short="L",
        follow_long=("follow",),
        check=_search,
        value_short="ABCEegfjmMtTr",
        value_long=("pre", "glob", "type", "max-count", "context", "regexp", "file"),
    ),
    "sort": Spec(bad_short="o", bad_long=("output", "compress-program", "files0-from"), value_short="kotST"),
    "uniq": Spec(value_short="fsw", check=_second_is_output),
    "xxd": Spec(value_short="clgos", check=_second_is_output),
    "cd": Spec(kind="text", inert=True, check=_cd),
    "pushd": Spec(kind="text", inert=True, check=_dirstack),
    "popd": Spec(kind="text", inert=True, check=_dirstack),
}

# Programs that change files; their file arguments are the writes, checked against the workspace.
WRITERS: dict[str, tuple[str, tuple[str, ...], int]] = {  # name: (short value flags, long ones, skip)
    "rm": ("", (), 0),
    "rmdir": ("", (), 0),
    "unlink": ("", (), 0),
    "shred": ("nsu", (), 0),
    "mkdir": ("m", ("mode",), 0),
    "touch": ("dtr", ("date", "reference"), 0),
    "cp": ("St", ("suffix", "target-directory"), 0),
    "mv": ("St", ("suffix", "target-directory"), 0),
    "ln": ("St", ("suffix", "target-directory"), 0),
    "install": ("gmoSt", ("group", "mode", "owner"), 0),
    "chmod": ("", ("reference",), 1),
    "chown": ("", ("reference", "from"), 1),
    "chgrp": ("", ("reference",), 1),
    "truncate": ("sr", ("size", "reference"), 0),
    "tee": ("", ("output-error",), 0),
}
EDIT_OK = {"mkdir", "touch", "cp", "mv", "tee"}  # acceptEdits allows these inside the workspace
COPIERS = {"cp", "mv", "ln", "install"}  # their file arguments are read (or carried away) as well


def writer_effects(words: list[Word]) -> Effects:
    name = words[0].value or ""
    vs, vl, skip = WRITERS[name]
    fx = Effects(edit_ok=name in EDIT_OK)
    if name in COPIERS:  # the sources: every file argument but the last, unless -t names the target
        recursive = name == "mv" or any(opt_hits(w.value or "", "rRa", ("recursive", "archive")) for w in words[1:])
        args = [i for i, role in scan(words, vs, vl) if role == "arg"]
        targeted = any(opt_hits(w.value or "", "t", ("target-directory",)) for w in words[1:])
        sources = [words[i] for i in (args if targeted else args[:-1])]
        fx.reads.extend(sources)
        fx.trees.extend(sources if recursive else [])
    for i, role in scan(words, vs, vl):
        w = words[i]
        if role == "arg":
            if skip:
                skip -= 1
            else:
                fx.writes.append(w)
        elif role == "val" and words[i - 1].value in ("-t",):
            fx.writes.append(w)
        elif w.value and w.value.startswith("--target-directory="):
            fx.writes.append(Word(w.raw, w.value.split("=", 1)[1]))
        elif w.value is None:
            fx.writes.append(w)
    return fx

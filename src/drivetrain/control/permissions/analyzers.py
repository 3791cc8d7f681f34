"""The programs that need more than a flag list: git, find, sed, awk, and the escape-hatch table.

git: the read-only subcommands are status, log, show, diff (and their plumbing kin), blame,
grep, branch/tag (listing), remote (-v, get-url, show), config (--get…, --list), stash
list/show, worktree list, reflog show. Listing forms of branch/tag/remote/config that
would change something (``git branch -D``, ``git config core.pager …``) are dangers;
``git -c``, ``--config-env``, ``--exec-path``, ``--git-dir``, ``--work-tree``,
``--ext-diff``, ``--output``, ``grep -O``, ``rebase --exec``, ``--upload-pack``… always are.
"""

from __future__ import annotations

import re

from .programs import Effects, opt_hits, runtime, scan
from .words import Word, dynamic

GIT_GLOBAL_OK = {
    "--no-pager",
    "-P",
    "-p",
    "--paginate",
    "--no-optional-locks",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
    "--no-replace-objects",
    "--version",
}
_DIFFISH = ("", ("output", "ext-diff"))
GIT_READONLY: dict[str, tuple[str, tuple[str, ...]]] = {
    **dict.fromkeys(
        ("log", "show", "diff", "whatchanged", "diff-tree", "diff-index", "diff-files", "shortlog", "range-diff"),
        _DIFFISH,
    ),
    **dict.fromkeys(
        (
            "status",
            "blame",
            "annotate",
            "rev-parse",
            "rev-list",
            "ls-files",
            "ls-tree",
            "cat-file",
            "describe",
            "merge-base",
            "name-rev",
            "show-ref",
            "for-each-ref",
            "count-objects",
            "check-ignore",
            "check-attr",
            "version",
        ),
        ("", ()),
    ),
    "grep": ("O", ("open-files-in-pager",)),
}
# Subcommands that print what files hold (a Read rule on a file named in their arguments applies).
GIT_SHOWS = {
    "log",
    "show",
    "diff",
    "whatchanged",
    "diff-tree",
    "diff-index",
    "diff-files",
    "range-diff",
    "blame",
    "annotate",
    "cat-file",
    "grep",
    "archive",
    "format-patch",
    "stash",
    "shortlog",
    "apply",
    "am",
}
# Flags of other git subcommands that run a program of the caller's choosing.
GIT_ESCAPES: dict[str, tuple[str, tuple[str, ...]]] = {
    "rebase": ("x", ("exec",)),
    "difftool": ("xt", ("extcmd", "tool")),
    "mergetool": ("t", ("tool",)),
    "clone": ("cu", ("config", "template", "upload-pack")),
    "fetch": ("", ("upload-pack",)),
    "pull": ("", ("upload-pack",)),
    "ls-remote": ("", ("upload-pack",)),
    "push": ("", ("receive-pack", "exec")),
    "archive": ("", ("exec", "output", "remote")),
    "init": ("", ("template",)),
}
# Subcommands that run commands of the caller's choosing (at this word, or at the subcommand).
GIT_RUNS_COMMANDS = {
    "submodule": "foreach",
    "bisect": "run",
    **dict.fromkeys(
        (
            "filter-branch",
            "filter-repo",
            "daemon",
            "send-email",
            "instaweb",
            "p4",
            "svn",
            "cvsimport",
            "web--browse",
            "help",
            "credential",
        )
    ),
}


def git_effects(words: list[Word]) -> Effects:
    fx = Effects()
    si = _git_globals(words, fx)
    fx.reads.append(Word(".", "."))
    if si >= len(words):
        return fx
    sub, rest = words[si].value, words[si:]
    if sub is None:
        fx.dangers.append((si, "the git subcommand is only known at run time"))
        return fx
    if sub in GIT_SHOWS:
        fx.mentions.extend(rest[1:])  # pathspecs and REV:path name files whose contents git shows
    for j, w in enumerate(rest[1:], si + 1):
        if runtime(w):
            fx.dangers.append((j, f"{w.raw} is only known at run time and could be an option"))
    _git_reads(sub, rest, fx)
    if sub in GIT_RUNS_COMMANDS:
        trigger = GIT_RUNS_COMMANDS[sub]
        at = next((si + j for j, w in enumerate(rest) if trigger and w.value == trigger), None)
        if trigger is None or at is not None:
            fx.dangers.append((at or si, f"git {sub} {trigger or ''} runs other programs".replace("  ", " ")))
    short, long = GIT_READONLY.get(sub) or GIT_ESCAPES.get(sub) or ("", ())
    for j, role in scan(rest):
        v = rest[j].value
        if role == "opt" and v and opt_hits(v, short, long):
            fx.dangers.append((si + j, f"git {sub} {v} runs another program or writes a file"))
    if sub in GIT_READONLY:
        fx.readonly = True
    elif sub in _LISTING:
        fx.readonly = True
        _LISTING[sub](rest, si, fx)
    elif sub in ("stash", "worktree", "reflog"):
        nxt = next((w.value for w in rest[1:] if not (w.value or "").startswith("-")), None)
        fx.readonly = nxt in {"stash": ("list", "show"), "worktree": ("list",), "reflog": (None, "show")}[sub]
    return fx


def _git_globals(words: list[Word], fx: Effects) -> int:
    """Check git's own options (before the subcommand); returns the subcommand's index."""
    i, n = 1, len(words)
    while i < n and (words[i].value or "-").startswith("-"):
        v = words[i].value
        if v is None:
            fx.dangers.append((i, f"{words[i].raw} is only known at run time"))
        elif v == "-C" and i + 1 < n:
            fx.reads.append(words[i + 1])
            if not words[i + 1].static:
                fx.dangers.append((i + 1, "git -C with a run-time directory"))
            i += 1
        elif v not in GIT_GLOBAL_OK:
            fx.dangers.append((i, f"git option {v} can make git run other programs or read another repository"))
            if v in ("-c", "--config-env", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--super-prefix"):
                i += 1  # its value
        i += 1
    return i


def _git_reads(sub: str, rest: list[Word], fx: Effects) -> None:
    """Files a git subcommand reads besides the repository: blame --contents, config -f, grep -f, diff --no-index."""
    for j, role in scan(rest, "f", ("contents", "file", "blob")):
        prev = rest[j - 1].value if role == "val" else None
        if (sub, prev) in (("blame", "--contents"), ("config", "-f"), ("config", "--file"), ("grep", "-f")):
            fx.reads.append(rest[j])
        elif role == "opt" and re.match(r"--(contents|file)=.", rest[j].value or ""):
            fx.reads.append(Word(rest[j].raw, (rest[j].value or "").split("=", 1)[1]))
    if sub == "diff" and "--no-index" in [w.value for w in rest]:
        fx.reads.extend(rest[j] for j, role in scan(rest) if role == "arg")


def _branch_tag(rest: list[Word], si: int, fx: Effects) -> None:
    sub = rest[0].value
    bad = (
        (
            "dDmMcCfut",
            (
                "delete",
                "move",
                "copy",
                "force",
                "set-upstream-to",
                "unset-upstream",
                "edit-description",
                "track",
                "no-track",
                "create-reflog",
            ),
        )
        if sub == "branch"
        else (
            "dasfumFe",
            ("delete", "annotate", "sign", "force", "local-user", "message", "file", "edit", "create-reflog"),
        )
    )
    values = ("contains", "no-contains", "merged", "no-merged", "points-at", "sort", "format")
    listing = False
    for j, role in scan(rest, "", values):
        v = rest[j].value or ""
        if role == "opt" and opt_hits(v, *bad):
            fx.dangers.append((si + j, f"git {sub} {v} changes the repository"))
        listing = (
            listing
            or v in ("-l", "--list")
            or (role == "opt" and v.startswith("-") and "l" in v[1:] and not v.startswith("--"))
        )
    positional = [j for j, role in scan(rest, "", values) if role == "arg"]
    if positional and not listing and not fx.dangers:  # with -d/-m…, the names are its arguments
        fx.dangers.append((si + positional[0], f"git {sub} NAME creates a {sub}"))


def _remote(rest: list[Word], si: int, fx: Effects) -> None:
    args = [(j, rest[j].value) for j, role in scan(rest) if role == "arg"]
    if args and args[0][1] not in ("get-url", "show"):
        fx.dangers.append((si + args[0][0], f"git remote {args[0][1]} changes the repository"))


_CONFIG_READ = (
    "--get",
    "--get-all",
    "--get-regexp",
    "--get-urlmatch",
    "--list",
    "-l",
    "--get-color",
    "--get-colorbool",
)
_CONFIG_WRITE = (
    "--add",
    "--unset",
    "--unset-all",
    "--replace-all",
    "--rename-section",
    "--remove-section",
    "--edit",
    "-e",
)


def _config(rest: list[Word], si: int, fx: Effects) -> None:
    vals = [w.value or "" for w in rest[1:]]
    first_arg = next((v for v in vals if not v.startswith("-")), None)
    reads = any(v.split("=")[0] in _CONFIG_READ for v in vals) or first_arg in ("get", "list")
    if not reads or any(v.split("=")[0] in _CONFIG_WRITE for v in vals):
        fx.dangers.append((si, "git config without --get/--list changes settings (which can make git run programs)"))


_LISTING = {"branch": _branch_tag, "tag": _branch_tag, "remote": _remote, "config": _config}

# ---------------------------------------------------------------- find

FIND_EXEC = ("-exec", "-execdir", "-ok", "-okdir")
FIND_WRITES = {"-fprint": 1, "-fprint0": 1, "-fls": 1, "-fprintf": 2}
FIND_VALUE = {
    "-name",
    "-iname",
    "-path",
    "-ipath",
    "-regex",
    "-iregex",
    "-type",
    "-xtype",
    "-user",
    "-group",
    "-perm",
    "-size",
    "-mtime",
    "-mmin",
    "-atime",
    "-amin",
    "-ctime",
    "-cmin",
    "-maxdepth",
    "-mindepth",
    "-printf",
    "-wholename",
    "-iwholename",
    "-lname",
    "-ilname",
    "-links",
    "-inum",
    "-uid",
    "-gid",
    "-used",
    "-fstype",
    "-regextype",
    "-context",
}
FIND_READS = {"-newer", "-anewer", "-cnewer", "-samefile", "-files0-from"}


def find_effects(words: list[Word]) -> Effects:
    fx = Effects(readonly=True)
    i, n = 1, len(words)
    while i < n and (words[i].value in ("-H", "-L", "-P") or (words[i].value or "").startswith(("-O", "-D"))):
        if words[i].value in ("-H", "-L"):
            fx.reads.append(dynamic(words[i].raw, "find -L follows symlinks out of the tree"))
        i += 2 if words[i].value == "-D" else 1
    starts = 0
    while i < n and not re.match(r"[-(!),]", words[i].value or "-"):
        if runtime(words[i]):
            fx.dangers.append((i, f"{words[i].raw} could expand to an option such as -delete"))
        fx.reads.append(words[i])
        starts += 1
        i += 1
    if not starts:
        fx.reads.append(Word(".", "."))
    while i < n:
        w = words[i]
        v = w.value
        if v is None:
            fx.dangers.append((i, f"{w.raw} is only known at run time and could be -exec or -delete"))
        elif v == "-follow":
            fx.reads.append(dynamic(v, "find -follow follows symlinks out of the tree"))
        elif v == "-files0-from":
            fx.dangers.append((i, "find -files0-from reads its starting points from a file"))
        elif v in FIND_EXEC:
            j = next(
                (
                    k
                    for k in range(i + 1, n)
                    if words[k].value == ";" or (words[k].value == "+" and words[k - 1].value == "{}")
                ),
                None,
            )
            if j is None or j == i + 1:
                fx.problems.append(f"find {v} without a command and a ; or + after it")
                return fx
            fx.nested.append(
                [_placeholder(x, fx.reads[: max(starts, 1)] if v in ("-exec", "-ok") else []) for x in words[i + 1 : j]]
            )
            fx.trees.extend(w for w in fx.reads[: max(starts, 1)] if w not in fx.trees)  # {} is any file there
            i = j
        elif v == "-delete":
            fx.dangers.append((i, "find -delete deletes files"))
        elif v in FIND_WRITES:
            fx.dangers.append((i, f"find {v} writes a file"))
            i += FIND_WRITES[v]
        elif v in FIND_READS or v.startswith("-newer"):
            if i + 1 < n:
                fx.reads.append(words[i + 1])
            i += 1
        elif v in FIND_VALUE:
            i += 1
        i += 1
    return fx


def _placeholder(w: Word, starts: list[Word]) -> Word:
    """find -exec's {} is a path under the one starting point (-execdir's is relative to a subfolder)."""
    if w.value is None or "{}" not in w.value:
        return w
    if w.value == "{}" and len(starts) == 1 and starts[0].static and not starts[0].glob:
        return Word("{}", starts[0].value or ".")  # a path under the start (symlinks not followed)
    return dynamic(w.raw, "find fills in {}")


# ---------------------------------------------------------------- sed, awk

_SED_ADDR = r"(?:\d+(?:~\d+)?|\$|/(?:[^/\\\n]|\\.)*/[IM]*)"
_SED_RANGE = re.compile(rf"\s*(?:{_SED_ADDR}(?:\s*,\s*(?:{_SED_ADDR}|[+~]\d+))?)?\s*!?\s*")


def sed_script_ok(script: str) -> bool:
    """Only printing, deleting, substituting and the like: no w/W/r/R/e, no s///e or s///w."""
    i, n = 0, len(script)
    while i < n:
        i = _match_end(_SED_RANGE, script, i)
        if i >= n:
            break
        c = script[i]
        if c in ";\n}{":
            i += 1
            continue
        if c == "#":
            end = script.find("\n", i)
            i = n if end < 0 else end
            continue
        if c in "pdqQ=lnNPDgGhHxz":
            i = _match_end(re.compile(r"[a-zA-Z=]\d*"), script, i)
        elif c in "aic":
            end = script.find("\n", i)
            i = n if end < 0 else end
        elif c in "btT:":
            i = _match_end(re.compile(r".[ \t]*[^;\n]*"), script, i)
        elif c in "sy":
            if i + 1 >= n or script[i + 1] in "\\\n" or script[i + 1].isalnum():
                return False
            d = re.escape(script[i + 1])
            m = re.compile(rf"{c}{d}(?:[^\\{d}]|\\.)*{d}(?:[^\\{d}]|\\.)*{d}").match(script, i)
            if not m:
                return False
            i = m.end()
            i = _match_end(re.compile(r"[gpiImM0-9]*" if c == "s" else ""), script, i)  # the flags
        else:
            return False
        m = re.compile(r"\s*(?:[;\n}]|$)").match(script, i)
        if not m:
            return False
    return True


def _match_end(pattern: re.Pattern[str], text: str, at: int) -> int:
    """Where ``pattern``'s match at ``at`` ends: one that cannot fail (every part optional, or its first character
    already seen)."""
    m = pattern.match(text, at)
    assert m is not None
    return m.end()


def sed_effects(words: list[Word]) -> Effects:
    fx = Effects(readonly=True)
    scripts: list[int] = []
    args: list[int] = []
    for i, role in scan(words, "el", ("expression", "line-length")):
        v = words[i].value
        if v is None or runtime(words[i]):
            fx.dangers.append((i, f"{words[i].raw} is only known at run time"))
            if role == "arg":
                args.append(i)
        elif role == "val" and words[i - 1].value in ("-e", "--expression"):
            scripts.append(i)
        elif role == "opt" and v.startswith("--expression="):
            if not sed_script_ok(v.split("=", 1)[1]):
                fx.dangers.append((i, "the sed script writes files or runs commands"))
        elif role == "opt" and not re.fullmatch(
            r"-[nErsuz]*[el]?|--(quiet|silent|regexp-extended|separate|"
            r"unbuffered|null-data|posix|debug|sandbox|line-length=\d+)|--",
            v,
        ):
            fx.dangers.append((i, f"sed {v} edits files in place or reads a script file"))
        elif role == "arg":
            args.append(i)
    if not scripts and args:
        scripts.append(args.pop(0))
    for i in scripts:
        if (v := words[i].value) is not None and not sed_script_ok(v):
            fx.dangers.append((i, "the sed script writes files or runs commands (w, e, r…)"))
    joined = "\n".join(words[i].value or "" for i in scripts)
    if scripts and not fx.dangers and not sed_script_ok(joined):  # -e pieces are joined by newlines
        fx.dangers.append((scripts[-1], "the sed script writes files or runs commands (w, e, r…)"))
    fx.reads.extend(words[i] for i in args)
    return fx


def awk_effects(words: list[Word]) -> Effects:
    """awk is not read-only (a program can do anything), but a prefix rule on it stops at system() & co."""
    fx = Effects()
    program = False
    for i, role in scan(words, "Fv", ("field-separator", "assign")):
        v = words[i].value
        if v is None or runtime(words[i]):
            fx.dangers.append((i, f"{words[i].raw} is only known at run time"))
        elif role == "opt" and not re.match(r"-[Fv]|--(field-separator|assign)|--$", v):
            fx.dangers.append((i, f"awk {v} loads code or writes files"))
        elif role == "arg" and not program:
            program = True
            if re.search(r"system|getline|[|>@]", v):
                fx.dangers.append((i, "the awk program runs commands or writes files"))
        elif role == "arg":
            fx.reads.append(words[i])
    return fx


# Other programs' escape hatches: (short letters, long names, whether `+cmd` args run commands).
ESCAPES: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "tar": (
        "FI",
        ("checkpoint-action", "to-command", "use-compress-program", "rsh-command", "info-script", "new-volume-script"),
        False,
    ),
    "zip": ("T", ("unzip-command",), False),
    "man": ("PHpBC", ("pager", "html", "preprocessor", "browser", "config-file"), False),
    "less": ("koO", ("lesskey-file", "lesskey-src", "log-file", "LOG-FILE"), True),
    "more": ("", (), True),
    **dict.fromkeys(("vi", "vim", "nvim", "view", "ex", "vimdiff"), ("cSuse", ("cmd",), True)),
    "rsync": ("e", ("rsh", "rsync-path"), False),
    **dict.fromkeys(
        ("npm", "npx", "pnpm", "yarn"),
        ("Cc", ("script-shell", "prefix", "userconfig", "globalconfig", "node-options", "call"), False),
    ),
    "make": ("E", ("eval",), False),
    "fd": ("xX", ("exec", "exec-batch"), False),
    "fdfind": ("xX", ("exec", "exec-batch"), False),
    "cargo": ("", ("config",), False),
}


ARCHIVERS = {"tar", "zip", "rsync"}  # their file arguments are folders whose every file they read


def escape_effects(words: list[Word]) -> Effects:
    short, long, plus = ESCAPES[words[0].value or ""]
    fx = Effects(mentions=words[1:])
    if words[0].value in ARCHIVERS:
        fx.trees.extend(words[i] for i, role in scan(words) if role == "arg")
    old_style = words[0].value == "tar" and len(words) > 1 and re.fullmatch(r"[A-Za-z]+", words[1].value or "-")
    if old_style and any(c in short for c in words[1].value or ""):  # bundled options: tar xIf …
        fx.dangers.append((1, "tar option runs a program"))
    for i, role in scan(words):
        v = words[i].value
        if role == "opt" and v and opt_hits(v, short, long):
            fx.dangers.append((i, f"{words[0].value} {v} runs another program or writes files"))
        elif plus and v and v.startswith("+") and role == "arg":
            fx.dangers.append((i, f"{words[0].value} {v} runs an editor/pager command"))
    return fx

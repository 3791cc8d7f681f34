"""From parsed simple commands to the *parts* that will run: wrappers looked through, shells recursed.

``analyze_command("FOO=1 timeout 5 bash -c 'git status; rm x'")`` gives three parts: the
``timeout … bash -c`` part (seen through to ``bash``), ``git status`` and ``rm x``, each with
its words at every wrapper level, its assignments, reads, writes, dangers and problems.
``xargs CMD`` and ``find -exec CMD`` become parts of their own, with a run-time word for
what they fill in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .analyzers import ESCAPES, awk_effects, escape_effects, find_effects, git_effects, sed_effects
from .programs import READONLY, WRITERS, Effects, _generic, writer_effects
from .shell import ParsedShell, SimpleCommand, parse_shell
from .words import Word, dynamic

SYSTEM_DIRS = {"/bin/", "/usr/bin/", "/usr/local/bin/", "/sbin/", "/usr/sbin/"}
SHELLS = {"bash", "sh", "zsh", "dash"}
# Assignments that change which program runs, what it loads, or where it reads its config.
DANGEROUS_VAR = re.compile(
    r"(PATH|.*PATH|IFS|ENV|BASH_ENV|BASH_FUNC_.*|SHELLOPTS|BASHOPTS|PS[0-4]|PROMPT_COMMAND|HOME|SHELL|"
    r"EDITOR|VISUAL|.*PAGER|BROWSER|GIT_.*|LD_.*|DYLD_.*|PYTHON.*|NODE_.*|NPM_CONFIG_.*|PERL.*|RUBY.*|"
    r"LESS.*|XDG_.*|TMPDIR|.*_OPTIONS|.*OPTS|.*_COMMAND|.*_CMD|MAKEFLAGS|MFLAGS|CC|CXX|CPP|LD|AR|"
    r"RIPGREP_CONFIG_PATH|TERMINFO.*|TZDIR|LOCPATH|NLSPATH|GCONV_PATH|HOSTALIASES|RESOLV_.*|MALLOC_.*|"
    r"GLIBC_TUNABLES|OPENSSL_.*|SSL_CERT_.*|CURL_CA_BUNDLE|REQUESTS_CA_BUNDLE|.*_PROXY|CARGO_.*|"
    r"RUSTC.*|RUSTFLAGS|GOFLAGS|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS|DOCKER_.*|KUBECONFIG|SUDO_.*|FUNCNEST)",
    re.IGNORECASE,
)
VALID_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Builtins that run a string as code, or evaluate array subscripts (a[$(cmd)]) as arithmetic.
CODE_BUILTINS = {
    "eval": "eval runs a string as a command",
    "trap": "trap runs a string as a command",
    "let": "let evaluates arithmetic (which can run commands)",
    "fc": "fc re-runs history",
    "enable": "enable can load code",
    "coproc": "coproc",
    "source": "",
    ".": "",
}
VARNAME_BUILTINS = {
    "read",
    "unset",
    "declare",
    "typeset",
    "local",
    "export",
    "readonly",
    "getopts",
    "wait",
    "printf",
    "test",
    "[",
    "mapfile",
    "readarray",
}
DECLARE = {"declare", "typeset", "local", "export", "readonly"}


@dataclass
class Part:
    """One command that will run."""

    words: list[Word]  # after looking through wrappers
    layers: list[list[Word]]  # the words at each wrapper level, outermost first
    text: str
    assigns: list[tuple[str, Word]] = field(default_factory=list)
    fx: Effects = field(default_factory=Effects)
    problems: list[str] = field(default_factory=list)
    sudo: bool = False

    @property
    def dangerous_assigns(self) -> list[str]:
        return [n for n, _ in self.assigns if DANGEROUS_VAR.fullmatch(n) or not VALID_NAME.fullmatch(n)]


@dataclass(frozen=True)
class Wrap:
    bools: frozenset[str] = frozenset()
    values: frozenset[str] = frozenset()
    attached: str = "(?!)"  # options with their value attached
    skip: int = 0  # positional words before the command (timeout's DURATION)
    no_cmd: frozenset[str] = frozenset()  # options after which nothing is run (command -v)
    assigns: bool = False  # NAME=VALUE words may come before the command
    shell: frozenset[str] = frozenset()  # options that pass the command through a shell
    writes: frozenset[str] = frozenset()  # value options naming a file written


def _fs(*a: str) -> frozenset[str]:
    return frozenset(a)


WRAPPERS: dict[str, Wrap] = {
    "timeout": Wrap(
        _fs("--preserve-status", "--foreground", "-v", "--verbose"),
        _fs("-s", "--signal", "-k", "--kill-after"),
        r"-[sk].+|--(signal|kill-after)=.*",
        skip=1,
    ),
    "nohup": Wrap(),
    "setsid": Wrap(_fs("-f", "--fork", "-w", "--wait", "-c", "--ctty")),
    "ionice": Wrap(
        _fs("-t", "--ignore"), _fs("-c", "--class", "-n", "--classdata"), r"-[cn]\d+|--(class|classdata)=.*"
    ),
    "noglob": Wrap(),
    "chronic": Wrap(_fs("-e", "-v")),
    "unbuffer": Wrap(_fs("-p")),
    "nice": Wrap(values=_fs("-n", "--adjustment"), attached=r"-n-?\d+|--adjustment=-?\d+|--?\d+"),
    "stdbuf": Wrap(
        values=_fs("-i", "-o", "-e", "--input", "--output", "--error"), attached=r"-[ioe].+|--(input|output|error)=.*"
    ),
    "time": Wrap(
        _fs("-p", "-v", "--verbose", "-a", "--append", "-q", "--quiet", "--portability"),
        _fs("-f", "--format", "-o", "--output"),
        r"--format=.*",
        writes=_fs("-o", "--output"),
    ),
    "command": Wrap(_fs("-p"), no_cmd=_fs("-v", "-V")),
    "builtin": Wrap(),
    "exec": Wrap(_fs("-c", "-l", "-cl", "-lc"), _fs("-a")),
    "doas": Wrap(_fs("-n", "-s"), _fs("-u", "-C"), assigns=False, shell=_fs("-s")),
    "sudo": Wrap(
        _fs(
            "-E",
            "-H",
            "-n",
            "-S",
            "-k",
            "-P",
            "-A",
            "-b",
            "-B",
            "-N",
            "--preserve-env",
            "--non-interactive",
            "--stdin",
            "--askpass",
            "--background",
        ),
        _fs("-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U", "--user", "--group"),
        r"-[ugCDhprtTU].+|--(user|group|preserve-env|chdir|prompt)=.*",
        assigns=True,
        no_cmd=_fs("-l", "-v", "-K", "-V", "-e", "--list", "--validate", "--edit"),
        shell=_fs("-s", "-i", "--shell", "--login"),
    ),
    "env": Wrap(
        _fs("-i", "-", "--ignore-environment", "-0", "--null", "-v", "--debug"),
        _fs("-u", "--unset"),
        r"-u.+|--unset=.*|--(default|ignore|block)-signal(=.*)?",
        assigns=True,
        shell=_fs("-S", "--split-string", "-C", "--chdir"),
    ),
}
XARGS_VALUES = _fs(
    "-a",
    "--arg-file",
    "-d",
    "--delimiter",
    "-E",
    "-I",
    "-L",
    "-n",
    "--max-args",
    "-P",
    "--max-procs",
    "-s",
    "--max-chars",
    "--process-slot-var",
)
XARGS_BOOLS = _fs(
    "-0",
    "--null",
    "-p",
    "--interactive",
    "-r",
    "--no-run-if-empty",
    "-t",
    "--verbose",
    "-x",
    "--exit",
    "-o",
    "--open-tty",
    "--show-limits",
)


def known_program(value: str) -> bool:
    """Whether drivetrain knows what this program does with its arguments (so a word is not a command)."""
    name = program_name(value)
    return (
        name in READONLY
        or name in WRITERS
        or name in ESCAPES
        or name in SHELLS
        or name in WRAPPERS
        or name in CODE_BUILTINS
        or name in VARNAME_BUILTINS
        or name in ("git", "find", "sed", "awk", "xargs")
    )


def program_name(value: str) -> str:
    """``/usr/bin/git`` is git; ``./git`` or ``tools/git`` is some other program."""
    folder, _, base = value.rpartition("/")
    return base if folder + "/" in SYSTEM_DIRS else value


def _unwrap(name: str, spec: Wrap, words: list[Word], part: Part) -> list[Word] | None:
    i, n = 1, len(words)
    while i < n:
        v = words[i].value
        if v is None:
            part.problems.append(f"{name}: {words[i].raw} is only known at run time")
            return None
        if v == "--":
            i += 1
            break
        if not v.startswith("-") or (v == "-" and name != "env"):
            break
        if v in spec.no_cmd:
            return None
        if (
            v in spec.shell
            or any(v.startswith(s + "=") for s in spec.shell if s.startswith("--"))
            or any(v.startswith(s) and len(s) == 2 for s in spec.shell if len(v) > 2 and v[1] != "-")
        ):
            part.problems.append(f"{name} {v} runs the command through a shell or another directory")
            return None
        if v in spec.values:
            if v in spec.writes and i + 1 < n:
                part.fx.writes.append(words[i + 1])
            i += 2
        elif v in spec.bools or re.fullmatch(spec.attached, v):
            if name == "time" and v.startswith("--output="):
                part.fx.writes.append(Word(words[i].raw, v.split("=", 1)[1]))
            i += 1
        else:
            part.problems.append(f"{name}: unknown option {v}")
            return None
    while spec.assigns and i < n and re.match(r"[^=-][^=]*=", words[i].value or ""):
        key, _, val = (words[i].value or "").partition("=")
        part.assigns.append((key, Word(val, val)))
        i += 1
    i += spec.skip
    return words[i:] if i < n else None


def _xargs(words: list[Word], part: Part) -> list[Word] | None:
    i, n, repl = 1, len(words), None
    while i < n and (words[i].value or "x").startswith("-") and words[i].value != "--":
        v = words[i].value or ""
        if v in XARGS_VALUES:
            repl = (words[i + 1].value or "") if v == "-I" and i + 1 < n else repl
            if v in ("-a", "--arg-file") and i + 1 < n:
                part.fx.reads.append(words[i + 1])
            i += 2
        elif v in XARGS_BOOLS or re.fullmatch(
            r"-[eiIlLnPsdE].*|--(max-args|max-procs|max-chars|delimiter|"
            r"arg-file|eof|replace|max-lines|process-slot-var)=.*",
            v,
        ):
            repl = (
                "{}"
                if v in ("-i", "--replace")
                else v[2:]
                if v.startswith(("-i", "-I"))
                else v.split("=", 1)[1]
                if v.startswith("--replace=")
                else repl
            )
            i += 1
        else:
            part.problems.append(f"xargs: unknown option {v}")
            return None
    i += words[i].value == "--" if i < n else 0
    inner = words[i:] or [Word("echo", "echo")]
    if repl:
        return [dynamic(w.raw, "xargs fills it in") if w.value is None or repl in w.value else w for w in inner]
    return inner + [dynamic("(input)", "xargs appends its input")]


def _shell(words: list[Word], part: Part, parts: list[Part], home: str | None, depth: int) -> Effects:
    """bash -c 'script' is parsed in turn; a script file is a program of its own; stdin is not understood."""
    i, n, has_c = 1, len(words), False
    while i < n:
        v = words[i].value
        if v is None:
            part.problems.append(f"{words[i].raw}: the shell's arguments are only known at run time")
            return Effects()
        if v in ("--norc", "--noprofile", "--login", "--posix", "--noediting"):
            i += 1
        elif re.fullmatch(r"-[cxeilnuvfhpBEHPT]+", v):
            has_c = has_c or "c" in v
            i += 1
        elif v.startswith(("-", "+")):
            part.problems.append(f"shell option {v} is not understood")
            return Effects()
        else:
            break
    if not has_c:
        if i >= n:
            part.problems.append(f"{words[0].value} reads its commands from standard input")
        return Effects(mentions=words[i : i + 1])  # a script file
    if i >= n or words[i].value is None:
        part.problems.append(
            f"the string given to {words[0].value} -c is only known at run time"
            if i < n
            else f"{words[0].value} -c without a command string"
        )
        return Effects()
    parsed = parse_shell(words[i].value or "", home, depth + 1)
    part.problems.extend(f"in {words[0].value} -c: {p}" for p in parsed.problems)
    _collect(parsed, parts, home, depth + 1)
    return Effects(readonly=True)


def _program(words: list[Word], part: Part, parts: list[Part], home: str | None, depth: int) -> Effects:
    name = program_name(words[0].value or "")
    words = [Word(words[0].raw, name)] + words[1:]  # /usr/bin/sort is analysed as sort
    if name in VARNAME_BUILTINS and any(re.match(r"[\w-]*\w\[", w.value or "") for w in words[1:]):
        part.problems.append(f"{name} with an array subscript (evaluated as arithmetic, which can run commands)")
    if name in DECLARE:
        for w in words[1:]:
            if w.value and "=" in w.value and not w.value.startswith("-"):
                key, _, val = w.value.partition("=")
                part.assigns.append((key.rstrip("+"), Word(val, val)))
    if CODE_BUILTINS.get(name):
        part.problems.append(CODE_BUILTINS[name])
        return Effects(mentions=words[1:])
    if name in SHELLS:
        return _shell(words, part, parts, home, depth)
    if name == "git":
        return git_effects(words)
    if name == "find":
        return find_effects(words)
    if name == "sed":
        return sed_effects(words)
    if name in ("awk", "gawk", "mawk", "nawk"):
        return awk_effects(words)
    if name in READONLY:
        return _generic(READONLY[name], words)
    if name in WRITERS:
        return writer_effects(words)
    if name in ESCAPES:
        return escape_effects(words)
    return Effects(mentions=words[1:])  # any argument may be a file it reads


def _redirects(cmd: SimpleCommand, fx: Effects) -> None:
    for r in cmd.redirects:
        t = r.target
        if not isinstance(t, Word) or t.procsub or r.op == "<<<":
            continue
        if r.op in ("<", "<&", "<>"):
            fx.reads.append(t)
        if r.op not in ("<", "<&"):
            fx.writes.append(t)


def _simple(cmd: SimpleCommand, parts: list[Part], home: str | None, depth: int) -> None:
    part = Part(cmd.words, [cmd.words], cmd.text, list(cmd.assigns))
    parts.append(part)
    words: list[Word] | None = cmd.words
    inner_fx = Effects(readonly=True)
    while words:
        head = words[0]
        if head.value is None or head.glob:
            part.problems.append(
                f"the command name {head.raw} is only known at run time ({head.why or 'glob pattern'})"
            )
            inner_fx = Effects()
            break
        name = program_name(head.value)
        part.sudo = part.sudo or name in ("sudo", "doas")
        part.words = words
        if name in WRAPPERS or name == "xargs":
            words = _xargs(words, part) if name == "xargs" else _unwrap(name, WRAPPERS[name], words, part)
            if words:
                part.layers.append(words)
            continue
        inner_fx = _program(words, part, parts, home, depth)
        break
    for attr in ("dangers", "reads", "writes", "trees", "mentions"):
        getattr(part.fx, attr).extend(getattr(inner_fx, attr))
    part.fx.edit_ok, part.fx.cd, part.fx.changes_dir = inner_fx.edit_ok, inner_fx.cd, inner_fx.changes_dir
    part.problems.extend(inner_fx.problems)
    part.fx.readonly = inner_fx.readonly and not part.problems
    _redirects(cmd, part.fx)
    for nested in inner_fx.nested:
        _simple(SimpleCommand(nested, text=" ".join(w.raw for w in nested)), parts, home, depth)


def _collect(parsed: ParsedShell, parts: list[Part], home: str | None, depth: int) -> None:
    for cmd in parsed.commands:
        _simple(cmd, parts, home, depth)


def analyze_command(command: str, home: str | None = None) -> tuple[list[Part], list[str]]:
    """The parts ``command`` will run, and the problems that keep it from being understood."""
    parsed = parse_shell(command, home)
    parts: list[Part] = []
    _collect(parsed, parts, home, 0)
    return parts, list(parsed.problems)

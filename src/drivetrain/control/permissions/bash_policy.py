"""The Bash half of the policy: every part of a command must be allowed on its own.

1. A deny rule matching any part (at any wrapper level, or by the program's base name), or a
   deny rule on a file a part reads or writes, denies the whole command. If the command is
   not fully understood, a deny rule whose command name appears in its text denies it too.
2. An ask rule matching any part asks.
3. Anything not understood asks (bypassPermissions and a bare ``Bash`` allow rule let it run).
4. Each part: writes to drivetrain's settings ask; dangerous assignments (PATH=, LD_PRELOAD=…)
   and sudo ask; plan mode denies anything not read-only; then an allow rule (exact on any
   wrapper level, or prefix on the real command with every danger inside the rule's words),
   or the mode (read-only with every read inside the workspace; in acceptEdits also
   mkdir/touch/cp/mv/tee) must allow it; and each file it writes must be inside the
   workspace (or allowed by an Edit/Write rule), and allowed by the rule or by acceptEdits.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from drivetrain.host.paths import confining_root

from .commands import Part, analyze_command, known_program, program_name
from .decision import Decision, PolicyView, _by_rule, harmless, word_paths
from .rules import Behavior, Rule
from .search import covered_under
from .words import Word

Cwds = list[Path] | None  # the folders a part may run in; None: not knowable (a cd to a run-time path)


def _short(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _layers(p: Part, deny: bool = False) -> list[list[Word]]:
    """Every wrapper level, plus the same with a path-named program by its base name (/bin/rm → rm).

    For deny rules, an unknown program may be a wrapper of its own (``mywrap rm -rf /``): every
    later word that is not an option is tried as a command name too.
    """
    out = list(p.layers)
    inner = p.words
    if deny and inner and inner[0].value and not known_program(inner[0].value):
        out += [inner[k:] for k, w in enumerate(inner[1:], 1) if w.value and not w.value.startswith("-")]
    for layer in list(out):
        v = layer[0].value if layer else None
        if v and "/" in v:
            out.append([Word(v, os.path.basename(v))] + layer[1:])
    return out


def _cwds(parts: list[Part], cwd: Path) -> list[Cwds]:
    """The directories each part may run in: a cd adds its target (it may fail, or be in a subshell)."""
    cur: Cwds = [cwd]
    out = []
    for p in parts:
        out.append(cur)
        if p.fx.changes_dir:
            t = p.fx.cd
            if cur is None or t is None or t.value is None:
                cur = None
            elif os.environ.get("CDPATH") and not re.match(r"\.{0,2}(/|$)", t.value):
                cur = None  # cd searches $CDPATH for it
            else:
                cur = list(dict.fromkeys(cur + [Path(os.path.realpath(os.path.join(c, t.value))) for c in cur]))
    return out


def _file_rule(policy: PolicyView, behavior: Behavior, p: Part, cw: Cwds, cwd: Path) -> Decision | None:
    """A Read rule on a file the part reads (or may read: an unknown program's arguments, every file
    under a folder it reads whole), or a Write rule on a file it writes."""
    label = _short(p.text)
    reads = p.fx.reads + [m for w in p.fx.mentions for m in _mentioned_paths(w)]
    for tool, words, bare_ok in (("Read", reads, False), ("Write", p.fx.writes, True)):
        for w in words:
            for res in word_paths(w, cw, policy.home) or []:
                rule = policy._file_rule(behavior, tool, res, cwd)
                if rule and (bare_ok or not rule.bare):
                    return _by_rule(
                        behavior, rule, f"`{label}` {'reads' if tool == 'Read' else 'writes'} {res.lexical}"
                    )
    for w in p.fx.trees:
        for res in word_paths(w, cw, policy.home) or []:
            hit = covered_under(policy, behavior, res, cwd)
            if isinstance(hit, str):
                return Decision("ask", f"`{label}` reads every file under {res.lexical}, and {hit}", "builtin")
            if hit:
                return _by_rule(
                    behavior,
                    hit[0],
                    f"`{label}` reads every file under {res.lexical}, {hit[1]} "
                    "among them (the Grep tool searches a folder and skips such files)",
                )
    return None


def _mentioned_paths(w: Word) -> list[Word]:
    """A word an unknown program gets, as the file names it may stand for: itself, what follows
    ``--opt=``, ``REV:`` or ``host:``, and ``@file``."""
    v = w.value
    if v is None:
        return []
    out = [w] + [Word(w.raw, v.split(sep, 1)[1]) for sep in "=:" if sep in v]
    return out + [Word(w.raw, v[1:])] if v.startswith("@") else out


def decide_bash(policy: PolicyView, command: str, cwd: Path) -> Decision:
    try:
        parts, problems = analyze_command(command, str(policy.home))
    except RecursionError:
        return Decision("ask", "the command is nested too deeply to analyse", "builtin")
    except Exception as e:  # fail closed: a bug here must never allow a command
        return Decision("ask", f"could not analyse the command ({type(e).__name__}: {e})", "builtin")
    cwds = _cwds(parts, cwd)
    problems = problems + [f"`{_short(p.text)}`: {x}" for p in parts for x in p.problems]
    if d := _deny_or_ask_rules(policy, command, parts, cwds, problems, cwd):
        return d
    msrc = f"mode:{policy.mode}"
    if problems:
        if (
            policy.mode == "bypassPermissions" or policy._first("allow", "Bash", lambda r: r.bare)
        ) and not _mentions_protected(policy, command):
            return Decision("allow", f"not fully understood, but {policy.mode} allows every command", msrc)
        return Decision("ask", f"not fully understood: {problems[0]}", "builtin", details=tuple(problems))
    verdicts = [_part(policy, p, cw, cwd) for p, cw in zip(parts, cwds, strict=True)]
    details = tuple(f"{_short(p.text)}: {v.behavior}: {v.reason}" for p, v in zip(parts, verdicts, strict=True))
    for behavior in ("deny", "ask"):
        for v in verdicts:
            if v.behavior == behavior:
                return Decision(behavior, v.reason, v.source, v.rule, details)
    ruled = [v for v in verdicts if v.rule]
    reason = "; ".join(dict.fromkeys(v.reason for v in verdicts)) or "nothing to run"
    return Decision("allow", reason, ruled[0].source if ruled else msrc, ruled[0].rule if ruled else None, details)


def _deny_or_ask_rules(
    policy: PolicyView, command: str, parts: list[Part], cwds: list[Cwds], problems: list[str], cwd: Path
) -> Decision | None:
    """Steps 1 and 2: deny rules, then ask rules, on every part and every file a part touches."""
    unsure = None  # a folder too big to check against the Read rules: asked, unless something denies
    for behavior in ("deny", "ask"):
        if rule := policy._first(behavior, "Bash", lambda r: r.bare):
            return _by_rule(behavior, rule, f"every Bash command: {behavior}")
        for p, cw in zip(parts, cwds, strict=True):
            layers = _layers(p, deny=behavior == "deny")
            if rule := policy._first(behavior, "Bash", _matches_any(layers)):
                return _by_rule(behavior, rule, f"`{_short(p.text)}`: {behavior}")
            if d := _file_rule(policy, behavior, p, cw, cwd):
                if d.behavior == behavior:
                    return d
                unsure = unsure or d
        if problems and behavior == "deny":
            for rule in (r for r in policy.rules if r.behavior == "deny" and r.tool == "Bash" and r.words):
                name = rule.words[0].value or ""
                if re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", command):
                    return _by_rule(
                        "deny",
                        rule,
                        f"not fully understood ({problems[0]}) and it mentions {name!r}, which a deny rule names",
                    )
        if unsure:
            return unsure
    return None


def _matches_any(layers: list[list[Word]]) -> Callable[[Rule], bool]:
    return lambda r: any(r.match_words(x) for x in layers)


def _mentions_protected(policy: PolicyView, text: str) -> bool:
    return ".drivetrain" in text or str(policy.drivetrain_home) in text


def _allow_rule(policy: PolicyView, p: Part) -> tuple[Rule | None, str]:
    blocked = ""
    for r in policy.rules:
        if r.behavior != "allow" or not r.covers_tool("Bash") or r.bare:
            continue
        if not r.prefix and any(r.match_words(x) for x in p.layers):
            return r, ""
        if r.prefix and r.match_words(p.words):
            outside = [why for i, why in p.fx.dangers if i >= len(r.words)]
            if not outside:
                return r, ""
            blocked = blocked or (
                f"{r.text} matches `{_short(p.text)}`, but {outside[0]}; a prefix rule does not approve that"
            )
    return None, blocked


def _reads_inside(policy: PolicyView, p: Part, cw: Cwds, cwd: Path) -> bool:
    roots = policy.roots(cwd)
    for w in p.fx.reads:
        if harmless(w, writes=False):
            continue
        resolved = word_paths(w, cw, policy.home)
        if resolved is None:
            return False
        for res in resolved:
            if confining_root(res.real, roots) is None and not policy._file_rule("allow", "Read", res, cwd):
                return False
    return True


def _part(policy: PolicyView, p: Part, cw: Cwds, cwd: Path) -> Decision:
    mode, msrc, label = policy.mode, f"mode:{policy.mode}", _short(p.text)
    writes = [w for w in p.fx.writes if not harmless(w, writes=True)]
    read_only = p.fx.readonly and not p.fx.dangers and not p.problems
    rule, blocked = _allow_rule(policy, p)
    if d := _gates(policy, p, cw, cwd, rule, writes, read_only):
        return d
    if rule is None:
        if read_only and _reads_inside(policy, p, cw, cwd):
            why = "read-only"
        elif mode == "acceptEdits" and p.fx.edit_ok and not p.fx.dangers:
            why = "a file edit acceptEdits allows"
        else:
            why = blocked or (f"`{label}` reads outside the workspace" if read_only else f"no rule allows `{label}`")
            return Decision("ask", why, "builtin" if blocked else msrc)
    for w in writes:
        if d := _write_ok(policy, p, w, cw, cwd, by_rule=rule is not None):
            return d
    if rule is None:
        return Decision("allow", f"`{label}`: {why}", msrc)
    if rule.prefix and not _reads_inside(policy, p, cw, cwd):
        return Decision(
            "ask",
            f"{rule.text} matches `{label}`, but it reads outside the workspace (or a path "
            "only known at run time); a Read(...) allow rule can extend the workspace",
            msrc,
        )
    return _by_rule("allow", rule, f"`{label}` is allowed")


def _gates(
    policy: PolicyView, p: Part, cw: Cwds, cwd: Path, rule: Rule | None, writes: list[Word], read_only: bool
) -> Decision | None:
    """Before any allowance: the tool's own settings, dangerous assignments, sudo, plan, bypass, bare Bash."""
    mode, label = policy.mode, _short(p.text)
    for w in writes:
        if any(policy.protected(res) for res in word_paths(w, cw, policy.home) or []):
            return Decision("ask", f"`{label}` writes drivetrain's own settings: always asked", "builtin")
    if not read_only and _mentions_protected(policy, p.text):
        return Decision("ask", f"`{label}` may change drivetrain's own settings: always asked", "builtin")
    bare = policy._first("allow", "Bash", lambda r: r.bare)
    free = mode == "bypassPermissions" or bare is not None
    if p.dangerous_assigns and not free:
        return Decision(
            "ask", f"`{label}` sets {', '.join(p.dangerous_assigns)}, which can change what runs", "builtin"
        )
    if p.sudo and not free and not (rule and not rule.prefix):
        return Decision("ask", f"`{label}` runs as another user (sudo): always asked", "builtin")
    if (
        p.words
        and p.words[0].value
        and program_name(p.words[0].value) == "git"
        and (bare_repo := _bare_repository(policy, p, cw, cwd))
    ):
        return Decision(
            "ask",
            f"`{label}` would use the repository at {bare_repo}, a bare repository inside "
            "the workspace (its config can make git run programs)",
            "builtin",
        )
    if mode == "plan" and (not read_only or writes):
        return Decision("deny", f"plan mode allows only read-only commands: `{label}`", f"mode:{mode}")
    if mode == "bypassPermissions":
        return Decision("allow", "bypassPermissions allows everything", f"mode:{mode}")
    if bare is not None:
        return _by_rule("allow", bare, "every Bash command is allowed")
    return None


def _bare_repository(policy: PolicyView, p: Part, cw: Cwds, cwd: Path) -> Path | None:
    """A folder git would take for a bare repository (HEAD, objects/, refs/, no .git) on its way
    up from where it runs to the workspace root: files the agent may have written itself."""
    starts = [Path(os.path.realpath(c)) for c in cw or []]
    starts += [r.real for w in p.fx.reads if w.static for r in word_paths(w, cw, policy.home) or []]
    roots = policy.roots(cwd)
    for start in starts:
        root = confining_root(start, roots)
        for d in [start, *start.parents]:
            if root is None or not str(d).startswith(str(root)):
                break
            if (d / ".git").exists():
                break
            if d.name != ".git" and (d / "HEAD").is_file() and (d / "objects").is_dir() and (d / "refs").is_dir():
                return d
    return None


def _write_ok(policy: PolicyView, p: Part, w: Word, cw: Cwds, cwd: Path, by_rule: bool) -> Decision | None:
    label = _short(p.text)
    resolved = word_paths(w, cw, policy.home)
    if resolved is None:
        return Decision("ask", f"`{label}` writes to {w.raw}, which is only known at run time", "builtin")
    roots = policy.roots(cwd)
    for res in resolved:
        if policy._file_rule("allow", "Write", res, cwd):
            continue
        if confining_root(res.real, roots) is None:
            return Decision("ask", f"`{label}` writes {res.real}, outside the workspace", f"mode:{policy.mode}")
        if ".git" in res.real.parts or ".git" in res.lexical.parts:
            return Decision("ask", f"`{label}` writes under .git (which can make git run programs)", "builtin")
        if not by_rule and policy.mode != "acceptEdits":
            return Decision("ask", f"{policy.mode} mode asks before writing files (`{label}`)", f"mode:{policy.mode}")
    return None

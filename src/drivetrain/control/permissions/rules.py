"""Permission rules in Claude Code's syntax: parsing, and matching a tool use against them.

``Bash`` (every use), ``Bash(git status)`` (exactly these words), ``Bash(npm run test:*)``
(these words first; ``:*`` only at the end), ``Read(~/.ssh/**)``, ``Edit(src/**)``,
``Write(…)``, ``WebFetch(domain:example.com)``, ``mcp__server`` (every tool of that server).
Path patterns are gitignore-style: ``//abs/path``, ``~/path``, ``/path`` (from the project
root of the file the rule came from), ``path`` (from the working directory); a pattern
without a slash matches that name at any depth; ``*``, ``?``, ``[…]`` stay inside one
folder, ``**`` crosses folders; a matched folder covers everything inside it.
``Read(…)`` covers Read, Grep and Glob; ``Edit(…)`` covers Edit and Write; ``Write(…)``
covers Write. Bash rules match the *parsed words* of a command, never its text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from drivetrain.errors import ConfigError

from .shell import parse_shell
from .words import Word

Behavior = Literal["allow", "ask", "deny"]  # what a rule, a decision or a hook says of a tool use
BEHAVIORS: tuple[Behavior, ...] = get_args(Behavior)
PATH_TOOLS = {"Read": ("Read", "Grep", "Glob"), "Edit": ("Edit", "Write"), "Write": ("Write",)}
_RULE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*(?:\((.*)\))?\s*", re.DOTALL)


class SettingsError(ConfigError):
    """A settings file or a rule is malformed. The message names the file (or flag) and the rule."""


class RuleError(SettingsError):
    def __init__(self, source: str, rule: str, why: str):
        super().__init__(f"Invalid permission rule {rule!r} in {source}: {why}")
        self.source, self.rule, self.why = source, rule, why


@dataclass(frozen=True)
class PathPattern:
    text: str
    base: Path | None  # None: the working directory at decision time
    regex: re.Pattern[str]
    glob: str = "**"  # the pattern below its base ("**/name" for a name without a slash)

    def may_match_under(self, folder: Path, cwd: Path) -> bool:
        """Whether some path inside ``folder`` could match, so that reading the whole folder
        (``grep -r``, a search tool) could read a file the rule covers."""
        base = self.base if self.base is not None else cwd
        try:
            rel = folder.relative_to(base).as_posix()
        except ValueError:
            return folder == base or base.is_relative_to(folder)  # the rule's whole tree is inside
        parts = [] if rel == "." else rel.split("/")
        segments = [s for s in self.glob.split("/") if s]
        for k, part in enumerate(parts):
            if k >= len(segments):
                return True  # the folder is inside a path the pattern matches
            if "**" in segments[k]:
                return True
            if not re.fullmatch(glob_to_regex(segments[k]), part, re.DOTALL):
                return False
        return True

    def matches(self, path: Path, cwd: Path) -> bool:
        base = self.base if self.base is not None else cwd
        try:
            rel = path.relative_to(base).as_posix()
        except ValueError:
            return False
        parts = [] if rel == "." else rel.split("/")
        return any(self.regex.fullmatch("/".join(parts[:k])) for k in range(len(parts), -1, -1))


def glob_to_regex(glob: str) -> str:
    out, i, n = [], 0, len(glob)
    while i < n:
        if glob.startswith("/**", i) and i + 3 == n:
            out.append("(?:/.*)?")  # dir/** : everything inside, and the folder itself
            i += 3
        elif glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[" and "]" in glob[i + 2 :]:
            j = glob.index("]", i + 2)
            body = glob[i + 1 : j]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = j + 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out)


def parse_path_pattern(text: str, root: Path, home: Path) -> PathPattern:
    """Raises ValueError with the reason when the pattern is not understood."""
    c = text.strip()
    if not c:
        raise ValueError("the path pattern is empty")
    if c.startswith("//"):
        base, glob = Path("/"), c[2:]
    elif c == "~" or c.startswith("~/"):
        base, glob = home, c[2:]
    elif c.startswith("~"):
        raise ValueError("~user paths are not supported; write the absolute path as //home/user/...")
    elif c.startswith("/"):
        base, glob = root, c[1:]
    else:
        base, glob = None, c[2:] if c.startswith("./") else c
    if glob.startswith("!"):
        raise ValueError("negated patterns (!) are not supported; use a deny or ask rule instead")
    glob = glob.rstrip("/")
    if ".." in glob.split("/"):
        raise ValueError("'..' is not allowed in a path pattern")
    regex = glob_to_regex(glob)
    if base is None and "/" not in glob and glob not in ("", "**"):
        regex = "(?:.*/)?" + regex  # gitignore: a name without a slash matches at any depth
        glob = "**/" + glob
    return PathPattern(c, base, re.compile(regex, re.DOTALL), glob)


@dataclass(frozen=True)
class Rule:
    text: str
    behavior: Behavior
    source: str  # the settings file, or --allowedTools / --disallowedTools
    tool: str
    words: tuple[Word, ...] = ()  # Bash(...)
    prefix: bool = False  # Bash(...:*)
    pattern: PathPattern | None = None  # Read/Edit/Write(...)
    domain: str | None = None  # WebFetch(domain:...)

    @property
    def bare(self) -> bool:
        return not self.words and self.pattern is None and self.domain is None

    def covers_tool(self, tool_name: str) -> bool:
        if self.tool in PATH_TOOLS:
            return tool_name in PATH_TOOLS[self.tool]
        if self.tool.startswith("mcp__") and self.tool.count("__") == 1:
            return tool_name == self.tool or tool_name.startswith(self.tool + "__")
        return tool_name == self.tool

    def match_words(self, words: Sequence[Word]) -> bool:
        """Exact: the same words. Prefix: the command's words start with the rule's words."""
        if self.bare:
            return True
        n = len(self.words)
        if len(words) < n or (not self.prefix and len(words) != n):
            return False
        return all(
            c.value is not None and c.value == r.value and c.glob == r.glob
            for c, r in zip(words, self.words, strict=False)
        )


def parse_rule(text: str, behavior: Behavior, source: str, root: Path, home: Path) -> Rule:
    if not isinstance(text, str):
        raise RuleError(source, repr(text), "a rule must be a string")
    m = _RULE.fullmatch(text)
    if not m:
        raise RuleError(source, text, "expected ToolName or ToolName(specifier), e.g. Bash(git status:*)")
    tool, content = m.group(1), m.group(2)
    if content is not None and not content.strip():
        raise RuleError(source, text, "empty parentheses; write the bare tool name for every use")
    if content is None or content.strip() == "*":
        return Rule(text, behavior, source, tool)
    if tool == "Bash":
        words, prefix = _bash_words(text, source, content)
        return Rule(text, behavior, source, tool, words=words, prefix=prefix)
    if tool in PATH_TOOLS:
        try:
            return Rule(text, behavior, source, tool, pattern=parse_path_pattern(content, root, home))
        except ValueError as e:
            raise RuleError(source, text, str(e)) from None
    if tool == "WebFetch":
        domain = content.strip()
        if not domain.startswith("domain:") or not re.fullmatch(r"(\*\.)?[A-Za-z0-9.-]+", domain[7:].strip()):
            raise RuleError(source, text, "WebFetch rules take domain:HOST, e.g. WebFetch(domain:example.com)")
        return Rule(text, behavior, source, tool, domain=domain[7:].strip().lower())
    hint = " (Read(...) covers Grep and Glob)" if tool in ("Grep", "Glob") else ""
    raise RuleError(
        source,
        text,
        f"{tool} takes no specifier: only Bash, Read, Edit, Write and WebFetch do{hint}; "
        f"write the bare name {tool} to match every use",
    )


def _bash_words(text: str, source: str, content: str) -> tuple[tuple[Word, ...], bool]:
    body = content.strip()
    prefix = body.endswith(":*")
    if prefix:
        body = body[:-2].rstrip()
    if ":*" in body:
        raise RuleError(source, text, ":* is only allowed at the end of a Bash rule")
    parsed = parse_shell(body)
    if parsed.problems:
        raise RuleError(source, text, parsed.problems[0])
    if len(parsed.commands) != 1 or parsed.commands[0].assigns or parsed.commands[0].redirects:
        raise RuleError(
            source,
            text,
            "a Bash rule must be one simple command (no ;, &&, |, redirections "
            "or VAR=value): each part of a command is checked on its own",
        )
    words = parsed.commands[0].words
    if not words:
        raise RuleError(source, text, "the command is empty")
    for w in words:
        if w.value is None:
            raise RuleError(source, text, f"{w.raw} is not a literal word ({w.why}); rules match literal words")
        if w.value == "*" and w.glob:
            raise RuleError(
                source,
                text,
                "a lone * is not a wildcard in Bash rules; end the rule with :* "
                "to match every command starting with these words",
            )
    return tuple(words), prefix


def split_tool_list(values: Iterable[str], source: str) -> list[str]:
    """``--allowedTools "Bash(git log:*),Edit" Read`` → the rules, split at commas/spaces outside ()."""
    rules: list[str] = []
    for value in values:
        depth = 0
        cur: list[str] = []
        for ch in value:
            if ch in ",\n\t " and depth == 0:
                if "".join(cur).strip():
                    rules.append("".join(cur).strip())
                cur = []
                continue
            depth += (ch == "(") - (ch == ")")
            if depth < 0:
                raise RuleError(source, value, "unbalanced parentheses")
            cur.append(ch)
        if depth:
            raise RuleError(source, value, "unbalanced parentheses")
        if "".join(cur).strip():
            rules.append("".join(cur).strip())
    return rules

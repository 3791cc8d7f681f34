"""Glob: find files by name pattern, newest first. Also the shared path matching:
glob patterns, a .gitignore subset, and a tree walk that honours it (Grep uses these too).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from drivetrain.jsontypes import JsonObject

from .base import ToolContext, ToolResult

MAX_RESULTS = 100
_MAGIC = re.compile(r"[*?\[{]")


def expand_braces(pattern: str) -> list[str]:
    """``*.{ts,tsx}`` -> ``['*.ts', '*.tsx']`` (nested groups too)."""
    depth, start = 0, -1
    for i, ch in enumerate(pattern):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                options, level, cur = [], 0, ""
                for c in pattern[start + 1 : i]:
                    if c == "," and level == 0:
                        options.append(cur)
                        cur = ""
                        continue
                    level += (c == "{") - (c == "}")
                    cur += c
                options.append(cur)
                if len(options) == 1:  # "{a}" is not a choice: keep it literal
                    continue
                head, tail = pattern[:start], pattern[i + 1 :]
                return [x for opt in options for x in expand_braces(head + opt + tail)]
    return [pattern]


def glob_to_regex(pattern: str) -> str:
    """Translate one glob (no braces) to a regex over a '/'-separated relative path."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**", i):
            # "**/" is zero or more folders; "/**" at the end is everything below; else anything.
            if pattern.startswith("**/", i):
                out.append("(?:.*/)?")
                i += 3
            else:
                out.append(".*")
                i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "[" and "]" in pattern[i + 2 :]:
            j = pattern.index("]", i + 2)
            body = pattern[i + 1 : j]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def compile_glob(pattern: str) -> re.Pattern[str]:
    alternatives = "|".join(f"(?:{glob_to_regex(p)})" for p in expand_braces(pattern))
    return re.compile(f"(?:{alternatives})\\Z")


@dataclass(frozen=True)
class IgnoreRule:
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool
    anchored: bool  # has a slash: matched against the path from the .gitignore's folder

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        return bool(self.regex.match(rel if self.anchored else rel.rsplit("/", 1)[-1]))


def parse_gitignore(text: str) -> list[IgnoreRule]:
    """The common subset: globs, ``**``, ``dir/``, ``!negation``, ``/anchored``, ``#`` comments."""
    rules = []
    for line in text.splitlines():
        line = line.rstrip() if not line.endswith("\\ ") else line
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        line = line[1:] if negated else line
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        regex = re.compile(glob_to_regex(line.lstrip("/")) + r"\Z")
        rules.append(IgnoreRule(regex, negated, dir_only, anchored))
    return rules


def _read_rules(path: Path) -> list[IgnoreRule]:
    try:
        return parse_gitignore(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return []


class IgnoreStack:
    """The .gitignore files in force for one folder: deeper files win, and the last rule in a file."""

    def __init__(self, layers: list[tuple[str, list[IgnoreRule]]] | None = None):
        self.layers = layers or []

    def push(self, folder: str, rules: list[IgnoreRule]) -> IgnoreStack:
        return IgnoreStack(self.layers + [(folder, rules)]) if rules else self

    def ignored(self, path: str, is_dir: bool) -> bool:
        for folder, rules in reversed(self.layers):
            if not path.startswith(folder.rstrip("/") + "/"):
                continue
            rel = path[len(folder.rstrip("/")) + 1 :]
            for rule in reversed(rules):
                if rule.matches(rel, is_dir):
                    return not rule.negated
        return False


def ancestor_ignores(root: Path) -> IgnoreStack:
    """Rules from .gitignore files above ``root`` (as ripgrep reads them) and .git/info/exclude."""
    stack = IgnoreStack()
    for folder in reversed(root.parents):  # outermost first: deeper layers win
        stack = stack.push(folder.as_posix(), _read_rules(folder / ".git" / "info" / "exclude"))
        stack = stack.push(folder.as_posix(), _read_rules(folder / ".gitignore"))
    return stack.push(root.as_posix(), _read_rules(root / ".git" / "info" / "exclude"))


def walk_files(root: Path, max_depth: int | None = None) -> Iterator[Path]:
    """Files under ``root``, never inside .git, skipping what .gitignore files ignore."""
    root = Path(os.path.abspath(root))
    # Each folder's inherited rules and depth, handed down as the walk goes (top-down).
    state = {root.as_posix(): (ancestor_ignores(root), 0)}
    for dirpath, dirnames, filenames in os.walk(root):
        stack, depth = state.pop(dirpath, (IgnoreStack(), 0))
        stack = stack.push(dirpath, _read_rules(Path(dirpath) / ".gitignore"))
        keep = []
        for d in sorted(dirnames):
            full = os.path.join(dirpath, d)
            if d == ".git" or stack.ignored(full, True):
                continue
            if max_depth is None or depth + 1 < max_depth:
                keep.append(d)
                state[full] = (stack, depth + 1)
        dirnames[:] = keep
        for f in sorted(filenames):
            full = os.path.join(dirpath, f)
            if not stack.ignored(full, False):
                yield Path(full)


def display_path(path: Path, cwd: Path) -> str:
    """Relative to the working directory when inside it (shorter, and Read accepts it)."""
    try:
        return Path(path).relative_to(os.path.abspath(cwd)).as_posix()
    except ValueError:
        return str(path)


def split_literal_prefix(pattern: str) -> tuple[str, str]:
    """``src/app/**/*.py`` -> (``src/app``, ``**/*.py``): walk only where matches can be."""
    parts = pattern.split("/")
    i = 0
    while i < len(parts) - 1 and not _MAGIC.search(parts[i]):
        i += 1
    prefix = "/".join(parts[:i])
    return (prefix or ("/" if pattern.startswith("/") else "")), "/".join(parts[i:])


class Glob:
    """Claude Code's ``Glob``: files matching a pattern, newest first, respecting .gitignore and Read deny rules."""

    name = "Glob"
    description = (
        "Find files whose path matches a glob pattern, newest (most recently modified) first. "
        "`*` matches within one folder name, `**` any number of folders, `{a,b}` either. "
        "Examples: `**/*.py` (all Python files), `src/**/test_*.py`, `*.{json,toml}` (top level "
        "only). Searches the working directory, or `path` if given. Files ignored by .gitignore "
        f"and the .git folder are skipped. At most {MAX_RESULTS} results. Use Grep to search "
        "file contents."
    )
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Glob pattern, e.g. **/*.ts"},
            "path": {"type": "string", "description": "Folder to search in (default: the working directory)."},
        },
        "required": ["pattern"],
    }

    async def call(self, input: JsonObject, ctx: ToolContext) -> ToolResult:
        pattern, path = input.get("pattern"), input.get("path")
        if not isinstance(pattern, str) or not pattern.strip():
            return ToolResult('pattern is required, e.g. "**/*.py".', is_error=True)
        if path is not None and not isinstance(path, str):
            return ToolResult("path must be a string (a folder).", is_error=True)
        root = ctx.resolve(path) if path else ctx.cwd
        if not root.is_dir():
            return ToolResult(
                f"{root} is not a directory." if root.exists() else f"Directory does not exist: {root}", is_error=True
            )
        prefix, rest = split_literal_prefix(pattern.removeprefix("./"))
        root = root / prefix if prefix else root
        return await asyncio.to_thread(self._glob, root, rest, pattern, ctx)

    def _glob(self, root: Path, rest: str, pattern: str, ctx: ToolContext) -> ToolResult:
        if not root.is_dir():
            return ToolResult(f"No files match {pattern} ({root} does not exist).")
        regex = compile_glob(rest)
        expanded = expand_braces(rest)
        max_depth = None if any("**" in p for p in expanded) else max(p.count("/") for p in expanded) + 1
        found = []
        skipped = Skipped(ctx, root)
        base = root.as_posix().rstrip("/") + "/"
        for f in walk_files(root, max_depth):
            if regex.match(f.as_posix()[len(base) :]) and not skipped.hides(f):
                try:
                    found.append((f.stat().st_mtime, f))
                except OSError:  # vanished, or a dangling symlink
                    continue
        if not found:
            return ToolResult(f"No files match {pattern} in {root}.{skipped.note(' ')}")
        found.sort(key=lambda mf: (-mf[0], mf[1].as_posix()))
        lines = [display_path(f, ctx.cwd) for _, f in found[:MAX_RESULTS]]
        if len(found) > MAX_RESULTS:
            lines.append(
                f"({len(found) - MAX_RESULTS} more files omitted: showing the "
                f"{MAX_RESULTS} newest. Use a narrower pattern or path.)"
            )
        return ToolResult("\n".join(lines) + skipped.note("\n"))


class Skipped:
    """The files a search leaves out because a permission rule hides them, counted by reason."""

    def __init__(self, ctx: ToolContext, root: Path):
        self.filter = ctx.read_filter if ctx.read_filter and ctx.read_filter.may_hide_under(root) else None
        self.root = root
        self.counts: dict[str, int] = {}

    def hides(self, path: Path) -> bool:
        why = self.filter.hidden(path, self.root) if self.filter else None
        if why:
            self.counts[why] = self.counts.get(why, 0) + 1
        return why is not None

    def note(self, sep: str) -> str:
        """``(1 file skipped: denied by Read(**/.env))``, after ``sep``; empty if none was."""
        if not self.counts:
            return ""
        return (
            sep
            + "("
            + "; ".join(f"{n} file{'s' if n != 1 else ''} skipped: {why}" for why, n in self.counts.items())
            + ")"
        )

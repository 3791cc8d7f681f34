"""Grep: regex search over files, respecting .gitignore.

ripgrep does the searching when it is on PATH; otherwise a pure-Python walk does. Both
back-ends produce the same ``FileHits`` and share one formatter, so the model sees one format.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, get_args, overload

from drivetrain.jsontypes import JsonObject

from .base import ToolContext, ToolResult
from .glob import Skipped, compile_glob, display_path, walk_files
from .read import int_field

GrepMode = Literal["content", "files_with_matches", "count"]  # Grep's output_mode
MODES: tuple[GrepMode, ...] = get_args(GrepMode)
MAX_LINE_CHARS = 500
OUTPUT_CAP = 30_000
RG_TIMEOUT_S = 120
# The fallback's subset of ripgrep's --type names.
TYPES = {
    "py": "*.{py,pyi}",
    "js": "*.{js,jsx,mjs,cjs,vue}",
    "ts": "*.{ts,tsx,mts,cts}",
    "rust": "*.rs",
    "go": "*.go",
    "java": "*.{java,jsp}",
    "c": "*.{c,h,H}",
    "cpp": "*.{cpp,cc,cxx,c++,hpp,hh,hxx,h,inl}",
    "rb": "*.{rb,gemspec}",
    "ruby": "*.{rb,gemspec}",
    "php": "*.{php,php3,php4,php5,phtml}",
    "sh": "*.{sh,bash,zsh}",
    "html": "*.{htm,html}",
    "css": "*.{css,scss}",
    "json": "*.json",
    "yaml": "*.{yaml,yml}",
    "toml": "*.toml",
    "md": "*.{md,markdown,mdx}",
    "markdown": "*.{md,markdown,mdx}",
    "txt": "*.txt",
    "sql": "*.sql",
    "swift": "*.swift",
    "kotlin": "*.{kt,kts}",
    "cs": "*.cs",
}


@dataclass
class FileHits:
    path: Path
    lines: list[tuple[int, str, bool]] = field(default_factory=list)  # (number, text, is_match)

    @property
    def match_count(self) -> int:
        return sum(1 for _, _, is_match in self.lines if is_match)


@dataclass(frozen=True)
class Query:
    pattern: str
    root: Path  # absolute; a folder or one file
    mode: GrepMode = "files_with_matches"
    ignore_case: bool = False
    before: int = 0  # context lines, content mode only
    after: int = 0
    glob: str | None = None
    type: str | None = None
    numbers: bool = True
    head_limit: int | None = None

    @property
    def files_only(self) -> bool:
        return self.mode == "files_with_matches"


def search_python(q: Query, skipped: Skipped | None = None) -> list[FileHits]:
    """The fallback back-end: walk (honouring .gitignore), skip binary files, match line by line."""
    regex = re.compile(q.pattern, re.IGNORECASE if q.ignore_case else 0)
    keep = _path_filter(q, type_glob=compile_glob(TYPES[q.type]) if q.type else None)
    files = [q.root] if q.root.is_file() else (f for f in walk_files(q.root) if keep(f))
    hits: list[FileHits] = []
    for path in files:
        if not path.is_file() or (skipped and skipped.hides(path)):  # FIFOs and sockets would block
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if b"\0" in data:
            continue
        lines = [line.rstrip("\r") for line in data.decode("utf-8", errors="replace").split("\n")]
        if lines and lines[-1] == "":
            lines.pop()
        matched = (i for i, line in enumerate(lines) if regex.search(line))
        wanted: dict[int, bool] = {}  # line index -> is a match (else context)
        for i in matched:
            for j in range(max(0, i - q.before), min(len(lines), i + q.after + 1)):
                wanted.setdefault(j, False)
            wanted[i] = True
            if q.files_only:
                break
        if wanted:
            hits.append(FileHits(path, [(j + 1, lines[j], m) for j, m in sorted(wanted.items())]))
    return hits


def _path_filter(q: Query, type_glob: re.Pattern[str] | None = None) -> Callable[[Path], bool]:
    """The ``glob`` (and fallback ``type``) filter. Applied after ignore rules, never instead:
    ripgrep's own --glob would re-include ignored files, so neither back-end uses it."""
    glob = compile_glob(q.glob) if q.glob else None
    whole_path = q.glob is not None and "/" in q.glob  # a glob naming folders matches the relative path, else the name
    prefix = q.root.as_posix().rstrip("/") + "/"

    def keep(path: Path) -> bool:
        rel = path.as_posix()[len(prefix) :]
        name = path.name
        if glob and not glob.match(rel if whole_path else name):
            return False
        return not type_glob or bool(type_glob.match(name))

    return keep


async def search_rg(rg: str, q: Query, skipped: Skipped | None = None) -> list[FileHits]:
    hits = await _run_rg(rg, q, files=False)
    if not skipped or not skipped.filter:
        return hits
    # Count the files left out whether or not they match (a count of matching ones would tell
    # what they hold), then drop their hits.
    for path in await _run_rg(rg, q, files=True):
        skipped.hides(path)
    return [h for h in hits if not skipped.filter.hidden(h.path, skipped.root)]


@overload
async def _run_rg(rg: str, q: Query, files: Literal[False]) -> list[FileHits]: ...


@overload
async def _run_rg(rg: str, q: Query, files: Literal[True]) -> list[Path]: ...


async def _run_rg(rg: str, q: Query, files: bool) -> list[FileHits] | list[Path]:
    """ripgrep's hits, or (files=True) the files it would search."""
    args = [rg, "--no-config", "--no-require-git", "--hidden", "--glob", "!.git"]
    if q.type:
        args += ["--type", q.type]
    if files:
        args.append("--files")
    else:
        args += ["--json"] + (["-i"] if q.ignore_case else []) + (["--max-count", "1"] if q.files_only else [])
        args += ["-B", str(q.before), "-A", str(q.after)] if q.before or q.after else []
        args += ["-e", q.pattern]
    args += ["--", str(q.root)]
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), RG_TIMEOUT_S)
    except TimeoutError:
        raise GrepError(f"Search timed out after {RG_TIMEOUT_S} s; narrow it with path, glob or type.") from None
    finally:
        if proc.returncode is None:  # timed out or cancelled
            proc.kill()
    keep: Callable[[Path], bool] = _path_filter(q) if q.root.is_dir() else (lambda p: True)
    if files:
        return [p for p in (Path(os.fsdecode(line)) for line in out.splitlines()) if keep(p)]
    by_path: dict[str, FileHits] = {}
    for raw in out.splitlines():
        msg: JsonObject = json.loads(raw)
        if msg["type"] not in ("match", "context"):
            continue
        data = msg["data"]
        path = _rg_text(data["path"])
        text = _rg_text(data["lines"]).rstrip("\n").rstrip("\r")
        hits = by_path.setdefault(path, FileHits(Path(path)))
        hits.lines.append((data["line_number"], text, msg["type"] == "match"))
    # Exit 1 is "no match"; 2 with results means some files could not be read: keep the results.
    if proc.returncode == 2 and not by_path:
        raise GrepError(err.decode(errors="replace").strip() or "ripgrep failed")
    return [h for h in by_path.values() if keep(h.path)]


def _rg_text(obj: JsonObject) -> str:
    if "text" in obj:
        text: str = obj["text"]
        return text
    return base64.b64decode(obj["bytes"]).decode("utf-8", errors="replace")


class GrepError(Exception):
    """Bad input or a failed search: shown to the model as an is_error result."""


def format_hits(hits: list[FileHits], q: Query, cwd: Path) -> str:
    """One output format for both back-ends; files in path order (rg's own order varies)."""
    hits = sorted(hits, key=lambda h: h.path.as_posix())
    if not hits:
        # Say what was searched: a model that took Grep for a file-name search needs to learn it here.
        where = display_path(q.root, cwd) or "."
        scope = f" in files matching {q.glob!r}" if q.glob else ""
        return (
            f"No matches found: no line in {where}{scope} matches the regex {q.pattern!r}. Grep searches "
            "file contents; to find files by name, use Glob."
        )
    if q.mode == "files_with_matches":
        header = f"Found {_plural(len(hits), 'file')}"
        out = [display_path(h.path, cwd) for h in hits]
    elif q.mode == "count":
        total = sum(h.match_count for h in hits)
        header = f"Found {_plural(total, 'matching line')} in {_plural(len(hits), 'file')}"
        out = [f"{display_path(h.path, cwd)}:{h.match_count}" for h in hits]
    else:
        header, out = None, _content_lines(hits, q.numbers, cwd)
    total_lines = len(out)
    if q.head_limit and total_lines > q.head_limit:
        out = out[: q.head_limit]
    text, size = [], 0
    for line in out:
        size += len(line) + 1
        if size > OUTPUT_CAP:
            break
        text.append(line)
    body = "\n".join(([header] if header else []) + text)
    if len(text) < total_lines:
        body += (
            f"\n\n(Showing {len(text)} of {total_lines} results. Narrow the search with path, "
            "glob or type, or raise head_limit.)"
        )
    return body


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _content_lines(hits: list[FileHits], numbers: bool, cwd: Path) -> list[str]:
    with_context = any(not m for h in hits for _, _, m in h.lines)
    out: list[str] = []
    for h in hits:
        name, prev = display_path(h.path, cwd), None
        for n, text, is_match in sorted(h.lines):
            if with_context and out and (prev is None or n != prev + 1):
                out.append("--")  # a gap: like grep/rg, separate non-adjacent groups
            prev = n
            if len(text) > MAX_LINE_CHARS:
                text = text[:MAX_LINE_CHARS] + f" [... line cut, {len(text)} chars]"
            sep = ":" if is_match else "-"
            out.append(f"{name}{sep}{n}{sep}{text}" if numbers else f"{name}{sep}{text}")
    return out


class Grep:
    """Claude Code's ``Grep``: a regular-expression search (ripgrep when installed, else Python), in its output
    modes."""

    name = "Grep"
    description = (
        "Search file contents with a regular expression (ripgrep syntax: escape literal ( [ { . "
        "with a backslash). Searches the working directory, or `path` (a folder or one file); "
        "files ignored by .gitignore, the .git folder and binary files are skipped. "
        'output_mode: "files_with_matches" (default) lists matching files; "content" shows '
        'matching lines as path:line:text (use -A/-B/-C for context lines); "count" gives '
        'matches per file. Filter files with glob (e.g. "*.py", "src/**/*.{ts,tsx}") or type '
        '(e.g. "py", "js", "rust"). -i ignores case. head_limit keeps the first N results.'
    )
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression to search for."},
            "path": {"type": "string", "description": "File or folder to search (default: working directory)."},
            "glob": {"type": "string", "description": "Only files matching this glob, e.g. *.py"},
            "type": {"type": "string", "description": "Only files of this type, e.g. py, js."},
            "output_mode": {"type": "string", "enum": list(MODES), "default": "files_with_matches"},
            "-i": {"type": "boolean", "description": "Case-insensitive search."},
            "-n": {"type": "boolean", "description": "Show line numbers in content mode (default true)."},
            "-A": {"type": "integer", "minimum": 0, "description": "Context lines after a match."},
            "-B": {"type": "integer", "minimum": 0, "description": "Context lines before a match."},
            "-C": {"type": "integer", "minimum": 0, "description": "Context lines before and after."},
            "head_limit": {"type": "integer", "minimum": 0, "description": "Show only the first N results (0 = all)."},
        },
        "required": ["pattern"],
    }

    def __init__(self, use_ripgrep: bool | None = None):
        """use_ripgrep: None = use rg if it is on PATH; False = always the Python fallback."""
        self.rg = shutil.which("rg") if use_ripgrep is not False else None
        if use_ripgrep and not self.rg:
            raise ValueError("use_ripgrep=True, but rg is not on PATH")

    async def call(self, input: JsonObject, ctx: ToolContext) -> ToolResult:
        try:
            q = self._parse(input, ctx)
            skipped = Skipped(ctx, q.root)
            if self.rg:
                hits = await search_rg(self.rg, q, skipped)
            else:
                hits = await asyncio.to_thread(search_python, q, skipped)
        except GrepError as e:
            return ToolResult(str(e), is_error=True)
        except re.error as e:
            return ToolResult(
                f"Invalid regular expression {input.get('pattern')!r}: {e}. "
                "Escape literal characters like ( [ { . with a backslash.",
                is_error=True,
            )
        return ToolResult(format_hits(hits, q, ctx.cwd) + skipped.note("\n\n"))

    def _parse(self, input: JsonObject, ctx: ToolContext) -> Query:
        pattern = input.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise GrepError("pattern is required: a regular expression to search for.")
        mode = input.get("output_mode") or "files_with_matches"
        if mode not in MODES:
            raise GrepError(f"output_mode must be one of {', '.join(MODES)}; got {mode!r}.")
        ints: dict[str, int | None] = {}
        for k in ("-A", "-B", "-C", "head_limit"):
            value = int_field(input, k, minimum=0)
            if isinstance(value, str):
                raise GrepError(value)
            ints[k] = value
        for key in ("glob", "type", "path"):
            if input.get(key) is not None and not isinstance(input[key], str):
                raise GrepError(f"{key} must be a string.")
        if input.get("type") and not self.rg and input["type"] not in TYPES:
            raise GrepError(f"Unknown type {input['type']!r}. Known: {', '.join(sorted(TYPES))}; or use glob instead.")
        root = ctx.resolve(input["path"]) if input.get("path") else ctx.cwd
        if not root.exists():
            raise GrepError(f"Path does not exist: {root}")
        # -A/-B win over -C, as in grep; context lines only mean something in content mode.
        context = ints["-C"] or 0
        before = ints["-B"] if ints["-B"] is not None else context
        after = ints["-A"] if ints["-A"] is not None else context
        if mode != "content":
            before = after = 0
        return Query(
            pattern,
            Path(os.path.abspath(root)),
            mode,
            bool(input.get("-i")),
            before,
            after,
            input.get("glob") or None,
            input.get("type") or None,
            numbers=input.get("-n", True) is not False,
            head_limit=ints["head_limit"] or None,
        )

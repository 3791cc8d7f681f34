"""The Tool seam: a name, a schema and one async call. Plus ``@tool`` for typed functions.

Tool failures are data: a tool raises ``ToolError`` (or anything else) and the
loop turns it into an ``is_error`` tool_result with the real message. Only
``HarnessError`` (see ``drivetrain.errors``) ends a run.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, ParamSpec, Protocol, TypeVar, overload, runtime_checkable

import pydantic
from pydantic.fields import FieldInfo

from drivetrain.jsontypes import JsonObject

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class ToolResult:
    """What a tool returns: the content the model reads (text, or content blocks), whether it is an error."""

    content: str | list[JsonObject]  # text, or content blocks in the wire format
    is_error: bool = False
    meta: JsonObject = field(default_factory=dict)  # facts for the audit log (e.g. exit_code), never sent to the model

    @property
    def text(self) -> str:
        """The content as text (the text of its blocks, when it is blocks)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(b.get("text", "") for b in self.content if b.get("type") == "text")


class ReadFilter(Protocol):
    """Files a search must leave out although its folder may be searched (Read deny rules)."""

    def hidden(self, path: Path, searched: Path) -> str | None:
        """Why a search of ``searched`` must skip ``path`` (e.g. "denied by Read(**/.env)"), or None."""
        ...

    def may_hide_under(self, folder: Path) -> bool:
        """Whether any file under ``folder`` could be hidden (if not, nothing needs checking)."""
        ...


@dataclass
class ToolContext:
    """What a tool may know about the run it serves."""

    cwd: Path
    # Folders file writes must stay inside, written without following symlinks (empty: not confined).
    roots: list[Path] = field(default_factory=list)
    extra: dict[str, object] = field(default_factory=dict)  # whatever the embedding application hands its tools
    read_filter: ReadFilter | None = None  # what Grep and Glob must skip (None: nothing)
    # This session's saved tool outputs (context.py): read tools may read them although outside the workspace.
    outputs: Path | None = None
    session_id: str = ""  # the run's session ("" when it is not saved)
    tool_use_id: str = ""  # the call being served (each call gets its own copy of the context)
    deadline: float | None = None  # time.monotonic() at which the run's wall budget ends (None: no budget)

    def resolve(self, file_path: str) -> Path:
        p = Path(file_path).expanduser()
        return p if p.is_absolute() else self.cwd / p


class ToolError(Exception):
    """A failure the model should see, as an is_error tool_result with this message."""


@runtime_checkable
class Tool(Protocol):
    """The tool seam: a name, a description and an input schema the model sees, and one async call.

    Read-only members, so a class attribute, an instance attribute or a property each fits."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> JsonObject: ...

    async def call(self, input: JsonObject, ctx: ToolContext) -> ToolResult: ...


def tool_spec(t: Tool) -> JsonObject:
    """The Anthropic `tools` entry for a tool."""
    return {"name": t.name, "description": t.description, "input_schema": t.input_schema}


class FunctionTool(Generic[P, R]):
    """A typed Python function (sync or async) made into a Tool; input validated by pydantic."""

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        input_schema: JsonObject | None = None,
    ):
        self.fn = fn
        self.name = name or fn.__name__
        summary, described = parse_docstring(inspect.getdoc(fn) or "")
        self.description = description or summary or self.name
        sig = inspect.signature(fn)
        self._wants_ctx = "ctx" in sig.parameters
        fields: dict[str, tuple[object, FieldInfo]] = {}
        for pname, p in sig.parameters.items():
            if pname == "ctx":
                continue
            ann = p.annotation if p.annotation is not inspect.Parameter.empty else object  # pydantic: any value
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[pname] = (ann, pydantic.Field(default, description=described.get(pname)))
        # mypy checks a **dict against every keyword parameter of create_model (__config__, __doc__, ...), not only
        # the **field_definitions it fills: a mypy limitation
        self._model = pydantic.create_model(f"{self.name}_input", **fields)  # type: ignore[call-overload]
        self._raw_schema = input_schema is not None
        self.input_schema = input_schema or _clean_schema(self._model.model_json_schema())

    async def call(self, input: JsonObject, ctx: ToolContext) -> ToolResult:
        kwargs: dict[str, object]
        if self._raw_schema:
            kwargs = dict(input)
        else:
            try:
                kwargs = dict(self._model.model_validate(input))
            except pydantic.ValidationError as e:
                return ToolResult(
                    f"Invalid input for {self.name}: {_format_validation(e)}\n"
                    f"Expected schema: {json.dumps(self.input_schema)}",
                    is_error=True,
                )
        if self._wants_ctx:
            kwargs["ctx"] = ctx
        fn: Callable[..., object] = self.fn  # called with the validated input as keywords
        out: object
        if inspect.iscoroutinefunction(fn):
            out = await fn(**kwargs)
        else:
            out = await asyncio.to_thread(fn, **kwargs)
        if isinstance(out, ToolResult):
            return out
        if isinstance(out, str):
            return ToolResult(out)
        return ToolResult(json.dumps(out, default=str))

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)


@overload
def tool(
    fn: Callable[P, R],
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: JsonObject | None = None,
) -> FunctionTool[P, R]: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: JsonObject | None = None,
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: JsonObject | None = None,
) -> FunctionTool[P, R] | Callable[[Callable[P, R]], FunctionTool[P, R]]:
    """Make a typed function a ``Tool``: ``@tool`` or ``@tool(name=..., input_schema=...)``.

    The input schema comes from the type hints; the description from the docstring, whose ``Args:`` section
    (``name: what it is``, continued on more-indented lines) describes each parameter. A parameter named ``ctx``
    receives the ``ToolContext``. ``input_schema`` replaces the derived schema (the input is then not validated).
    """

    def wrap(f: Callable[P, R]) -> FunctionTool[P, R]:
        return FunctionTool(f, name=name, description=description, input_schema=input_schema)

    return wrap(fn) if fn is not None else wrap


_SECTIONS = (
    "Args:",
    "Arguments:",
    "Parameters:",
    "Returns:",
    "Return:",
    "Raises:",
    "Yields:",
    "Examples:",
    "Example:",
    "Note:",
    "Notes:",
)


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """A Google-style docstring as (the text without its sections, {parameter: description from ``Args:``})."""
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() in _SECTIONS), len(lines))
    summary = "\n".join(lines[:start]).strip()
    described: dict[str, str] = {}
    section, current, indent = "", None, 0
    for line in lines[start:]:
        stripped = line.strip()
        if stripped in _SECTIONS and len(line) - len(line.lstrip()) == 0:
            section, current = stripped, None
            continue
        if section not in ("Args:", "Arguments:", "Parameters:") or not stripped:
            continue
        depth = len(line) - len(line.lstrip())
        head, sep, rest = stripped.partition(":")
        name = head.split("(")[0].strip().lstrip("*")
        if sep and name.isidentifier() and (current is None or depth <= indent):
            current, indent = name, depth
            described[name] = rest.strip()
        elif current is not None:
            described[current] = f"{described[current]} {stripped}".strip()
    return summary, described


def _clean_schema(schema: JsonObject) -> JsonObject:
    schema = dict(schema)
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    schema.setdefault("properties", {})
    return schema


def _format_validation(e: pydantic.ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(input)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)

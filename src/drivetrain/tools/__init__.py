"""Tools: the Tool seam (``base``) and the built-in coding tools."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from .base import FunctionTool, Tool, ToolContext, ToolError, ToolResult, tool, tool_spec
from .bash import Bash
from .edit import Edit
from .glob import Glob
from .grep import Grep
from .read import Read
from .write import Write

if TYPE_CHECKING:
    from drivetrain.host.sandbox import Sandbox

__all__ = [
    "Bash",
    "Edit",
    "FunctionTool",
    "Glob",
    "Grep",
    "Read",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "Write",
    "builtin_tools",
    "tool",
    "tool_spec",
]


def builtin_tools(
    sandbox: Sandbox | None = None, env_passthrough: Iterable[str] = (), env: Mapping[str, str] | None = None
) -> list[Tool]:
    """One instance of each built-in tool: Read, Write, Edit, Bash, Grep, Glob. Bash runs in ``sandbox`` if given,
    and its commands get the withheld environment variables named in ``env_passthrough``, and ``env``."""
    return [Read(), Write(), Edit(), Bash(sandbox=sandbox, env_passthrough=env_passthrough, env=env), Grep(), Glob()]

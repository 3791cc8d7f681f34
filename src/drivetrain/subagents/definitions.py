"""Subagent types: Claude Code's agent files (``.drivetrain/agents/*.md`` in the project, then
``$DRIVETRAIN_HOME/agents/*.md``) and the built-in ``general-purpose``.

An agent file is Markdown with a front matter; its body is the subagent's system prompt::

    ---
    name: test-runner
    description: Runs the tests and reports what fails. Use after a change.
    tools: Read, Grep, Bash        # optional: the tools it may use (default: the parent's, never Task)
    model: inherit                 # optional: a model name, or inherit (the default)
    ---
    You run the project's tests ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from drivetrain.errors import ConfigError
from drivetrain.home import drivetrain_home

GENERAL_PURPOSE_PROMPT = """You are a subagent: another agent gave you one part of its task. Do that part fully \
with the tools you have, then answer with what the other agent needs: your findings, the files you changed and \
anything left undone, briefly and precisely (it sees only your final answer, not your tool calls)."""


@dataclass(frozen=True)
class SubagentType:
    name: str
    description: str
    prompt: str  # its system prompt
    tools: tuple[str, ...] | None = None  # None: the parent's tools (less Task)
    model: str | None = None  # None: the parent's model
    source: str = "built-in"


GENERAL_PURPOSE = SubagentType(
    "general-purpose",
    "General-purpose agent for researching questions, searching for code and doing multi-step "
    "tasks. Use it when a search or a piece of work may take many steps.",
    GENERAL_PURPOSE_PROMPT,
)


def parse_agent_file(text: str, source: str) -> SubagentType:
    """One agent file; ConfigError naming ``source`` when its front matter is missing or incomplete."""
    m = re.match(r"\A---\s*\n(.*?)\n---\s*(?:\n|\Z)(.*)\Z", text, re.S)
    if not m:
        raise ConfigError(
            f"{source}: an agent file starts with a front matter between '---' lines "
            "(name, description; optionally tools, model)"
        )
    fields: dict[str, str] = {}
    for line in m.group(1).splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and not line.startswith((" ", "\t", "#")):
            fields[key.strip()] = value.split(" #")[0].strip().strip("'\"")
    missing = [k for k in ("name", "description") if not fields.get(k)]
    if missing:
        raise ConfigError(f"{source}: the front matter needs {' and '.join(missing)}")
    tools = (
        tuple(t.strip() for t in fields["tools"].strip("[]").split(",") if t.strip()) if fields.get("tools") else None
    )
    model = fields.get("model") or None
    return SubagentType(
        fields["name"],
        fields["description"],
        m.group(2).strip() or GENERAL_PURPOSE_PROMPT,
        tools,
        None if model == "inherit" else model,
        source,
    )


def load_types(cwd: Path) -> dict[str, SubagentType]:
    """Every subagent type by name: the project's files over the user's over the built-in one."""
    found = {GENERAL_PURPOSE.name: GENERAL_PURPOSE}
    for folder in (drivetrain_home() / "agents", cwd / ".drivetrain" / "agents"):
        for path in sorted(folder.glob("*.md")) if folder.is_dir() else ():
            t = parse_agent_file(path.read_text(encoding="utf-8"), str(path))
            found[t.name] = t
    return found

"""A run's MCP servers: started together at the start of a run, their tools offered, closed with the run."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from drivetrain.mcp.config import ServerSpec

if TYPE_CHECKING:
    from drivetrain.control.permissions import Policy
    from drivetrain.mcp.client import Connection, McpTool


def _stderr(line: str) -> None:
    print(f"drivetrain: {line}", file=sys.stderr, flush=True)


class McpServers:
    """The servers of one run. ``start`` connects them all at once, each within the start timeout
    (``MCP_TIMEOUT``), so none delays the first model request longer; ``close`` ends them."""

    def __init__(self, specs: list[ServerSpec], cwd: Path, note: Callable[[str], None] = _stderr):
        self.connections: list[Connection] = []
        self.cwd = cwd
        if specs:  # the SDK (about 1 s to import) loads only when there is a server to talk to
            from drivetrain.mcp.client import Connection, timeouts

            start, call = timeouts()
            self.connections = [Connection(s, cwd, note, start, call) for s in specs]

    async def start(self) -> None:
        await asyncio.gather(*(c.start() for c in self.connections))

    def tools(self, policy: Policy | None = None) -> list[McpTool]:
        """Every tool of every started server, less those a deny rule forbids whatever the input (not offered:
        the model need not learn of them). A call to one is still decided by the policy like any call."""
        if not self.connections:
            return []
        from drivetrain.mcp.client import McpTool

        out = [McpTool(c, t) for c in self.connections if not c.failed for t in c.tools]
        if policy is None:
            return out
        return [t for t in out if not _denied_by_rule(policy, t.name, self.cwd)]

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections))

    async def __aenter__(self) -> McpServers:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _denied_by_rule(policy: Policy, name: str, cwd: Path) -> bool:
    decision = policy.decide(name, {}, cwd)
    return decision.behavior == "deny" and decision.rule is not None

"""A small MCP server written with the official SDK, for drivetrain's MCP tests.

``python mcp_calc_server.py`` serves on stdio; ``--http`` serves streamable HTTP on 127.0.0.1 (a free port)/mcp,
``--sse`` SSE on …/sse;
``--mark FILE`` writes its pid to FILE as it starts, and the pid of a child it starts that never ends by itself.
``crash`` ends the process mid-call (the client sees the connection drop), ``hang`` never answers (timeouts),
``fail`` answers with isError, ``picture`` answers with an image, ``whoami`` reports its argv and environment,
``garbled`` answers with an image that is not base64.
"""

import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from mcp.server import MCPServer
from mcp.server.mcpserver import Image
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent

server = MCPServer("calc")
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with the reason given."""
    raise ToolError(f"failed on purpose: {reason}")


@server.tool()
def crash() -> str:
    """Ends the server process in the middle of the call."""
    os._exit(3)


@server.tool()
async def hang() -> str:
    """Never answers."""
    await asyncio.Event().wait()
    return "unreachable"


@server.tool()
def picture() -> Image:
    """A one-pixel PNG."""
    return Image(data=PNG, format="png")


@server.tool()
def garbled() -> ImageContent:
    """An image whose data is not base64."""
    return ImageContent(type="image", data="this is not base64!", mime_type="image/png")


@server.tool()
def whoami() -> str:
    """This server's command-line arguments and the environment variables named CALC_*."""
    return json.dumps({"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items() if k.startswith("CALC_")}})


if __name__ == "__main__":
    if "--mark" in sys.argv:  # leave a mark that the server started: its pid, and that of a child that never ends
        child = subprocess.Popen([sys.executable, "-c", "import select; select.select([], [], [])"])
        Path(sys.argv[sys.argv.index("--mark") + 1]).write_text(f"{os.getpid()} {child.pid}")
    if "--http" in sys.argv or "--sse" in sys.argv:  # uvicorn says "Uvicorn running on http://…" once it listens
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server.run("sse" if "--sse" in sys.argv else "streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()

"""A small MCP server for tests, written with the official SDK (`MCPServer`, FastMCP in mcp 1.x).

    python tests/mcp_server_fixture.py                      # stdio
    python tests/mcp_server_fixture.py http 127.0.0.1 PORT  # streamable HTTP at /mcp
"""

from __future__ import annotations

import logging
import os
import sys

import anyio

try:
    from mcp.server.mcpserver import MCPServer as Server
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server
    from mcp.server.fastmcp.exceptions import ToolError

server = Server("orchlib-test")
# A crash's traceback is rendered with rich on the server's stderr, slowly; the tests read the result.
logging.disable(logging.CRITICAL)
COUNTER = {"n": 0}


@server.tool(name="math.add")
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool(name="Fetch_DNA")
def fetch_dna(gene: str, limit: float = 3) -> str:
    """Return the first bases of a gene."""
    return ("ACGT" * 10)[: int(limit)] + f" ({gene})"


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the reason (a failure the tool reports)."""
    raise ToolError(f"refused: {reason}")


@server.tool()
def crash() -> str:
    """Always crashes (the server keeps the exception's text to itself)."""
    raise RuntimeError("secret detail")


@server.tool()
async def nap(seconds: float) -> str:
    """Sleep, then answer (without holding up the other calls)."""
    await anyio.sleep(seconds)
    return "awake"


@server.tool()
def count() -> str:
    """How many times this was called in this server process, and the process id."""
    COUNTER["n"] += 1
    return f"{COUNTER['n']} {os.getpid()}"


@server.tool()
def die() -> str:
    """Ends the server process."""
    os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        server.run("streamable-http", host=sys.argv[2], port=int(sys.argv[3]))
    else:
        server.run()

"""A small real MCP server (stdio) for the executor tests.

Run: python tests/capabilities/mcp_demo_server.py            (stdio)
     python tests/capabilities/mcp_demo_server.py --http PORT  (streamable HTTP on 127.0.0.1)
"""
from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("agentops-test-server")

ITEMS = {"a1": {"id": "a1", "name": "Laptop"}, "b2": {"id": "b2", "name": "Monitor"}}


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def lookup(item_id: str) -> dict:
    """Look an inventory item up by id."""
    if item_id not in ITEMS:
        raise ToolError(f"item {item_id} not found")
    return ITEMS[item_id]


@server.tool(annotations=ToolAnnotations(destructive_hint=True, read_only_hint=False))
def delete_item(item_id: str) -> str:
    """Delete an inventory item."""
    return f"deleted {item_id}"


@server.tool()
def explode(reason: str = "boom") -> str:
    """Always fails with an error result."""
    raise ToolError(f"the widget exploded: {reason}")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "done"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def whoami() -> str:
    """Echo the DEMO_SECRET environment variable's length (proves env passing)."""
    return str(len(os.environ.get("DEMO_SECRET", "")))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")

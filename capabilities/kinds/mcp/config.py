"""What an MCP tool's config must satisfy: the server that provides it and the tool's name."""
from __future__ import annotations

from typing import Any

from capabilities.models import McpServer
from core.errors import FieldErrors


def config_errors(errors: FieldErrors, config: dict, policy: dict[str, Any], mcp_server: McpServer | None) -> None:
    if mcp_server is None:
        errors.add("mcp_server", "Choose the MCP server that provides this tool.")
    tool = config.get("tool")
    if not isinstance(tool, str) or not tool.strip():
        errors.add("config.tool", "Name the server's tool to call.")
    extra = sorted(set(config) - {"tool"})
    if extra:
        errors.add("config", f"Unknown config keys for an MCP tool: {', '.join(extra)}.")
    if policy.get("status_lookup"):
        errors.add("status_lookup", "MCP tools cannot look up the status of a call.")

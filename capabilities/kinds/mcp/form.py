"""The capability form's fields for an MCP server tool's config."""
from __future__ import annotations

from typing import Any

from django import forms

from capabilities.models import McpServer


def form_fields() -> dict[str, forms.Field]:
    return {
        # The server is part of the capability's identity: shown when registering, fixed after.
        "mcp_server": forms.ModelChoiceField(queryset=McpServer.objects.order_by("name"), required=False,
                                             label="MCP server", help_text="For MCP tools: the server that provides it."),
        "tool": forms.CharField(required=False, label="MCP tool name", help_text="The tool's name on the server."),
    }


def initial(config: dict) -> dict[str, Any]:
    return {"tool": config.get("tool", "")}


def config_from(data: dict[str, Any], current: dict) -> dict:
    return {**current, "tool": (data.get("tool") or "").strip()}

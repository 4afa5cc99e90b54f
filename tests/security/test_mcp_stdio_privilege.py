"""Stdio MCP is its own privilege: a separate permission, a server-side command allowlist, POST-only listing,
and an audit event for every start of a server."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from capabilities.executors.base import CapabilityError, FileOutputStore
from capabilities.kinds.mcp.executor import McpExecutor, StdioPolicy, list_tools
from capabilities.models import McpServer
from core.models import AuditEvent
from core.roles import REGISTRY_ADMIN, ROLE_PERMISSIONS, STDIO_MCP_ADMIN
from runtime.capability import CapabilitySpec, Kind
from runtime.observation import ErrorCode

DEMO_SERVER = str(Path(__file__).resolve().parents[1] / "capabilities" / "mcp_demo_server.py")
STDIO_BODY = {"name": "shell", "transport": "stdio", "command": "sh", "args": ["-c", "env > /tmp/leak"]}


def test_the_permission_is_not_part_of_registry_admin():
    assert "capabilities.run_stdio_mcpserver" not in ROLE_PERMISSIONS[REGISTRY_ADMIN]
    assert "capabilities.run_stdio_mcpserver" in ROLE_PERMISSIONS[STDIO_MCP_ADMIN]
    extra = set(ROLE_PERMISSIONS[STDIO_MCP_ADMIN]) - set(ROLE_PERMISSIONS["viewer"])
    assert extra == {"capabilities.run_stdio_mcpserver"}


@pytest.mark.django_db
class TestRegistration:
    def test_a_registry_admin_without_the_permission_cannot_add_a_stdio_server(self, api_for, registry_admin,
                                                                                 settings):
        settings.AGENTOPS_MCP_STDIO_COMMANDS = ["sh"]
        response = api_for(registry_admin).post("/api/mcp-servers/", STDIO_BODY, format="json")
        assert response.status_code == 403 and "stdio" in response.json()["error"]["message"]
        assert not McpServer.objects.exists()

    def test_without_the_allowlist_no_command_is_accepted(self, api_for, stdio_allowed, settings):
        settings.AGENTOPS_MCP_STDIO_COMMANDS = []
        response = api_for(stdio_allowed).post("/api/mcp-servers/", STDIO_BODY, format="json")
        assert response.status_code == 400
        assert "AGENTOPS_MCP_STDIO_COMMANDS" in " ".join(response.json()["error"]["fields"]["command"])

    @pytest.mark.parametrize("allowlist, body, accepted", [
        (["python"], {"command": "sh", "args": ["-c", "id"]}, False),
        (["python -m mcp_server_time"], {"command": "python", "args": ["-c", "import os"]}, False),
        (["python -m mcp_server_time"], {"command": "python", "args": ["-m", "mcp_server_time"]}, True),
        (["mcp-server-time"], {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]}, True),
    ])
    def test_a_command_must_match_the_allowlist(self, api_for, stdio_allowed, settings, allowlist, body, accepted):
        settings.AGENTOPS_MCP_STDIO_COMMANDS = allowlist
        response = api_for(stdio_allowed).post("/api/mcp-servers/", {"name": "srv", "transport": "stdio", **body},
                                               format="json")
        assert (response.status_code == 201) is accepted, response.json()


@pytest.mark.django_db
class TestListing:
    @pytest.fixture
    def server(self, stdio_allowed):
        return McpServer.objects.create(name="inventory", transport="stdio", command="python", args=[DEMO_SERVER])

    def test_the_tools_endpoint_is_a_post(self, api_for, stdio_allowed, server):
        assert api_for(stdio_allowed).get(f"/api/mcp-servers/{server.pk}/tools/").status_code in (403, 405)
        assert not AuditEvent.objects.filter(action="mcp_server.started").exists()

    def test_a_session_post_without_csrf_is_refused(self, stdio_allowed, server):
        client = APIClient(enforce_csrf_checks=True)
        client.force_login(stdio_allowed)
        assert client.post(f"/api/mcp-servers/{server.pk}/tools/").status_code == 403
        assert not AuditEvent.objects.filter(action="mcp_server.started").exists()

    def test_the_import_page_starts_nothing_on_get(self, client_for, stdio_allowed, server):
        page = client_for(stdio_allowed).get(f"/capabilities/mcp-servers/{server.pk}/import/")
        assert page.status_code == 200 and "List the server" in page.content.decode()
        assert not AuditEvent.objects.filter(action="mcp_server.started").exists()

    def test_listing_a_stdio_server_needs_the_permission(self, api_for, registry_admin, server):
        registry_admin.project_memberships.filter(role__name="stdio mcp admin").delete()
        assert api_for(registry_admin).post(f"/api/mcp-servers/{server.pk}/tools/").status_code == 403

    @pytest.mark.slow
    def test_every_start_is_an_audit_event_with_its_command_line(self, api_for, stdio_allowed, server):
        response = api_for(stdio_allowed).post(f"/api/mcp-servers/{server.pk}/tools/")
        assert response.status_code == 200, response.json()
        event = AuditEvent.objects.get(action="mcp_server.started")
        assert event.actor == stdio_allowed and event.target_id == str(server.pk)
        assert event.details["command"] == ["python", DEMO_SERVER] and event.details["purpose"] == "list_tools"


def test_the_executor_refuses_a_stored_command_that_is_no_longer_allowed(tmp_path):
    executor = McpExecutor(stdio=StdioPolicy(commands=()), output_store=FileOutputStore(tmp_path), environ={})
    spec = CapabilitySpec(name="t", kind=Kind.MCP, config={"transport": "stdio", "command": sys.executable,
                                                           "args": [DEMO_SERVER], "tool": "add"})
    observation = executor.execute(spec, {"a": 1, "b": 2})
    assert observation.error_code == ErrorCode.PERMISSION_DENIED
    assert "AGENTOPS_MCP_STDIO_COMMANDS" in observation.error_message
    with pytest.raises(CapabilityError, match="AGENTOPS_MCP_STDIO_COMMANDS"):
        list_tools(spec.config, 5, stdio=StdioPolicy())

"""Adding MCP servers to the registry: what a stdio or streamable HTTP server must satisfy."""
from __future__ import annotations

import pytest

from capabilities.kinds.mcp import servers
from core.errors import InvalidInput
from core.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.mark.usefixtures("stdio_allowed")
class TestMcpServer:
    def test_it_adds_a_stdio_server_with_an_audit_event(self, registry_admin):
        server = servers.mcp_server_create(user=registry_admin, name="inventory", transport="stdio",
                                            command="python", args=["server.py"], env_vars=["INVENTORY_TOKEN"])
        assert server.client_config()["args"] == ["server.py"]
        event = AuditEvent.objects.get(target_type="mcpserver")
        assert (event.action, event.actor) == ("mcp_server.added", registry_admin)

    @pytest.mark.parametrize("kwargs, field", [
        ({"transport": "stdio", "command": ""}, "command"),
        ({"transport": "http", "url": "https://not-allowed.test/mcp"}, "url"),
        ({"transport": "carrier-pigeon"}, "transport"),
        ({"transport": "stdio", "command": "python", "env_vars": ["my secret value"]}, "env_vars"),
    ])
    def test_it_refuses_incomplete_or_unsafe_servers(self, registry_admin, allowlist, kwargs, field):
        with pytest.raises(InvalidInput) as exc:
            servers.mcp_server_create(user=registry_admin, name="srv", **kwargs)
        assert field in exc.value.fields

    def test_an_http_server_must_be_on_the_allowlist(self, registry_admin, allowlist):
        server = servers.mcp_server_create(user=registry_admin, name="remote", transport="http",
                                            url="https://tools.example.org/mcp")
        assert server.url == "https://tools.example.org/mcp"

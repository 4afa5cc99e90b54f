"""Try it: every permission a capability names is enforced, and every try leaves an audit row."""
from __future__ import annotations

import pytest

from capabilities import policy
from capabilities.kinds.mcp import servers
from capabilities.kinds.python import sync
from capabilities.models import Capability
from core.errors import InvalidInput
from core.models import AuditEvent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("try_inline")]


@pytest.fixture
def guarded_read(registry_admin):
    sync.python_capabilities_sync()
    search = Capability.objects.get(name="search_documents")
    policy.capability_update(user=registry_admin, capability_id=search.pk,
                               policy={"side_effect": "read", "permission": "capabilities.create_ticket"})
    return search


def test_a_read_capability_needs_its_permission(api_for, viewer, guarded_read):
    response = api_for(viewer).post("/api/capabilities/search_documents/try/", {"arguments": {"q": "travel"}},
                                    format="json")
    assert response.status_code == 403 and "capabilities.create_ticket" in response.json()["error"]["message"]


def test_a_permitted_read_try_runs_and_is_audited(api_for, operator, guarded_read):
    response = api_for(operator).post("/api/capabilities/search_documents/try/", {"arguments": {"q": "travel"}},
                                      format="json")
    assert response.status_code == 200 and response.json()["status"] == "ok"
    event = AuditEvent.objects.get(action="capability.tried")
    assert event.actor == operator and event.details["arguments"] == {"q": "travel"}


def test_the_page_enforces_it_too(client_for, viewer, guarded_read):
    html = client_for(viewer).post("/capabilities/search_documents/try/", {"arguments": '{"q": "travel"}'},
                                   HTTP_HX_REQUEST="true").content.decode()
    assert "needs the permission capabilities.create_ticket" in html
    assert not AuditEvent.objects.filter(action="capability.tried").exists()


def test_imported_mcp_tool_schemas_with_bad_refs_are_refused(stdio_allowed):
    from capabilities.models import McpServer

    server = McpServer.objects.create(name="srv", transport="stdio", command="python", args=["x.py"])
    available = [{"name": "fetch", "capability_name": "fetch", "description": "", "side_effect": "none",
                  "requires_approval": False, "idempotent": True, "annotations": {},
                  "schema": {"type": "object", "properties": {"u": {"$ref": "http://169.254.169.254/s.json"}}}}]
    with pytest.raises(InvalidInput) as refused:
        servers.mcp_tools_import(user=stdio_allowed, server_id=server.pk, tools=[{"name": "fetch"}],
                                  available=available)
    assert "does not resolve inside the schema" in str(refused.value.fields["tools.0.schema"])
    assert not Capability.objects.filter(name="fetch").exists()

"""MCP import end to end against the real stdio test server (tests/capabilities/mcp_demo_server.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.urls import reverse

from capabilities.models import Capability, McpServer
from core.models import AuditEvent

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.usefixtures("try_inline", "stdio_allowed")]

SERVER = str(Path(__file__).with_name("mcp_demo_server.py"))


def test_an_admin_adds_a_server_reviews_suggestions_and_imports_tools_in_the_browser(client_for, registry_admin):
    client = client_for(registry_admin)
    response = client.post(reverse("capabilities:mcp_server_create"),
                           {"name": "inventory", "transport": "stdio", "command": "python", "args": SERVER,
                            "env_vars": "", "url": ""})
    server = McpServer.objects.get(name="inventory")
    # "Add server and list its tools" lists them in its answer: no second click.
    page = response
    assert page.status_code == 200 and page.context["listed"] and page.context["tools"]
    url = reverse("capabilities:mcp_import", args=[server.pk])
    assert "List the server" in client.get(url).content.decode()   # coming back, listing starts it: a POST
    assert client.post(url, {"action": "list"}).context["tools"] == page.context["tools"]
    tools = {t["name"]: (i, t) for i, t in enumerate(page.context["tools"])}
    assert {"add", "lookup", "delete_item", "explode"} <= set(tools)
    # Untrusted hints only pick defaults: read-only → none; destructive → write with approval.
    assert (tools["add"][1]["side_effect"], tools["add"][1]["requires_approval"]) == ("none", False)
    assert (tools["delete_item"][1]["side_effect"], tools["delete_item"][1]["requires_approval"]) == ("write", True)
    assert (tools["explode"][1]["side_effect"], tools["explode"][1]["requires_approval"]) == ("write", True)
    html = page.content.decode()
    assert "untrusted" in html and 'name="side_effect__' in html

    add_i, delete_i = tools["add"][0], tools["delete_item"][0]
    response = client.post(url, {
        "action": "import", f"tool__{add_i}": "on", f"capability_name__{add_i}": "inventory_add", f"side_effect__{add_i}": "none",
        f"idempotent__{add_i}": "on",
        f"tool__{delete_i}": "on", f"capability_name__{delete_i}": "delete_item", f"side_effect__{delete_i}": "write",
        f"requires_approval__{delete_i}": "on", f"permission__{delete_i}": "capabilities.change_capability",
    })
    assert response.status_code == 302, response.content.decode()[:3000]

    add = Capability.objects.get(name="inventory_add")
    version = add.current_version
    assert (add.kind, add.mcp_server, version.config) == ("mcp", server, {"tool": "add"})
    assert set(version.schema["properties"]) == {"a", "b"} and version.idempotent is True
    delete = Capability.objects.get(name="delete_item").current_version
    assert (delete.side_effect, delete.requires_approval, delete.permission) == (
        "write", True, "capabilities.change_capability")
    event = AuditEvent.objects.get(action="capability.created", target_id=str(add.pk))
    assert event.actor == registry_admin and event.details["tool"] == "add"

    # The imported tool runs through the MCP executor from the try-it panel.
    tried = client.post(reverse("capabilities:try", args=["inventory_add"]), {"arguments": '{"a": 2, "b": 3}'},
                        HTTP_HX_REQUEST="true")
    html = tried.content.decode()
    assert 'class="pill ok"' in html and "5" in html

    # Importing the same tool name again is refused with a field error, nothing created.
    again = client.post(reverse("capabilities:mcp_import", args=[server.pk]),
                        {"action": "import", f"tool__{tools['lookup'][0]}": "on",
                         f"capability_name__{tools['lookup'][0]}": "delete_item"})
    assert again.status_code == 400 and "already exists" in again.content.decode()
    assert not Capability.objects.filter(current_version__config__tool="lookup").exists()


def test_the_api_imports_tools_with_confirmed_policies(api_for, registry_admin, viewer):
    api = api_for(registry_admin)
    created = api.post("/api/mcp-servers/", {"name": "inv", "transport": "stdio", "command": "python",
                                              "args": [SERVER]}, format="json")
    assert created.status_code == 201, created.json()
    server_id = created.json()["id"]
    tools = api.post(f"/api/mcp-servers/{server_id}/tools/")
    assert tools.status_code == 200
    lookup = next(t for t in tools.json() if t["name"] == "lookup")
    assert lookup["side_effect"] == "none" and lookup["schema"]["required"] == ["item_id"]

    assert api_for(viewer).post(f"/api/mcp-servers/{server_id}/import/", {"tools": [{"name": "lookup"}]},
                                format="json").status_code == 403
    unknown = api.post(f"/api/mcp-servers/{server_id}/import/", {"tools": [{"name": "nope"}]}, format="json")
    assert unknown.status_code == 400 and "tools.0.name" in unknown.json()["error"]["fields"]

    imported = api.post(f"/api/mcp-servers/{server_id}/import/",
                        {"tools": [{"name": "lookup", "capability_name": "inventory_lookup", "timeout_s": 20},
                                   {"name": "explode", "side_effect": "external", "requires_approval": True}]},
                        format="json")
    assert imported.status_code == 201, imported.json()
    by_name = {c["name"]: c for c in imported.json()}
    assert by_name["inventory_lookup"]["timeout_s"] == 20 and by_name["inventory_lookup"]["config"] == {"tool": "lookup"}
    assert by_name["explode"]["side_effect"] == "external"
    assert "side effect without a permission" in by_name["explode"]["flags"]

    result = api.post("/api/capabilities/inventory_lookup/try/", {"arguments": {"item_id": "zz"}}, format="json")
    assert result.status_code == 200
    assert (result.json()["status"], result.json()["error_code"]) == ("terminal", "not_found")


def test_overriding_the_side_effect_to_a_write_clears_idempotent_inferred_from_read_only(api_for, registry_admin):
    api = api_for(registry_admin)
    server_id = api.post("/api/mcp-servers/", {"name": "inv2", "transport": "stdio", "command": "python",
                                                "args": [SERVER]}, format="json").json()["id"]
    tools = {t["name"]: t for t in api.post(f"/api/mcp-servers/{server_id}/tools/").json()}
    assert tools["slow"]["idempotent"] is True and tools["add"]["idempotent"] is True
    imported = api.post(f"/api/mcp-servers/{server_id}/import/", {"tools": [
        {"name": "slow", "side_effect": "write", "permission": "capabilities.view_capability"},
        {"name": "add", "side_effect": "write", "permission": "capabilities.view_capability"},
        {"name": "whoami", "side_effect": "write", "idempotent": True, "permission": "capabilities.view_capability"},
    ]}, format="json")
    assert imported.status_code == 201, imported.json()
    by_name = {c["name"]: c for c in imported.json()}
    # readOnlyHint no longer holds for a write: the inference goes with it.
    assert by_name["slow"]["idempotent"] is False
    # idempotentHint is the server's own word about repeats: it stays.
    assert by_name["add"]["idempotent"] is True
    # What the admin sets explicitly stays.
    assert by_name["whoami"]["idempotent"] is True

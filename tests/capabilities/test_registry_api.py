"""The registry's JSON API: shapes, the shared error body, permissions, versions, try it."""
from __future__ import annotations

import pytest

from capabilities.models import Capability
from core.models import AuditEvent

pytestmark = pytest.mark.django_db

NEW_HTTP = {"name": "create_order", "kind": "http", "side_effect": "write", "requires_approval": True,
            "permission": "capabilities.create_ticket", "timeout_s": 5,
            "schema": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
            "config": {"url": "https://api.example.com/orders", "method": "POST",
                       "secret_headers": {"Authorization": "ORDERS_TOKEN"}}}


class TestListAndCreate:
    def test_it_lists_capabilities_paginated_with_filters(self, api_for, viewer):
        response = api_for(viewer).get("/api/capabilities/", {"kind": "python", "side_effect": "none"})
        assert response.status_code == 200
        names = [c["name"] for c in response.json()["results"]]
        assert names == ["get_document", "search_documents"]
        item = response.json()["results"][1]
        assert item["version"] >= 1 and item["enabled"] is True and item["schema"]["type"] == "object"

    def test_it_searches(self, api_for, viewer):
        names = [c["name"] for c in api_for(viewer).get("/api/capabilities/", {"q": "ticket"}).json()["results"]]
        assert names == ["create_ticket", "get_ticket_status"]

    def test_a_registry_admin_creates_an_http_capability(self, api_for, registry_admin, allowlist):
        response = api_for(registry_admin).post("/api/capabilities/", NEW_HTTP, format="json")
        assert response.status_code == 201, response.json()
        body = response.json()
        assert (body["name"], body["version"], body["side_effect"], body["flags"]) == ("create_order", 1, "write", [])
        assert AuditEvent.objects.filter(action="capability.created", actor=registry_admin).count() == 1

    def test_invalid_input_gets_field_errors_in_the_shared_body(self, api_for, registry_admin, allowlist):
        bad = {**NEW_HTTP, "timeout_s": 0, "schema": {"type": "object", "properties": {"x": {"type": "nope"}}},
               "config": {"url": "https://evil.test/", "secret_headers": {"Authorization": "Bearer xyz"}}}
        response = api_for(registry_admin).post("/api/capabilities/", bad, format="json")
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "invalid"
        assert {"timeout_s", "schema", "config.url", "config.secret_headers"} <= set(error["fields"])

    def test_type_errors_use_the_same_body(self, api_for, registry_admin, allowlist):
        response = api_for(registry_admin).post("/api/capabilities/", {**NEW_HTTP, "retry_max_attempts": "x"},
                                                format="json")
        assert response.status_code == 400
        assert "retry_max_attempts" in response.json()["error"]["fields"]

    def test_a_viewer_cannot_create(self, api_for, viewer, allowlist):
        response = api_for(viewer).post("/api/capabilities/", NEW_HTTP, format="json")
        assert response.status_code == 403 and response.json()["error"]["code"] == "permission_denied"
        assert not Capability.objects.filter(name="create_order").exists()

    def test_anonymous_requests_are_refused(self, client, db):
        assert client.get("/api/capabilities/").status_code in (401, 403)


class TestPatchVersionsEnable:
    @pytest.fixture
    def created(self, api_for, registry_admin, allowlist):
        api = api_for(registry_admin)
        assert api.post("/api/capabilities/", NEW_HTTP, format="json").status_code == 201
        return api

    def test_patch_writes_a_new_version_listed_with_its_diff(self, created):
        response = created.patch("/api/capabilities/create_order/",
                                 {"timeout_s": 9, "expected_version": 1, "change_note": "slow"}, format="json")
        assert response.status_code == 200, response.json()
        assert (response.json()["version"], response.json()["timeout_s"]) == (2, 9)
        versions = created.get("/api/capabilities/create_order/versions/").json()
        assert [v["number"] for v in versions] == [2, 1]
        assert versions[0]["changes"] == [{"field": "timeout_s", "old": 5.0, "new": 9.0}]
        assert versions[0]["change_note"] == "slow" and versions[0]["created_by"] == "rita"

    def test_patch_with_a_stale_version_is_409(self, created):
        created.patch("/api/capabilities/create_order/", {"timeout_s": 9}, format="json")
        response = created.patch("/api/capabilities/create_order/", {"timeout_s": 8, "expected_version": 1},
                                 format="json")
        assert response.status_code == 409 and response.json()["error"]["code"] == "conflict"

    def test_patch_without_changes_is_refused(self, created):
        response = created.patch("/api/capabilities/create_order/", {"timeout_s": 5}, format="json")
        assert response.status_code == 400 and "No changes" in response.json()["error"]["message"]

    def test_disable_and_enable(self, created):
        assert created.post("/api/capabilities/create_order/disable/").json()["enabled"] is False
        assert created.post("/api/capabilities/create_order/enable/").json()["enabled"] is True

    def test_a_viewer_cannot_patch_or_disable(self, created, api_for, viewer):
        api = api_for(viewer)
        assert api.patch("/api/capabilities/create_order/", {"timeout_s": 2}, format="json").status_code == 403
        assert api.post("/api/capabilities/create_order/disable/").status_code == 403
        assert api.get("/api/capabilities/create_order/").status_code == 200
        assert Capability.objects.get(name="create_order").enabled is True

    def test_unknown_names_are_404(self, api_for, viewer):
        response = api_for(viewer).get("/api/capabilities/nope/")
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


@pytest.mark.usefixtures("try_inline")
class TestTry:
    def test_a_read_only_capability_runs_once(self, api_for, viewer):
        response = api_for(viewer).post("/api/capabilities/search_documents/try/",
                                        {"arguments": {"q": "travel", "limit": 1}}, format="json")
        assert response.status_code == 200, response.json()
        body = response.json()
        assert body["status"] == "ok" and body["side_effect"] == "not_committed"
        assert len(body["output"]["documents"]) == 1 and body["latency_s"] >= 0

    def test_schema_errors_are_all_listed(self, api_for, viewer):
        response = api_for(viewer).post("/api/capabilities/search_documents/try/",
                                        {"arguments": {"limit": 0, "other": True}}, format="json")
        assert response.status_code == 400
        assert len(response.json()["error"]["fields"]["arguments"]) == 3

    def test_side_effects_need_confirm_and_permission(self, api_for, viewer, operator):
        from capabilities.models import Ticket

        url = "/api/capabilities/create_ticket/try/"
        no_confirm = api_for(operator).post(url, {"arguments": {"title": "t"}}, format="json")
        assert no_confirm.status_code == 403 and "confirm" in no_confirm.json()["error"]["message"]
        no_perm = api_for(viewer).post(url, {"arguments": {"title": "t"}, "confirm": True}, format="json")
        assert no_perm.status_code == 403 and "permission" in no_perm.json()["error"]["message"]
        assert not Ticket.objects.exists()
        assert not AuditEvent.objects.filter(details__try_it=True).exists()

    def test_a_confirmed_side_effecting_try_runs_and_is_audited(self, api_for, registry_admin, operator):
        from capabilities.policy import capability_update

        # The pure search function, declared a write here, so the try-it does not need another DB connection.
        search = Capability.objects.get(name="search_documents")
        capability_update(user=registry_admin, capability_id=search.pk,
                          policy={"side_effect": "write", "permission": "capabilities.create_ticket"})
        response = api_for(operator).post("/api/capabilities/search_documents/try/",
                                          {"arguments": {"q": "travel"}, "confirm": True}, format="json")
        assert response.status_code == 200 and response.json()["status"] == "ok"
        event = AuditEvent.objects.get(details__try_it=True)
        assert event.actor == operator and event.details["arguments"] == {"q": "travel"}


class TestSchema:
    def test_the_openapi_schema_documents_every_registry_endpoint(self, api_for, viewer):
        response = api_for(viewer).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
        assert response.status_code == 200
        paths = response.json()["paths"]
        for path, method in [("/api/capabilities/", "get"), ("/api/capabilities/", "post"),
                             ("/api/capabilities/{name}/", "patch"), ("/api/capabilities/{name}/enable/", "post"),
                             ("/api/capabilities/{name}/disable/", "post"),
                             ("/api/capabilities/{name}/versions/", "get"), ("/api/capabilities/{name}/try/", "post"),
                             ("/api/mcp-servers/", "post"), ("/api/mcp-servers/{server_id}/tools/", "post"),
                             ("/api/mcp-servers/{server_id}/import/", "post")]:
            assert method in paths[path], (path, method)

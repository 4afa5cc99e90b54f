"""The agents API: every endpoint, who may call it, and bad input answered 400 (never 500)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def caps(db):
    from capabilities.models import Capability

    for name in ("gw_echo", "gw_flaky"):
        Capability.objects.get_or_create(name=name, defaults={"kind": "python"})


@pytest.fixture
def make_agent(caps, registry_admin):
    from gateway import services

    def make(name="triage", **fields):
        fields = {"owner": registry_admin, "capabilities": ["gw_echo"], **fields}
        return services.agent_save(user=None, name=name, **fields)

    return make


def body(**overrides):
    return {"name": "triage", "owner": "rita", "capabilities": ["gw_echo"], "budgets": {"max_tool_calls": 5},
            **overrides}


class TestAgentListApi:
    def test_it_lists_agents_to_viewers(self, api_for, viewer, make_agent):
        make_agent()
        response = api_for(viewer).get("/api/agents/")
        assert response.status_code == 200
        assert [a["name"] for a in response.json()["results"]] == ["triage"]
        assert response.json()["results"][0]["owner"] == "rita"

    def test_it_refuses_users_without_a_role(self, api_for, nobody):
        assert api_for(nobody).get("/api/agents/").status_code == 403

    def test_it_refuses_anonymous_callers(self, client):
        assert client.get("/api/agents/").status_code in (401, 403)

    def test_it_registers_an_agent_with_an_audit_row(self, api_for, registry_admin, caps):
        from core.models import AuditEvent

        response = api_for(registry_admin).post("/api/agents/", body(), format="json")
        assert response.status_code == 201, response.json()
        assert response.json()["capabilities"] == ["gw_echo"] and response.json()["budgets"] == {"max_tool_calls": 5}
        event = AuditEvent.objects.get(action="agent.saved")
        assert event.actor == registry_admin and event.target_id == str(response.json()["id"])

    @pytest.mark.parametrize("user", ["viewer", "operator"])
    def test_it_refuses_registering_without_manage_agents(self, api_for, request, caps, user):
        response = api_for(request.getfixturevalue(user)).post("/api/agents/", body(), format="json")
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "permission_denied"

    def test_a_taken_name_is_a_conflict(self, api_for, registry_admin, make_agent):
        make_agent()
        assert api_for(registry_admin).post("/api/agents/", body(), format="json").status_code == 409

    @pytest.mark.parametrize("overrides, field", [
        ({"capabilities": ["gw_echo", "no_such_capability"]}, "capabilities"),
        ({"capabilities": "gw_echo"}, "capabilities"),
        ({"capabilities": [5]}, "capabilities"),
        ({"capabilities": [{"name": "gw_echo"}]}, "capabilities"),
        ({"budgets": {"max_tool_calls": -1}}, "budgets.max_tool_calls"),
        ({"budgets": {"max_tool_calls": "many"}}, "budgets.max_tool_calls"),
        ({"budgets": {"deadline_s": "inf"}}, "budgets.deadline_s"),
        ({"budgets": {"max_lunches": 3}}, "budgets"),
        ({"budgets": [1, 2]}, "budgets"),
        ({"budgets": {"max_calls_per_capability": [1]}}, "budgets.max_calls_per_capability"),
        ({"completion": {"path": "x"}}, "completion"),
        ({"completion": [1]}, "completion"),
        ({"owner": "nobody-of-that-name"}, "owner"),
        ({"owner": 7}, "owner"),
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": ["triage"]}, "name"),
        ({"enabled": "maybe"}, "enabled"),
        ({"description": {"a": 1}}, "description"),
    ])
    def test_bad_input_is_a_400_naming_the_field(self, api_for, registry_admin, caps, overrides, field):
        response = api_for(registry_admin).post("/api/agents/", body(**overrides), format="json")
        assert response.status_code == 400, response.content
        assert field in response.json()["error"]["fields"]

    @pytest.mark.parametrize("raw", [b"[1, 2]", b'"agent"', b"{not json", b"null", b"",
                                     b'{"name": "t", "owner": "rita", "capabilities": [], "budgets": {"deadline_s": 1e309}}',
                                     b'{"name": "t", "owner": "rita", "capabilities": [], "budgets": {"deadline_s": NaN}}'])
    def test_a_body_that_is_not_an_object_is_a_400(self, api_for, registry_admin, raw):
        response = api_for(registry_admin).post("/api/agents/", raw, content_type="application/json")
        assert response.status_code == 400


class TestAgentDetailApi:
    def test_it_shows_an_agent_to_viewers(self, api_for, viewer, make_agent):
        agent = make_agent()
        response = api_for(viewer).get(f"/api/agents/{agent.pk}/")
        assert response.status_code == 200 and response.json()["name"] == "triage"

    @pytest.mark.parametrize("agent_id", [999, 99999999999999999999])
    def test_an_unknown_agent_is_a_404(self, api_for, viewer, registry_admin, agent_id):
        assert api_for(viewer).get(f"/api/agents/{agent_id}/").status_code == 404
        assert api_for(registry_admin).put(f"/api/agents/{agent_id}/", body(), format="json").status_code == 404
        assert api_for(registry_admin).patch(f"/api/agents/{agent_id}/", {}, format="json").status_code == 404

    def test_it_replaces_an_agent_and_may_rename_it(self, api_for, registry_admin, make_agent):
        agent = make_agent()
        response = api_for(registry_admin).put(
            f"/api/agents/{agent.pk}/", body(name="triage-2", capabilities=["gw_echo", "gw_flaky"], budgets={}),
            format="json")
        assert response.status_code == 200, response.json()
        agent.refresh_from_db()
        assert (agent.name, agent.capabilities, agent.budgets) == ("triage-2", ["gw_echo", "gw_flaky"], {})

    def test_it_patches_only_the_fields_sent(self, api_for, registry_admin, make_agent):
        agent = make_agent(budgets={"max_tool_calls": 7})
        response = api_for(registry_admin).patch(f"/api/agents/{agent.pk}/", {"enabled": False}, format="json")
        assert response.status_code == 200, response.json()
        agent.refresh_from_db()
        assert agent.enabled is False and agent.budgets == {"max_tool_calls": 7} and agent.capabilities == ["gw_echo"]

    def test_renaming_to_a_taken_name_is_a_conflict(self, api_for, registry_admin, make_agent):
        make_agent("other")
        agent = make_agent()
        response = api_for(registry_admin).patch(f"/api/agents/{agent.pk}/", {"name": "other"}, format="json")
        assert response.status_code == 409

    def test_bad_input_in_a_patch_is_a_400(self, api_for, registry_admin, make_agent):
        agent = make_agent()
        api = api_for(registry_admin)
        for change in ({"capabilities": ["nope"]}, {"budgets": {"max_tool_calls": -3}}, {"owner": "ghost"},
                       {"enabled": []}):
            response = api.patch(f"/api/agents/{agent.pk}/", change, format="json")
            assert response.status_code == 400, (change, response.content)

    @pytest.mark.parametrize("user", ["viewer", "operator"])
    def test_it_refuses_changes_without_manage_agents(self, api_for, request, make_agent, user):
        agent = make_agent()
        api = api_for(request.getfixturevalue(user))
        assert api.put(f"/api/agents/{agent.pk}/", body(), format="json").status_code == 403
        assert api.patch(f"/api/agents/{agent.pk}/", {"enabled": False}, format="json").status_code == 403
        agent.refresh_from_db()
        assert agent.enabled is True


class TestAgentTokenApi:
    def test_it_issues_a_token_shown_once_that_the_gateway_accepts(self, api_for, registry_admin, viewer, make_agent):
        from core.models import AuditEvent
        from gateway.tokens import bearer_for

        agent = make_agent()
        response = api_for(registry_admin).post(f"/api/agents/{agent.pk}/tokens/",
                                                {"name": "ci", "expires_in_days": 7}, format="json")
        assert response.status_code == 201, response.json()
        key = response.json()["key"]
        assert bearer_for(key).agent_id == agent.pk
        listed = api_for(viewer).get(f"/api/agents/{agent.pk}/tokens/").json()["results"]
        assert [t["name"] for t in listed] == ["ci"] and "key" not in listed[0]
        assert AuditEvent.objects.filter(action="agent_token.created").count() == 1

    @pytest.mark.parametrize("data", [{"expires_in_days": 0}, {"expires_in_days": 100_000},
                                      {"expires_in_days": "soon"}, {"expires_in_days": 2**70}, {"name": ["x"]},
                                      {"name": "x" * 101}])
    def test_bad_token_input_is_a_400(self, api_for, registry_admin, make_agent, data):
        agent = make_agent()
        response = api_for(registry_admin).post(f"/api/agents/{agent.pk}/tokens/", data, format="json")
        assert response.status_code == 400, response.content

    def test_it_refuses_issuing_without_manage_agents(self, api_for, operator, make_agent):
        agent = make_agent()
        assert api_for(operator).post(f"/api/agents/{agent.pk}/tokens/", {}, format="json").status_code == 403

    def test_tokens_of_an_unknown_agent_are_a_404(self, api_for, registry_admin):
        assert api_for(registry_admin).get("/api/agents/999/tokens/").status_code == 404
        assert api_for(registry_admin).post("/api/agents/999/tokens/", {}, format="json").status_code == 404

    def test_it_revokes_a_token_which_the_gateway_then_refuses(self, api_for, registry_admin, make_agent):
        from core.models import AuditEvent
        from gateway import services
        from gateway.tokens import TokenRefused, bearer_for

        agent = make_agent()
        token, key = services.agent_token_issue(user=registry_admin, agent=agent)
        api = api_for(registry_admin)
        url = f"/api/agents/{agent.pk}/tokens/{token.pk}/revoke/"
        assert api.post(url).status_code == 200
        assert api.post(url).json()["revoked_at"] is not None  # twice is harmless
        with pytest.raises(TokenRefused, match="revoked"):
            bearer_for(key)
        assert AuditEvent.objects.filter(action="agent_token.revoked").count() == 1

    def test_a_token_of_another_agent_is_not_found(self, api_for, registry_admin, make_agent):
        from gateway import services

        token, _ = services.agent_token_issue(user=registry_admin, agent=make_agent("other"))
        agent = make_agent()
        response = api_for(registry_admin).post(f"/api/agents/{agent.pk}/tokens/{token.pk}/revoke/")
        assert response.status_code == 404
        token.refresh_from_db()
        assert token.revoked_at is None

    def test_it_refuses_revoking_without_manage_agents(self, api_for, viewer, registry_admin, make_agent):
        from gateway import services

        agent = make_agent()
        token, _ = services.agent_token_issue(user=registry_admin, agent=agent)
        assert api_for(viewer).post(f"/api/agents/{agent.pk}/tokens/{token.pk}/revoke/").status_code == 403


def test_the_schema_documents_the_agent_endpoints(api_for, viewer):
    schema = api_for(viewer).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    paths = schema["paths"]
    assert {"get", "post"} <= set(paths["/api/agents/"])
    assert {"get", "put", "patch"} <= set(paths["/api/agents/{agent_id}/"])
    assert {"get", "post"} <= set(paths["/api/agents/{agent_id}/tokens/"])
    assert "post" in paths["/api/agents/{agent_id}/tokens/{token_id}/revoke/"]

"""The agent pages through Django's test client: list, register, edit, issue and revoke tokens."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def caps(db):
    from capabilities.models import Capability

    for name in ("gw_echo", "gw_flaky"):
        Capability.objects.get_or_create(name=name, defaults={"kind": "python"})


@pytest.fixture
def agent(caps, registry_admin):
    from gateway import services

    return services.agent_save(user=None, name="triage", owner=registry_admin, capabilities=["gw_echo"],
                               budgets={"max_tool_calls": 9})


def form_data(**overrides):
    return {"name": "triage", "owner": "rita", "capabilities": ["gw_echo"], "enabled": "on", **overrides}


class TestAgentList:
    def test_viewers_see_agents_without_the_form(self, client_for, viewer, agent):
        page = client_for(viewer).get("/agents/")
        assert page.status_code == 200
        html = page.content.decode()
        assert 'href="/agents/"' in html and "triage" in html and "Register an agent" not in html

    def test_users_without_a_role_are_refused(self, client_for, nobody):
        assert client_for(nobody).get("/agents/").status_code == 403

    def test_anonymous_users_are_sent_to_log_in(self, client):
        assert client.get("/agents/").status_code == 302

    def test_a_manager_registers_an_agent(self, client_for, registry_admin, caps):
        from gateway.models import Agent

        response = client_for(registry_admin).post("/agents/", form_data(budget_max_tool_calls="12"))
        agent = Agent.objects.get(name="triage")
        assert response.status_code == 302 and response.url == f"/agents/{agent.pk}/"
        assert agent.capabilities == ["gw_echo"] and agent.budgets == {"max_tool_calls": 12} and agent.enabled

    @pytest.mark.parametrize("overrides", [{"budget_max_tool_calls": "-1"}, {"budget_deadline_s": "lots"},
                                           {"capabilities": ["not_registered"]}, {"owner": "ghost"}, {"name": ""}])
    def test_bad_input_redisplays_the_form_with_a_400(self, client_for, registry_admin, caps, overrides):
        from gateway.models import Agent

        response = client_for(registry_admin).post("/agents/", form_data(**overrides))
        assert response.status_code == 400 and 'role="alert"' in response.content.decode()
        assert not Agent.objects.exists()

    def test_a_taken_name_is_shown_on_the_form(self, client_for, registry_admin, agent):
        response = client_for(registry_admin).post("/agents/", form_data())
        assert response.status_code == 400 and "exists" in response.content.decode()

    def test_viewers_cannot_register(self, client_for, viewer, caps):
        from gateway.models import Agent

        assert client_for(viewer).post("/agents/", form_data()).status_code == 403
        assert not Agent.objects.exists()


class TestAgentDetail:
    def test_viewers_see_settings_and_tokens_read_only(self, client_for, viewer, agent):
        html = client_for(viewer).get(f"/agents/{agent.pk}/").content.decode()
        assert "max_tool_calls=9" in html and "Issue token" not in html and "Save agent" not in html

    def test_it_says_how_to_connect_each_client_to_this_servers_gateway(self, client_for, viewer, agent):
        html = client_for(viewer).get(f"/agents/{agent.pk}/").content.decode()
        section = html.split('id="agent-connect"')[1].split("</section>")[0]
        assert 'id="agent-mcp-url">http://testserver/mcp/<' in section
        for client in ("MCPServerStreamableHttp", "MultiServerMCPClient", "agentops-mcp-stdio"):
            assert client in section
        assert section.count("AGENTOPS_MCP_TOKEN") == 4   # read from the environment, never written here

    def test_a_new_key_is_shown_once_and_never_in_the_connection_snippets(self, client_for, registry_admin, agent):
        html = client_for(registry_admin).post(f"/agents/{agent.pk}/tokens/", {"name": "ci", "expires_in_days": "3"}
                                               ).content.decode()
        key = html.split('id="new-agent-token-key">')[1].split("<")[0]
        assert html.count(key) == 1 and key not in html.split('id="agent-connect"')[1]

    def test_an_unknown_agent_is_a_404(self, client_for, viewer):
        assert client_for(viewer).get("/agents/999/").status_code == 404

    def test_a_manager_edits_it_keeping_what_the_page_does_not_show(self, client_for, registry_admin, agent):
        from gateway import services

        services.agent_save(user=None, name="triage", owner=registry_admin, capabilities=["gw_echo"],
                            budgets={"max_calls_per_capability": {"gw_echo": 2}})
        response = client_for(registry_admin).post(f"/agents/{agent.pk}/", form_data(
            name="triage-2", capabilities=["gw_echo", "gw_flaky"], enabled=""))
        assert response.status_code == 302
        agent.refresh_from_db()
        assert agent.name == "triage-2" and agent.capabilities == ["gw_echo", "gw_flaky"] and not agent.enabled
        assert agent.budgets == {"max_calls_per_capability": {"gw_echo": 2}}

    def test_the_edit_form_shows_service_errors(self, client_for, registry_admin, agent):
        response = client_for(registry_admin).post(f"/agents/{agent.pk}/", form_data(budget_max_iterations="-5"))
        assert response.status_code == 400

    def test_viewers_cannot_edit(self, client_for, viewer, agent):
        assert client_for(viewer).post(f"/agents/{agent.pk}/", form_data(name="x")).status_code == 403


class TestAgentTokens:
    def test_htmx_issue_answers_the_tokens_section_with_the_key_once(self, client_for, registry_admin, agent):
        from gateway.tokens import bearer_for

        client = client_for(registry_admin)
        response = client.post(f"/agents/{agent.pk}/tokens/", {"name": "ci", "expires_in_days": "30"},
                               HTTP_HX_REQUEST="true")
        html = response.content.decode()
        assert response.status_code == 200 and "<html" not in html and 'id="agent-tokens"' in html
        key = html.split('id="new-agent-token-key">')[1].split("<")[0]
        assert bearer_for(key).agent_id == agent.pk
        assert key not in client.get(f"/agents/{agent.pk}/").content.decode()

    def test_a_plain_post_shows_the_whole_page_with_the_key(self, client_for, registry_admin, agent):
        response = client_for(registry_admin).post(f"/agents/{agent.pk}/tokens/", {"name": "ci", "expires_in_days": "3"})
        assert response.status_code == 200 and "new-agent-token-key" in response.content.decode()
        assert "<html" in response.content.decode()

    @pytest.mark.parametrize("days", ["0", "99999", "soon", ""])
    def test_a_bad_expiry_is_a_400(self, client_for, registry_admin, agent, days):
        response = client_for(registry_admin).post(f"/agents/{agent.pk}/tokens/", {"name": "ci", "expires_in_days": days})
        assert response.status_code == 400

    def test_htmx_revoke_answers_the_section_saying_so(self, client_for, registry_admin, agent):
        from gateway import services

        token, _ = services.agent_token_issue(user=registry_admin, agent=agent)
        response = client_for(registry_admin).post(f"/agents/{agent.pk}/tokens/{token.pk}/revoke/",
                                                   HTTP_HX_REQUEST="true")
        assert response.status_code == 200 and "is revoked" in response.content.decode()
        token.refresh_from_db()
        assert token.revoked_at is not None

    def test_a_plain_revoke_redirects_back(self, client_for, registry_admin, agent):
        from gateway import services

        token, _ = services.agent_token_issue(user=registry_admin, agent=agent)
        response = client_for(registry_admin).post(f"/agents/{agent.pk}/tokens/{token.pk}/revoke/")
        assert response.status_code == 302 and response.url == f"/agents/{agent.pk}/"

    def test_revoking_an_unknown_token_says_so(self, client_for, registry_admin, agent):
        response = client_for(registry_admin).post(f"/agents/{agent.pk}/tokens/999/revoke/", HTTP_HX_REQUEST="true")
        assert response.status_code == 200 and "No such agent token" in response.content.decode()

    def test_viewers_cannot_issue_or_revoke(self, client_for, viewer, registry_admin, agent):
        from gateway import services

        token, _ = services.agent_token_issue(user=registry_admin, agent=agent)
        client = client_for(viewer)
        assert client.post(f"/agents/{agent.pk}/tokens/", {"name": "x", "expires_in_days": "3"}).status_code == 403
        assert client.post(f"/agents/{agent.pk}/tokens/{token.pk}/revoke/").status_code == 403
        token.refresh_from_db()
        assert token.revoked_at is None and agent.tokens.count() == 1

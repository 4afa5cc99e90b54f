"""The low items of issue 34: What-if limits, delete confirmation under the CSP, OTel content opt-in,
tokens that cannot outlive their minter, a cap on label filters."""
from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from runs import otel, services
from runs.labels import MAX_LABEL_FILTERS
from runs.worker import engine


@pytest.mark.django_db(transaction=True)
class TestWhatIfLimits:
    @pytest.fixture
    def run(self, operator, manual_advance):
        from capabilities.kinds.python.sync import python_capabilities_sync

        python_capabilities_sync()
        run = services.run_start(owner=operator, goal="Find the travel policy", planner="scripted",
                                 planner_config={"plans": [[{"capability": "search_documents",
                                                             "arguments": {"q": "travel"}}]]},
                                 completion={"capability": "search_documents", "path": "documents.0.id",
                                             "exists": True}, budgets={"deadline_s": 120})
        engine.run_advance(run_id=run.pk, worker="test")
        return run

    @pytest.mark.parametrize("replacement, said", [
        ("[" * 50_000 + "]" * 50_000, "nested more than"),
        ('{"return": ' + "9" * 99_000 + "}", "is refused"),
    ])
    def test_a_hostile_replacement_is_a_clear_400(self, client_for, viewer, run, replacement, said, settings):
        settings.AGENTOPS_JSON_FIELD_MAX_BYTES = 1_000_000  # the depth and digit limits, not the size, refuse these
        response = client_for(viewer).post(f"/runs/{run.pk}/what-if/", {"response": "search_documents:0",
                                                                         "replacement": replacement})
        assert response.status_code == 400
        assert "The response is" in response.content.decode()


class TestDeleteAsksFirst:
    def test_delete_is_a_confirmation_page_then_a_post(self, client_for, operator):
        from notifications.models import Channel, Rule

        channel = Channel.objects.create(name="hook", url="json://hooks.example.com/x")
        rule = Rule.objects.create(name="stalls", event="run_stopped")
        rule.channels.set([channel])
        client = client_for(operator)
        page = client.get("/notifications/").content.decode()
        assert "onsubmit" not in page and f'href="/notifications/rules/{rule.pk}/delete/"' in page
        for url, model in ((f"/notifications/rules/{rule.pk}/delete/", Rule),
                           (f"/notifications/channels/{channel.pk}/delete/", Channel)):
            confirm = client.get(url)
            assert confirm.status_code == 200 and 'id="confirm-delete"' in confirm.content.decode()
            assert "script-src" in confirm["Content-Security-Policy"] and "onsubmit" not in confirm.content.decode()
            assert model.objects.exists()  # asking deleted nothing
            assert client.post(url).status_code == 302
        assert not Rule.objects.exists() and not Channel.objects.exists()


class TestOtelContent:
    @pytest.fixture
    def emitted(self, monkeypatch):
        spans = []
        monkeypatch.setattr(otel, "_emit", lambda **kw: spans.append(kw["attributes"]))
        return spans

    def _plan(self):
        event = SimpleNamespace(revision=1, accepted=True, reason_code="initial", reason="the CFO's divorce papers",
                                steps=(), tokens=0, cost=0.0, validation_errors=(), started_at=0.5, ended_at=1.0)
        otel._export_plan({"trace_id": "a" * 32, "planner": "external", "model": "m"}, event)

    @pytest.mark.parametrize("opt_in", [False, True])
    def test_the_goal_and_the_planners_reason_need_the_content_opt_in(self, emitted, monkeypatch, operator,
                                                                      opt_in):
        from runs.models import Run

        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true" if opt_in else "")
        run = Run.objects.create(goal="Fire Bob quietly", completion={}, budgets={}, planner="scripted",
                                 owner=operator, status="completed", stop_reason="completed",
                                 started_at=timezone.now(), finished_at=timezone.now(), trace_id="b" * 32)
        otel._export_run(run.pk)
        self._plan()
        text = repr(emitted)
        assert ("Fire Bob quietly" in text) is opt_in and ("divorce papers" in text) is opt_in


class TestTokens:
    def test_a_token_cannot_mint_one_that_outlives_it(self, operator):
        from rest_framework.test import APIClient

        from core import tokens

        short, key = tokens.token_create(user=operator, name="ci", expires_in_days=1)
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        response = api.post("/api/tokens/", {"name": "forever", "expires_in_days": 365}, format="json")
        assert response.status_code == 201, response.content
        minted = tokens.ApiToken.objects.get(name="forever")
        assert minted.expires_at <= short.expires_at
        assert minted.expires_at < timezone.now() + timedelta(days=2)

    def test_a_token_cannot_mint_an_agent_token_that_outlives_it(self, registry_admin):
        from rest_framework.test import APIClient

        from capabilities.kinds.python.sync import python_capabilities_sync
        from core import tokens
        from gateway import services as gateway_services
        from gateway.models import AgentToken

        python_capabilities_sync()
        agent = gateway_services.agent_save(user=registry_admin, name="short-lived", owner=registry_admin,
                                            capabilities=["search_documents"])
        short, key = tokens.token_create(user=registry_admin, name="ci", expires_in_days=1)
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        response = api.post(f"/api/agents/{agent.pk}/tokens/", {"name": "forever", "expires_in_days": 365},
                            format="json")
        assert response.status_code == 201, response.content
        minted = AgentToken.objects.get(name="forever")
        assert minted.expires_at <= short.expires_at
        assert minted.expires_at < timezone.now() + timedelta(days=2)

    def test_a_session_still_chooses_the_lifetime(self, operator, client_for):
        from core.models import ApiToken

        response = client_for(operator).post("/api/tokens/", {"name": "long", "expires_in_days": 365},
                                             content_type="application/json")
        assert response.status_code == 201
        assert ApiToken.objects.get(name="long").expires_at > timezone.now() + timedelta(days=364)


class TestLabelFilters:
    MANY = [f"k{i}=v" for i in range(990)]  # 990 filters took 3 s

    def test_too_many_label_filters_are_a_clear_400_everywhere(self, api_for, client_for, viewer):
        response = api_for(viewer).get("/api/runs/", {"label": self.MANY})
        assert response.status_code == 400 and f"at most {MAX_LABEL_FILTERS} label filters" in response.content.decode()
        client = client_for(viewer)
        for url in ("/runs/", "/runs/dashboard/"):
            page = client.get(url, {"label": ",".join(self.MANY[:30])})
            assert page.status_code == 400, url
            assert f"at most {MAX_LABEL_FILTERS} label filters" in page.content.decode()

    def test_as_many_as_a_run_can_carry_are_fine(self, api_for, viewer):
        few = ",".join(f"k{i}=v" for i in range(MAX_LABEL_FILTERS))
        assert api_for(viewer).get("/api/runs/", {"label": few}).status_code == 200

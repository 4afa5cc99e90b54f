"""Operators act on their own runs; runs.manage_all_runs (the lead operator role) on everyone's."""
from __future__ import annotations

import pytest

from core.choices import RunStatus
from core.errors import NotAllowed
from core.project_access import grant_role
from runs import services
from runs.models import PlanSubmission
from runs.worker import engine

FOUND = {"capability": "search_documents", "path": "documents.0.id", "exists": True}
STEP = {"id": "s1", "capability": "search_documents", "arguments": {"q": "travel"}, "expected_outcome": "the policy"}


@pytest.fixture
def lead_operator(roles):
    from django.contrib.auth.models import User

    user = User.objects.create_user(username="lena", password="pw-lena")
    grant_role(user, "lead operator")
    return user


@pytest.fixture
def run(db, operator):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    return services.run_start(owner=operator, goal="Find the travel policy", completion=FOUND, planner="external",
                              budgets={"deadline_s": 60})


@pytest.mark.django_db
class TestCancel:
    def test_another_operator_may_not_cancel_and_is_told_why(self, run, second_operator):
        with pytest.raises(NotAllowed, match="manage all runs"):
            services.run_cancel(run_id=run.pk, user=second_operator)
        run.refresh_from_db()
        assert run.status == RunStatus.QUEUED

    def test_the_owner_may(self, run, operator):
        assert services.run_cancel(run_id=run.pk, user=operator).status == RunStatus.CANCELLED

    def test_a_lead_operator_may_cancel_anyones_run(self, run, lead_operator):
        assert services.run_cancel(run_id=run.pk, user=lead_operator).status == RunStatus.CANCELLED

    def test_the_run_page_offers_cancel_only_to_who_may(self, client, run, operator, second_operator, lead_operator):
        for user, offered in ((operator, True), (second_operator, False), (lead_operator, True)):
            client.force_login(user)
            assert ("Cancel run" in client.get(f"/runs/{run.pk}/").content.decode()) is offered, user


@pytest.mark.django_db
class TestPlanSubmission:
    def test_a_lead_operator_may_submit_a_plan_for_anothers_external_run(self, run, lead_operator, api_for):
        engine.run_advance(run_id=run.pk, worker="test")
        response = api_for(lead_operator).post(f"/api/runs/{run.pk}/plans/", {"revision": 1, "steps": [STEP]},
                                               format="json")
        assert response.status_code in (200, 201, 202), response.content
        assert PlanSubmission.objects.get(run=run).submitted_by == lead_operator

    def test_another_operator_may_not(self, run, second_operator, api_for):
        engine.run_advance(run_id=run.pk, worker="test")
        response = api_for(second_operator).post(f"/api/runs/{run.pk}/plans/", {"revision": 1, "steps": [STEP]},
                                                 format="json")
        assert response.status_code == 403
        assert not PlanSubmission.objects.exists()

"""Authorization follows the proposer: a plan someone else submits for a run runs with the intersection
of the owner's and the proposer's permissions; four-eyes refuses both the owner and the proposer."""
from __future__ import annotations

import pytest

from core.errors import NotAllowed
from runs import services
from runs.models import Approval, PlanRevision, Run
from runs.worker import engine
from tests.binding import bound_hash

FOUND = {"capability": "create_ticket", "path": "ticket_id", "exists": True}
TICKET = {"id": "t1", "capability": "create_ticket", "arguments": {"title": "Printer on fire"},
          "expected_outcome": "a ticket"}


def _user(username, *, group="lead operator", without=()):
    """A user holding, in the default project, the role's permissions minus `without` (a role of its own)."""
    from django.contrib.auth.models import Group, User

    from core.models import ProjectMembership
    from core.project_access import default_project

    user = User.objects.create_user(username=username, password=f"pw-{username}")
    narrowed, _ = Group.objects.get_or_create(name=f"{group} without {', '.join(without) or 'nothing'}")
    narrowed.permissions.set(Group.objects.get(name=group).permissions.exclude(codename__in=without))
    ProjectMembership.objects.create(project=default_project(), user=user, role=narrowed)
    return User.objects.get(pk=user.pk)  # no cached permissions


@pytest.fixture
def external_run(db, operator):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    return services.run_start(owner=operator, goal="Open a ticket", completion=FOUND, planner="external",
                              budgets={"deadline_s": 120})


def _advance(run):
    engine.run_advance(run_id=run.pk, worker="test-worker")
    run.refresh_from_db()
    return run


def _submit(api, run, steps):
    return api.post(f"/api/runs/{run.pk}/plans/", {"revision": 1, "steps": steps}, format="json")


class TestTheProposersPermissions:
    def test_a_lead_without_a_capabilitys_permission_cannot_run_it_through_anothers_run(
            self, external_run, api_for, manual_advance):
        lead = _user("lena", without=["create_ticket"])
        assert not lead.has_perm("capabilities.create_ticket")
        assert _submit(api_for(lead), external_run, [TICKET]).status_code == 202
        run = _advance(external_run)
        revision = PlanRevision.objects.get(run=run, number=1)
        assert not revision.accepted and "create_ticket" in str(revision.validation_errors)
        assert not Approval.objects.filter(run=run).exists() and run.status != "awaiting_approval"
        assert revision.proposed_by == lead

    def test_the_same_plan_from_a_lead_who_holds_it_goes_on(self, external_run, api_for, manual_advance):
        lead = _user("lena")
        assert _submit(api_for(lead), external_run, [TICKET]).status_code == 202
        run = _advance(external_run)
        assert PlanRevision.objects.get(run=run, number=1).accepted and run.status == "awaiting_approval"

    def test_the_owners_own_plan_runs_with_the_owners_permissions(self, external_run, api_for, operator,
                                                                  manual_advance):
        assert _submit(api_for(operator), external_run, [TICKET]).status_code == 202
        run = _advance(external_run)
        revision = PlanRevision.objects.get(run=run, number=1)
        assert revision.accepted and revision.proposed_by == operator

    def test_the_intersection_is_asked_again_at_the_point_of_action(self, external_run, operator):
        from runs.worker.adapters import OwnerAuthorizer

        lead = _user("lena", without=["create_ticket"])
        authorizer = OwnerAuthorizer(operator.pk, recheck_s=0)
        assert authorizer.permits("capabilities.create_ticket")
        authorizer.proposed_by(lead.pk)
        assert not authorizer.permits("capabilities.create_ticket")
        authorizer.proposed_by(operator.pk)
        assert authorizer.permits("capabilities.create_ticket")


class TestFourEyesByProposer:
    @pytest.fixture
    def waiting(self, external_run, api_for, settings, manual_advance):
        settings.AGENTOPS_FOUR_EYES = True
        lead = _user("lena")
        assert _submit(api_for(lead), external_run, [TICKET]).status_code == 202
        run = _advance(external_run)
        assert run.status == "awaiting_approval"
        return lead, Approval.objects.get(run=run)

    def test_the_proposer_may_not_decide_through_the_service(self, waiting):
        lead, approval = waiting
        with pytest.raises(NotAllowed, match="you proposed"):
            services.approval_decide(approval_id=approval.pk, user=lead, approve=True,
                                     channel="api", expected_hash=bound_hash(approval.pk))

    def test_the_proposer_and_the_owner_may_not_decide_through_the_api(self, waiting, api_for, operator):
        lead, approval = waiting
        for user in (lead, operator):
            response = api_for(user).post(f"/api/approvals/{approval.pk}/decide/",
                                          {"decision": "approve", "expected_hash": bound_hash(approval.pk)}, format="json")
            assert response.status_code == 403, (user, response.content)
        approval.refresh_from_db()
        assert approval.state == "pending"

    def test_a_third_person_decides(self, waiting, api_for, second_operator):
        _lead, approval = waiting
        response = api_for(second_operator).post(f"/api/approvals/{approval.pk}/decide/",
                                                 {"decision": "approve", "expected_hash": bound_hash(approval.pk)},
                                                 format="json")
        assert response.status_code == 200, response.content
        assert Run.objects.get(pk=approval.run_id).status == "queued"


class TestThePlanningAnswerOffersTheIntersection:
    """GET .../planning/ lists what the reader's plan may use: what both the owner and the reader hold,
    exactly what validation then lets through."""

    def _offered(self, api, run):
        response = api.get(f"/api/runs/{run.pk}/planning/")
        assert response.status_code == 200, response.content
        return {c["name"]: c for c in response.json()["capabilities"]}

    def test_a_lead_without_a_permission_is_not_offered_its_capability(self, external_run, api_for, operator):
        lead = _user("lena", without=["create_ticket"])
        assert "create_ticket" not in self._offered(api_for(lead), external_run)
        assert "search_documents" in self._offered(api_for(lead), external_run)
        assert "create_ticket" in self._offered(api_for(operator), external_run)   # the owner holds it
        assert "create_ticket" in self._offered(api_for(_user("lars")), external_run)   # so does this lead

    def test_a_lead_is_not_offered_what_the_owner_lacks(self, roles, api_for):
        from capabilities.kinds.python.sync import python_capabilities_sync

        python_capabilities_sync()
        owner = _user("olga", group="operator", without=["create_ticket"])
        run = services.run_start(owner=owner, goal="Open a ticket", completion=FOUND, planner="external",
                                 budgets={"deadline_s": 120})
        assert "create_ticket" not in self._offered(api_for(_user("lena")), run)

    def test_what_is_offered_is_what_the_authorizer_lets_through(self, external_run, api_for, operator):
        from capabilities.models import Capability
        from runs.worker.adapters import DjangoRegistry, OwnerAuthorizer

        lead = _user("lena", without=["create_ticket", "send_notification"])
        offered = self._offered(api_for(lead), external_run)
        authorizer = OwnerAuthorizer(operator.pk, recheck_s=0, proposer_id=lead.pk)
        for spec in DjangoRegistry().visible(OwnerAuthorizer(operator.pk)):
            refused_at_validation = spec.changes_state and spec.permission and not authorizer.permits(spec.permission)
            assert (spec.name in offered) is not refused_at_validation, spec.name
        assert Capability.objects.filter(name__in=["create_ticket", "send_notification"]).count() == 2
        assert not {"create_ticket", "send_notification"} & set(offered)

    def test_the_lead_plans_with_what_was_offered_and_it_goes_on(self, external_run, api_for, manual_advance):
        lead = _user("lena", without=["create_ticket"])
        offered = self._offered(api_for(lead), external_run)
        step = {"id": "s1", "capability": "search_documents", "arguments": {"q": "travel"}, "expected_outcome": "x"}
        assert "search_documents" in offered
        assert _submit(api_for(lead), external_run, [step]).status_code == 202
        run = _advance(external_run)
        assert PlanRevision.objects.get(run=run, number=1).accepted

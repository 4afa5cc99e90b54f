"""Approval requests expire at the earlier of their TTL and the run's deadline, and an
expired request stops its run `approval_expired` at that moment."""
from __future__ import annotations

import pytest
from django.utils import timezone

from capabilities.models import Capability, CapabilityVersion, Ticket
from core.errors import Conflict
from runs import services
from runs.models import Approval, Run
from runs.worker import engine
from runs.worker.sweeps import sweep_expired_approvals
from tests.binding import bound_hash

TICKET_PLAN = [[{"capability": "create_ticket", "arguments": {"title": "Printer on fire"}}]]
TICKET_DONE = {"capability": "create_ticket", "path": "ticket_id", "exists": True}


@pytest.fixture
def demo_capabilities(db, manual_advance):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    CapabilityVersion.objects.filter(capability__name="get_ticket_status").update(polling_interval_s=0.01)
    # Edited in place, so the registry's version is moved as capabilities.policy moves it: workers
    # keep the specs they read at one version.
    Capability.objects.filter(name="get_ticket_status").update(updated_at=timezone.now())


def paused(owner, deadline_s):
    run = services.run_start(owner=owner, goal="Open a ticket", completion=TICKET_DONE,
                             budgets={"deadline_s": deadline_s}, planner="scripted",
                             planner_config={"plans": TICKET_PLAN})
    engine.run_advance(run_id=run.pk, worker="test-worker")
    run.refresh_from_db()
    assert run.status == "awaiting_approval"
    return run, Approval.objects.get(run=run, state="pending")


@pytest.mark.django_db(transaction=True)
class TestApprovalExpiry:
    def test_a_request_expires_at_its_ttl_when_that_comes_first(self, settings, operator, demo_capabilities):
        settings.AGENTOPS_APPROVAL_TTL_SECONDS = 60
        run, approval = paused(operator, deadline_s=600)
        waited = (approval.expires_at - approval.requested_at).total_seconds()
        assert 59 <= waited <= 61

    def test_a_request_expires_at_the_deadline_when_that_comes_first(self, settings, operator, demo_capabilities):
        settings.AGENTOPS_APPROVAL_TTL_SECONDS = 3600
        run, approval = paused(operator, deadline_s=30)
        assert abs((approval.expires_at - run.deadline_at).total_seconds()) < 1.0

    def test_the_sweep_stops_the_run_approval_expired_when_it_expires(self, settings, operator, demo_capabilities):
        settings.AGENTOPS_APPROVAL_TTL_SECONDS = 60
        run, approval = paused(operator, deadline_s=600)
        assert sweep_expired_approvals(now=timezone.now()) == 0
        assert sweep_expired_approvals(now=approval.expires_at + timezone.timedelta(seconds=1)) == 1
        run.refresh_from_db()
        approval.refresh_from_db()
        assert (run.status, run.stop_reason) == ("stopped", "approval_expired")
        assert "expired undecided" in run.stop_detail and "(its TTL)" in run.stop_detail
        assert approval.state == "expired"
        assert not Ticket.objects.exists()
        # Swept once: a second sweep finds nothing.
        assert sweep_expired_approvals(now=approval.expires_at + timezone.timedelta(seconds=2)) == 0

    def test_a_run_waiting_at_its_deadline_stops_approval_expired_not_deadline(self, settings, operator,
                                                                             demo_capabilities):
        from runs.tasks import sweep_overdue_runs

        settings.AGENTOPS_APPROVAL_TTL_SECONDS = 3600
        run, approval = paused(operator, deadline_s=1)
        import time

        time.sleep(1.2)
        sweep_overdue_runs()     # what the beat schedule runs every few seconds
        run.refresh_from_db()
        assert run.stop_reason == "approval_expired" and "(the run's deadline)" in run.stop_detail

    def test_a_worker_advancing_an_expired_request_stops_the_run_too(self, settings, operator, demo_capabilities):
        settings.AGENTOPS_APPROVAL_TTL_SECONDS = 60
        run, approval = paused(operator, deadline_s=600)
        # The request lapses (moved into the past here) before anyone decides it.
        past = timezone.now() - timezone.timedelta(seconds=1)
        state = dict(run.state)
        state["pending_approval"] = {**state["pending_approval"], "expires_at": past.timestamp()}
        Run.objects.filter(pk=run.pk).update(state=state)
        Approval.objects.filter(pk=approval.pk).update(expires_at=past)
        engine.run_advance(run_id=run.pk, worker="test-worker")
        run.refresh_from_db()
        assert run.stop_reason == "approval_expired"
        assert Approval.objects.get(pk=approval.pk).state == "expired"

    def test_an_expired_request_can_no_longer_be_decided(self, settings, operator, second_operator,
                                                         demo_capabilities):
        settings.AGENTOPS_APPROVAL_TTL_SECONDS = 60
        run, approval = paused(operator, deadline_s=600)
        Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timezone.timedelta(seconds=1))
        with pytest.raises(Conflict, match="expired"):
            services.approval_decide(approval_id=approval.pk, user=second_operator, approve=True,
                                     channel="api", expected_hash=bound_hash(approval.pk))


class TestInbox:
    url = "/runs/approvals/"

    @pytest.fixture
    def request_for(self, make_run, make_revision, make_step, make_approval, make_capability, second_operator):
        def make(expires_in_s, deadline_in_s):
            version = make_capability("create_ticket", side_effect="write", requires_approval=True)
            now = timezone.now()
            run = make_run(owner=second_operator, status="awaiting_approval",
                           deadline_at=now + timezone.timedelta(seconds=deadline_in_s))
            rev = make_revision(run, steps=[{"id": "s1", "capability": "create_ticket", "arguments": {"title": "x"}}])
            step = make_step(rev, key="s1", capability="create_ticket", version=version, status="awaiting_approval",
                             approval_state="pending")
            return make_approval(run, revision=rev, step=step,
                                 expires_at=now + timezone.timedelta(seconds=expires_in_s))
        return make

    def test_it_says_a_request_expires_at_its_ttl(self, client_for, operator, request_for):
        request_for(expires_in_s=600, deadline_in_s=3600)
        body = client_for(operator).get(self.url).content.decode()
        assert "(its TTL)" in body and "Approve" in body

    def test_it_says_a_request_expires_at_the_run_deadline(self, client_for, operator, request_for):
        request_for(expires_in_s=600, deadline_in_s=600)
        assert "(at the run&#x27;s deadline)" in client_for(operator).get(self.url).content.decode()

    def test_an_expired_request_is_not_offered(self, client_for, operator, request_for):
        approval = request_for(expires_in_s=-2, deadline_in_s=600)
        body = client_for(operator).get(self.url).content.decode()
        assert f"approval-{approval.pk}" not in body and "Nothing is waiting for approval." in body
        card = client_for(operator).post(f"/runs/approvals/{approval.pk}/decide/", {"decision": "approve",
                                         "expected_hash": approval.arguments_hash}, HTTP_HX_REQUEST="true")
        assert card.status_code == 409

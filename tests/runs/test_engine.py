"""Whole runs advanced in-process through the persistence adapter (no worker)."""
import pytest

from capabilities.models import Capability, CapabilityVersion, Ticket
from runs import engine, services
from runs.models import Approval, Attempt, Decision, PlanRevision, Run


@pytest.fixture
def demo_capabilities(db):
    """The bundled capabilities, as sync leaves them (a transactional test may have flushed them)."""
    from capabilities.services import python_capabilities_sync

    python_capabilities_sync()
    # Poll fast: the policy's 5 s interval is for people watching the demo.
    CapabilityVersion.objects.filter(capability__name="get_ticket_status").update(polling_interval_s=0.01)


def advance(run):
    engine.run_advance(run_id=run.pk, worker="test-worker")
    run.refresh_from_db()
    return run


def start(owner, plans, completion, **kw):
    return services.run_start(owner=owner, goal="Find the travel policy", completion=completion,
                              budgets={"deadline_s": 60}, planner="scripted", planner_config={"plans": plans}, **kw)


@pytest.mark.django_db(transaction=True)
class TestRunAdvance:
    def test_it_completes_and_records_the_whole_trace(self, operator, demo_capabilities):
        run = start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}}]],
                    {"capability": "search_documents", "path": "documents.0.id", "exists": True})
        run = advance(run)
        assert run.status == "completed" and run.stop_reason == "completed"
        assert run.tool_calls == 1 and run.revisions == 1 and run.iterations == 2
        revision = PlanRevision.objects.get(run=run)
        assert revision.accepted and revision.reason_code == "initial"
        attempt = Attempt.objects.get(run=run)
        assert attempt.status == "ok" and attempt.output["documents"][0]["id"].startswith("POL-")
        assert Decision.objects.get(attempt=attempt).decision == "complete"
        assert attempt.step.status == "succeeded"
        assert run.finished_at is not None and run.lease_owner == ""

    def test_it_pauses_for_approval_then_resumes(self, operator, second_operator, demo_capabilities):
        run = start(operator, [[{"capability": "create_ticket", "arguments": {"title": "Travel question"}}]],
                    {"capability": "create_ticket", "path": "ticket_id", "exists": True})
        run = advance(run)
        assert run.status == "awaiting_approval"
        approval = Approval.objects.get(run=run, state="pending")
        assert approval.kind == "step" and approval.arguments == {"title": "Travel question"}
        assert not Ticket.objects.exists()
        services.approval_decide(approval_id=approval.pk, user=second_operator, approve=True, comment="fine",
                                 expected_hash=approval.arguments_hash)
        run = advance(run)
        assert run.status == "completed"
        assert Ticket.objects.count() == 1
        assert Attempt.objects.get(run=run).side_effect_status == "committed"

    def test_it_stops_when_the_approval_is_rejected(self, operator, second_operator, demo_capabilities):
        run = start(operator, [[{"capability": "create_ticket", "arguments": {"title": "Travel question"}}]],
                    {"capability": "create_ticket", "path": "ticket_id", "exists": True})
        run = advance(run)
        approval = Approval.objects.get(run=run)
        services.approval_decide(approval_id=approval.pk, user=second_operator, approve=False, comment="not now")
        run = advance(run)
        assert run.status == "stopped" and run.stop_reason == "approval_rejected"
        assert "not now" in run.stop_detail
        assert not Ticket.objects.exists()

    def test_it_cancels_a_queued_run_at_once(self, operator, demo_capabilities):
        run = start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}}]],
                    {"capability": "search_documents", "path": "documents.0.id", "exists": True})
        services.run_cancel(run_id=run.pk, user=operator)
        run.refresh_from_db()
        assert run.status == "cancelled" and run.stop_reason == "cancelled"
        assert engine.run_advance(run_id=run.pk, worker="w") is None

    def test_it_stalls_a_planner_restating_the_same_empty_search(self, operator, demo_capabilities):
        step = {"capability": "search_documents", "arguments": {"q": "zzzz-nothing"}}
        run = start(operator, [[step], [step], [step]],
                    {"capability": "search_documents", "path": "documents.0.id", "exists": True})
        run = advance(run)
        assert run.stop_reason == "stalled"
        assert run.tool_calls == 2
        assert run.stop_attempt is not None and run.stop_attempt.repeated_without_progress
        assert run.repeated_attempts == 1

    def test_a_second_worker_does_not_take_a_held_run(self, operator, demo_capabilities):
        run = start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}}]],
                    {"capability": "search_documents", "path": "documents.0.id", "exists": True})
        assert engine.claim(run.pk, "worker-a")
        assert not engine.claim(run.pk, "worker-b")
        assert engine.run_advance(run_id=run.pk, worker="worker-b") is None
        assert Run.objects.get(pk=run.pk).status == "queued"

"""Whole runs through a real Celery worker process on the configured database and broker."""
import pytest
from django.utils import timezone

from capabilities.models import Capability, CapabilityVersion, Ticket
from core.models import AuditEvent
from runs import services
from runs.models import Approval, Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def registry(db):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    CapabilityVersion.objects.filter(capability__name="get_ticket_status").update(
        polling_interval_s=0.2, polling_max_attempts=500)
    # Edited in place, so the registry's version is moved as capabilities.policy moves it: workers
    # keep the specs they read at one version.
    Capability.objects.filter(name="get_ticket_status").update(updated_at=timezone.now())


def status_of(run_id):
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


class TestRunsOnAWorker:
    def test_an_approved_step_resumes_and_completes(self, celery_worker, registry, operator, second_operator,
                                                    wait_until):
        run = services.run_start(
            owner=operator, goal="Open a ticket", planner="scripted",
            planner_config={"plans": [[{"capability": "create_ticket", "arguments": {"title": "Printer on fire"}}]]},
            completion={"capability": "create_ticket", "path": "ticket_id", "exists": True},
            budgets={"deadline_s": 120})
        wait_until(lambda: status_of(run.pk) == "awaiting_approval", message="the approval request")
        approval = Approval.objects.get(run=run, state="pending")
        services.approval_decide(approval_id=approval.pk, user=second_operator, approve=True,
                                 expected_hash=approval.arguments_hash, channel="api")
        wait_until(lambda: status_of(run.pk) == "completed", message="completion after approval")
        assert Ticket.objects.filter(title="Printer on fire").count() == 1
        run.refresh_from_db()
        assert run.stop_reason == "completed" and run.tool_calls == 1 and run.lease_owner == ""

    def test_a_cancelled_run_stops_at_the_next_step_boundary(self, celery_worker, registry, operator, wait_until):
        ticket = Ticket.objects.create(idempotency_key="k-open", title="Never resolved")
        run = services.run_start(
            owner=operator, goal="Wait for a ticket", planner="scripted",
            planner_config={"plans": [[{"capability": "get_ticket_status", "arguments": {"ticket_id": ticket.pk}}]]},
            completion={"capability": "get_ticket_status", "path": "status", "equals": "resolved"},
            budgets={"deadline_s": 120, "max_iterations": 1000, "max_tool_calls": 1000,
                     "max_calls_per_capability": {"get_ticket_status": 1000}})
        wait_until(lambda: Run.objects.get(pk=run.pk).tool_calls >= 2, message="polling to start")
        services.run_cancel(run_id=run.pk, user=operator)
        wait_until(lambda: status_of(run.pk) == "cancelled", message="the cancellation")
        run.refresh_from_db()
        assert run.stop_reason == "cancelled" and run.stop_detail
        assert AuditEvent.objects.filter(action="run.cancelled", target_id=str(run.pk), actor=operator).exists()
        calls = run.tool_calls
        run.refresh_from_db()
        assert run.tool_calls == calls

    def test_a_project_past_its_run_quota_stops_the_next_run_and_a_rule_tells(self, celery_worker, registry, operator,
                                                                              wait_until, settings):
        from core.models import Project
        from notifications import outbox
        from notifications import services as notify
        from notifications.models import Delivery

        settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["hooks.example.com"]
        Project.objects.filter(slug="default").update(quota_runs_per_day=1)
        channel = notify.channel_save(user=operator, name="ops", url="json://hooks.example.com/agentops")
        rule = notify.rule_save(user=operator, name="quota reached", event="run_stopped",
                                params={"stop_reasons": ["quota_exhausted"]}, channel_ids=[channel.pk])
        plan = {"plans": [[{"capability": "search_documents", "arguments": {"q": "travel"}}]]}
        found = {"capability": "search_documents", "path": "documents.0.id", "exists": True}
        first, second = (services.run_start(owner=operator, goal=goal, planner="scripted", planner_config=plan,
                                            completion=found, budgets={"deadline_s": 120})
                         for goal in ("Within the quota", "Past the quota"))
        wait_until(lambda: Run.objects.filter(pk__in=[first.pk, second.pk], finished_at__isnull=False).count() == 2,
                   message="both runs to stop")
        first.refresh_from_db()
        second.refresh_from_db()
        assert first.stop_reason == "completed"
        assert second.stop_reason == "quota_exhausted:runs_per_day" and second.tool_calls == 0 and second.revisions == 0
        assert "quota of 1 runs a day" in second.stop_detail
        outbox.enqueue_events(timezone.now())
        assert list(Delivery.objects.filter(rule=rule).values_list("run_id", flat=True)) == [second.pk]

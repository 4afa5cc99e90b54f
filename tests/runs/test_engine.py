"""Whole runs advanced in-process through the persistence adapter (no worker)."""
import pytest
from django.utils import timezone

from capabilities.models import Capability, CapabilityVersion, Ticket
from runs import services
from runs.models import Approval, Attempt, Decision, PlanRevision, Run
from runs.worker import engine, leases, sweeps
from tests.binding import bound_hash


@pytest.fixture
def demo_capabilities(db, manual_advance):
    """The bundled capabilities, as sync leaves them (a transactional test may have flushed them)."""
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    # Poll fast: the policy's 5 s interval is for people watching the demo.
    CapabilityVersion.objects.filter(capability__name="get_ticket_status").update(polling_interval_s=0.01)
    # Edited in place, so the registry's version is moved as capabilities.policy moves it: workers
    # keep the specs they read at one version.
    Capability.objects.filter(name="get_ticket_status").update(updated_at=timezone.now())


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
                                 expected_hash=approval.arguments_hash, channel="api")
        run = advance(run)
        assert run.status == "completed"
        assert Ticket.objects.count() == 1
        assert Attempt.objects.get(run=run).side_effect_status == "committed"

    def test_it_stops_when_the_approval_is_rejected(self, operator, second_operator, demo_capabilities):
        run = start(operator, [[{"capability": "create_ticket", "arguments": {"title": "Travel question"}}]],
                    {"capability": "create_ticket", "path": "ticket_id", "exists": True})
        run = advance(run)
        approval = Approval.objects.get(run=run)
        services.approval_decide(approval_id=approval.pk, user=second_operator, approve=False, comment="not now",
                                 channel="api", expected_hash=bound_hash(approval.pk))
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
        # Its attempt answered ok: the step says so (the decision says the run stalled on it).
        assert run.stop_attempt.step.status == "succeeded"
        assert run.stop_attempt.decision.decision == "stop_stalled"

    def test_a_second_worker_does_not_take_a_held_run(self, operator, demo_capabilities):
        run = start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}}]],
                    {"capability": "search_documents", "path": "documents.0.id", "exists": True})
        assert leases.claim(run.pk, "worker-a")
        assert not leases.claim(run.pk, "worker-b")
        assert engine.run_advance(run_id=run.pk, worker="worker-b") is None
        assert Run.objects.get(pk=run.pk).status == "queued"


@pytest.mark.django_db(transaction=True)
class TestPlanApprovalAndPolicy:
    def test_a_plan_waits_for_approval_before_anything_runs(self, operator, second_operator, demo_capabilities):
        run = start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}}]],
                    {"capability": "search_documents", "path": "documents.0.id", "exists": True},
                    require_plan_approval=True)
        run = advance(run)
        assert run.status == "awaiting_approval" and run.tool_calls == 0
        approval = Approval.objects.get(run=run, state="pending")
        assert approval.kind == "plan" and approval.plan_hash and approval.step is None
        services.approval_decide(approval_id=approval.pk, user=second_operator, approve=True,
                                 expected_hash=approval.plan_hash, channel="api")
        run = advance(run)
        assert run.status == "completed" and run.tool_calls == 1

    def test_a_rejected_plan_stops_the_run(self, operator, second_operator, demo_capabilities):
        run = start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}}]],
                    {"capability": "search_documents", "path": "documents.0.id", "exists": True},
                    require_plan_approval=True)
        run = advance(run)
        approval = Approval.objects.get(run=run, state="pending")
        services.approval_decide(approval_id=approval.pk, user=second_operator, approve=False, comment="too broad",
                                 channel="api", expected_hash=bound_hash(approval.pk))
        run = advance(run)
        assert run.stop_reason == "approval_rejected" and run.tool_calls == 0

    def test_permission_is_checked_again_at_the_point_of_action(self, operator, second_operator, demo_capabilities):
        from django.contrib.auth.models import Permission

        run = start(operator, [[{"capability": "create_ticket", "arguments": {"title": "Access request"}}]],
                    {"capability": "create_ticket", "path": "ticket_id", "exists": True})
        run = advance(run)
        approval = Approval.objects.get(run=run, state="pending")
        # The owner loses the permission while the step waits for approval.
        operator.project_memberships.all().delete()
        operator.user_permissions.add(Permission.objects.get(codename="start_run"))
        services.approval_decide(approval_id=approval.pk, user=second_operator, approve=True,
                                 channel="api", expected_hash=bound_hash(approval.pk))
        run = advance(run)
        assert run.stop_reason == "terminal_failure:permission_denied"
        assert not Ticket.objects.exists()

    def test_the_sweep_stops_a_run_whose_deadline_passed_while_waiting(self, operator, demo_capabilities):
        from django.utils import timezone

        run = start(operator, [[{"capability": "create_ticket", "arguments": {"title": "Late"}}]],
                    {"capability": "create_ticket", "path": "ticket_id", "exists": True})
        run = advance(run)
        assert run.status == "awaiting_approval"
        assert sweeps.sweep_overdue_runs(now=timezone.now()) == 0
        assert sweeps.sweep_overdue_runs(now=timezone.now() + timezone.timedelta(seconds=61)) == 1
        run.refresh_from_db()
        assert run.stop_reason == "budget_exhausted:deadline" and "awaiting approval" in run.stop_detail
        assert Approval.objects.get(run=run).state == "expired"

    def test_an_approval_decided_twice_is_refused_the_second_time(self, operator, second_operator, viewer,
                                                                  demo_capabilities):
        from core.errors import Conflict, NotAllowed

        run = start(operator, [[{"capability": "create_ticket", "arguments": {"title": "Twice"}}]],
                    {"capability": "create_ticket", "path": "ticket_id", "exists": True})
        advance(run)
        approval = Approval.objects.get(run=run)
        with pytest.raises(NotAllowed):
            services.approval_decide(approval_id=approval.pk, user=viewer, approve=True,
                                     channel="api", expected_hash=bound_hash(approval.pk))
        with pytest.raises(Conflict):
            services.approval_decide(approval_id=approval.pk, user=second_operator, approve=True,
                                     expected_hash="not-what-was-shown", channel="api")
        services.approval_decide(approval_id=approval.pk, user=second_operator, approve=False,
                                 channel="api", expected_hash=bound_hash(approval.pk))
        with pytest.raises(Conflict, match="Already rejected by olga"):
            services.approval_decide(approval_id=approval.pk, user=operator, approve=True,
                                     channel="api", expected_hash=bound_hash(approval.pk))

    def test_four_eyes_forbids_approving_ones_own_run(self, operator, settings, demo_capabilities):
        from core.errors import NotAllowed

        settings.AGENTOPS_FOUR_EYES = True
        run = start(operator, [[{"capability": "create_ticket", "arguments": {"title": "Mine"}}]],
                    {"capability": "create_ticket", "path": "ticket_id", "exists": True})
        advance(run)
        with pytest.raises(NotAllowed, match="Four-eyes"):
            services.approval_decide(approval_id=Approval.objects.get(run=run).pk, user=operator, approve=True,
                                     channel="api", expected_hash=bound_hash(Approval.objects.get(run=run).pk))

    def test_large_outputs_are_stored_by_reference(self, operator, demo_capabilities, settings):
        settings.AGENTOPS_INLINE_OUTPUT_BYTES = 256
        run = start(operator, [[{"capability": "search_documents", "arguments": {"q": "employees must", "limit": 10}}]],
                    {"capability": "search_documents", "path": "documents.0.id", "exists": True})
        run = advance(run)
        attempt = Attempt.objects.get(run=run)
        assert attempt.output_ref is not None and attempt.output_ref.size_bytes > 256
        assert "preview" in attempt.output


@pytest.mark.django_db
class TestOrphanedRuns:
    @pytest.fixture
    def queued(self, monkeypatch):
        from runs import tasks

        sent = []
        monkeypatch.setattr(tasks.advance_run, "apply_async", lambda args, **kw: sent.append(args[0]))
        return sent

    def _run(self, operator, **fields):
        from django.utils import timezone

        run = start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}}]],
                    {"capability": "search_documents", "path": "documents.0.id", "exists": True})
        Run.objects.filter(pk=run.pk).update(updated_at=timezone.now() - timezone.timedelta(minutes=10), **fields)
        return run

    def test_it_queues_again_a_run_no_worker_has_touched(self, operator, queued):
        run = self._run(operator)
        assert sweeps.requeue_orphaned_runs() == 1 and queued == [run.pk]

    def test_it_leaves_held_waiting_and_recent_runs_alone(self, operator, queued):
        from django.utils import timezone

        soon = timezone.now() + timezone.timedelta(minutes=5)
        self._run(operator, lease_owner="w", lease_expires_at=soon)           # a worker holds it
        self._run(operator, status="running", next_action_at=soon)            # a backoff is pending
        self._run(operator, status="awaiting_approval")                      # waits for a person
        start(operator, [[{"capability": "search_documents", "arguments": {"q": "x"}}]],
              {"capability": "search_documents", "path": "documents.0.id", "exists": True})  # just queued
        assert sweeps.requeue_orphaned_runs() == 0 and queued == []


@pytest.mark.django_db(transaction=True)
def test_a_broker_outage_does_not_lose_the_started_run(operator, monkeypatch, demo_capabilities):
    from kombu.exceptions import OperationalError

    from runs import tasks

    monkeypatch.undo()  # let the run's advance really be queued (and fail)

    def broker_down(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(tasks.advance_run, "apply_async", broker_down)
    run = start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}}]],
                {"capability": "search_documents", "path": "documents.0.id", "exists": True})
    assert Run.objects.get(pk=run.pk).status == "queued"


@pytest.mark.django_db
class TestOwnerAuthorizer:
    def test_the_owner_read_with_the_run_is_not_read_again(self, operator):
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from runs.worker.adapters import OwnerAuthorizer

        owner = type(operator).objects.get(pk=operator.pk)
        with CaptureQueriesContext(connection) as queries:
            authorizer = OwnerAuthorizer(operator.pk, owner=owner)
            assert authorizer.permits("runs.start_run")
            assert authorizer.permits("runs.start_run")
        # Only has_perm's own reads of the permissions (once), never the user row.
        assert queries.captured_queries
        assert not [q for q in queries.captured_queries if q["sql"].startswith('SELECT "auth_user"."id"')]

    def test_an_inactive_owner_is_refused_and_a_changed_owner_is_read_again(self, operator):
        from runs.worker.adapters import OwnerAuthorizer

        operator.is_active = False
        assert not OwnerAuthorizer(operator.pk, owner=operator).permits("runs.start_run")
        operator.is_active = True
        type(operator).objects.filter(pk=operator.pk).update(is_active=False)
        authorizer = OwnerAuthorizer(operator.pk, recheck_s=0.0, owner=operator)
        assert not authorizer.permits("runs.start_run")  # the recheck reads the row: now inactive

"""Database constraints reject rows that would make a trace lie."""
import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from capabilities.models import Capability, CapabilityVersion
from runs.models import Approval, Attempt, PlanRevision, Run, Step


@pytest.fixture
def run(operator):
    return Run.objects.create(goal="g", completion={"capability": "c", "exists": True}, budgets={}, planner="rules",
                              owner=operator, trace_id="t" * 32)


def rejects(**changes):
    def check(make):
        with pytest.raises(IntegrityError), transaction.atomic():
            make(**changes)
    return check


@pytest.mark.django_db
class TestRunConstraints:
    def test_a_finished_run_must_say_why(self, run):
        with pytest.raises(IntegrityError), transaction.atomic():
            Run.objects.filter(pk=run.pk).update(status="stopped", stop_reason="")

    def test_a_live_run_claims_no_stop_reason(self, run):
        with pytest.raises(IntegrityError), transaction.atomic():
            Run.objects.filter(pk=run.pk).update(stop_reason="stalled")

    def test_stop_reasons_are_a_closed_set(self, run):
        with pytest.raises(IntegrityError), transaction.atomic():
            Run.objects.filter(pk=run.pk).update(status="stopped", stop_reason="gave_up")

    def test_a_known_stop_reason_is_accepted(self, run):
        Run.objects.filter(pk=run.pk).update(status="stopped", stop_reason="budget_exhausted:deadline")
        run.refresh_from_db()
        assert (run.status, run.stop_reason) == ("stopped", "budget_exhausted:deadline")

    def test_status_is_a_closed_set(self, run):
        with pytest.raises(IntegrityError), transaction.atomic():
            Run.objects.filter(pk=run.pk).update(status="paused")

    def test_trace_ids_are_unique(self, run, operator):
        with pytest.raises(IntegrityError), transaction.atomic():
            Run.objects.create(goal="g", completion={}, budgets={}, planner="rules", owner=operator,
                               trace_id=run.trace_id)


@pytest.mark.django_db
class TestTraceConstraints:
    def test_revision_numbers_are_unique_per_run(self, run):
        PlanRevision.objects.create(run=run, number=1, accepted=True, reason_code="initial")
        with pytest.raises(IntegrityError), transaction.atomic():
            PlanRevision.objects.create(run=run, number=1, accepted=True, reason_code="initial")

    def test_replan_reasons_are_a_closed_set(self, run):
        with pytest.raises(IntegrityError), transaction.atomic():
            PlanRevision.objects.create(run=run, number=1, accepted=True, reason_code="felt_like_it")

    def _step(self, run):
        revision = PlanRevision.objects.create(run=run, number=1, accepted=True, reason_code="initial")
        return Step.objects.create(run=run, revision=revision, index=0, key="s1", capability_name="c",
                                   arguments_hash="h")

    def _attempt(self, step, **kw):
        now = timezone.now()
        fields = dict(run=step.run, step=step, uid=kw.pop("uid", "u1"), number=1, capability_name="c",
                      signature="c|{}", signature_hash="x", started_at=now, ended_at=now, latency_s=0.1,
                      status="ok", trace_id="t", span_id="s")
        fields.update(kw)
        return Attempt.objects.create(**fields)

    def test_attempt_numbers_are_unique_per_step(self, run):
        # At one start time: on PostgreSQL the constraint holds started_at, the partition key (runs.partitions).
        step = self._step(run)
        first = self._attempt(step)
        with pytest.raises(IntegrityError), transaction.atomic():
            self._attempt(step, uid="u2", started_at=first.started_at)

    def test_a_failed_attempt_names_its_error_code(self, run):
        step = self._step(run)
        with pytest.raises(IntegrityError), transaction.atomic():
            self._attempt(step, status="retryable", error_code="")

    def test_an_ok_attempt_has_no_error_code(self, run):
        step = self._step(run)
        with pytest.raises(IntegrityError), transaction.atomic():
            self._attempt(step, status="ok", error_code="timeout")

    def test_error_codes_are_a_closed_set(self, run):
        step = self._step(run)
        with pytest.raises(IntegrityError), transaction.atomic():
            self._attempt(step, status="terminal", error_code="oops")

    def test_only_one_pending_approval_per_run(self, run):
        step = self._step(run)
        expires = timezone.now() + timezone.timedelta(hours=1)
        Approval.objects.create(run=run, kind="step", revision=step.revision, step=step, expires_at=expires)
        with pytest.raises(IntegrityError), transaction.atomic():
            Approval.objects.create(run=run, kind="step", revision=step.revision, step=step, expires_at=expires)

    def test_a_decided_approval_records_who(self, run):
        step = self._step(run)
        with pytest.raises(IntegrityError), transaction.atomic():
            Approval.objects.create(run=run, kind="step", revision=step.revision, step=step, state="approved",
                                    decided_at=timezone.now(), expires_at=timezone.now())


@pytest.mark.django_db
class TestCapabilityConstraints:
    def _version(self, **kw):
        capability = Capability.objects.create(name=kw.pop("name", "cap"), kind="python")
        return CapabilityVersion.objects.create(capability=capability, number=1, **kw)

    def test_version_numbers_are_unique_per_capability(self):
        version = self._version()
        with pytest.raises(IntegrityError), transaction.atomic():
            CapabilityVersion.objects.create(capability=version.capability, number=1)

    @pytest.mark.parametrize("fields", [
        {"timeout_s": 0}, {"retry_max_attempts": 0}, {"side_effect": "explosive"},
        {"rate_limit_calls": 5}, {"polling_interval_s": 2.0}, {"retry_backoff_base_s": -1},
    ])
    def test_it_rejects_invalid_policies(self, fields):
        with pytest.raises(IntegrityError), transaction.atomic():
            self._version(**fields)

    def test_capability_kinds_are_a_closed_set(self):
        with pytest.raises(IntegrityError), transaction.atomic():
            Capability.objects.create(name="x", kind="shell")


@pytest.mark.django_db
def test_the_checkpoint_is_compressed_with_lz4_on_postgresql():
    """Every pass rewrites runs_run.state; lz4 stores it in less than half pglz's time."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: SQLite does not compress")
    with connection.cursor() as cursor:
        cursor.execute("SELECT attcompression FROM pg_attribute "
                       "WHERE attrelid = 'runs_run'::regclass AND attname = 'state'")
        assert cursor.fetchone()[0] == "l"

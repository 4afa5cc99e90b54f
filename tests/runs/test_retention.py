"""Retention: finished runs older than N days go, with everything under them; audit events and live runs stay."""
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from capabilities.models import StoredOutput
from capabilities.outputs import store_json
from core.models import AuditEvent
from runs.models import Approval, Attempt, Decision, PlanRevision, Run, RunLabel, Step
from runs.retention import purge_by_setting, purge_runs


@pytest.fixture
def old_and_new(make_run, make_revision, make_step, make_attempt, make_approval):
    now = timezone.now()
    old = make_run(goal="old", status="stopped", stop_reason="stalled", finished_at=now - timedelta(days=40))
    shared = store_json({"rows": ["shared"] * 10})
    only_old = store_json({"rows": ["only the old run"] * 10})
    step = make_step(make_revision(old))
    stop = make_attempt(step, output_ref=only_old)
    make_attempt(step, number=2, output_ref=shared)
    make_approval(old, revision=step.revision, step=step, state="expired", decided_at=now - timedelta(days=40))
    Run.objects.filter(pk=old.pk).update(stop_attempt=stop)
    RunLabel.objects.create(run=old, key="team", value="payments")
    AuditEvent.objects.create(action="run.started", target_type="run", target_id=str(old.pk), summary="started")
    recent = make_run(goal="recent", status="completed", finished_at=now - timedelta(days=2))
    make_attempt(make_step(make_revision(recent)), output_ref=shared)
    live = make_run(goal="live and old", status="running", created_at=now - timedelta(days=90))
    return {"old": old, "recent": recent, "live": live, "shared": shared, "only_old": only_old}


class TestPurge:
    def test_it_deletes_old_finished_runs_and_all_under_them_but_keeps_audit(self, old_and_new):
        old = old_and_new["old"]
        report = purge_runs(older_than_days=30)
        assert (report.runs, report.attempts, report.stored_outputs) == (1, 2, 1)
        assert set(Run.objects.values_list("goal", flat=True)) == {"recent", "live and old"}
        for model in (PlanRevision, Step, Attempt, Decision, Approval, RunLabel):
            assert not model.objects.filter(run_id=old.pk).exists(), model.__name__
        # The large output only the old run used went with it; the shared one stays.
        assert not StoredOutput.objects.filter(pk=old_and_new["only_old"].pk).exists()
        assert StoredOutput.objects.filter(pk=old_and_new["shared"].pk).exists()
        assert AuditEvent.objects.filter(target_type="run", target_id=str(old.pk)).exists()
        assert AuditEvent.objects.filter(action="runs.purged").get().details["runs"] == 1

    def test_a_dry_run_counts_and_deletes_nothing(self, old_and_new):
        report = purge_runs(older_than_days=30, dry_run=True)
        assert (report.runs, report.attempts, report.stored_outputs, report.dry_run) == (1, 2, 1, True)
        assert Run.objects.count() == 3 and not AuditEvent.objects.filter(action="runs.purged").exists()

    def test_it_works_in_batches(self, make_run):
        old = timezone.now() - timedelta(days=10)
        for i in range(7):
            make_run(goal=f"old {i}", status="completed", finished_at=old)
        seen = []
        report = purge_runs(older_than_days=5, batch_size=3, progress=lambda r, total: seen.append((r.runs, total)))
        assert report.runs == 7 and seen == [(3, 7), (6, 7), (7, 7)]

    def test_the_command_reports_progress_and_refuses_bad_input(self, old_and_new):
        out = StringIO()
        call_command("purge_runs", "--older-than", "30", "--dry-run", stdout=out)
        assert "Would delete 1 runs" in out.getvalue()
        out = StringIO()
        call_command("purge_runs", "--older-than", "30", "--batch-size", "1", stdout=out)
        assert "1/1 runs deleted" in out.getvalue() and "Deleted 1 runs" in out.getvalue()
        with pytest.raises(CommandError, match="at least 1"):
            call_command("purge_runs", "--older-than", "0")

    def test_the_scheduled_purge_follows_the_setting(self, old_and_new, settings):
        from agentops.settings import CELERY_BEAT_SCHEDULE

        assert CELERY_BEAT_SCHEDULE["purge-old-runs"] == {"task": "runs.purge_old_runs", "schedule": 86_400.0}
        settings.AGENTOPS_RETENTION_DAYS = 0
        assert purge_by_setting() is None and Run.objects.count() == 3
        settings.AGENTOPS_RETENTION_DAYS = 30
        assert purge_by_setting().runs == 1

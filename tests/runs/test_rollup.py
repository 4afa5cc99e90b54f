"""The dashboard rollup: written when a run finishes, equal to a recount, read with live rows."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from runs import dashboard, rollup
from runs.models import AttemptRollup, Run, RunRollup


def _snapshot():
    runs = sorted(RunRollup.objects.values_list("kind", "hour", "category", "runs"))
    attempts = sorted(AttemptRollup.objects.values_list("hour", "capability_name", "bin", "attempts", "errors",
                                                        "repeated", "latency_min", "latency_max"))
    return runs, [a[:6] + (round(a[6], 9), round(a[7], 9)) for a in attempts]


class TestRecording:
    def test_it_counts_a_run_when_services_finish_it(self, make_run, make_revision, make_step, make_attempt,
                                                     operator):
        from runs.services import run_cancel

        run = make_run(status="queued")
        step = make_step(make_revision(run))
        make_attempt(step, latency_s=0.3)
        make_attempt(step, number=2, latency_s=0.3, status="retryable", repeated_without_progress=True)
        assert not RunRollup.objects.exists() and not AttemptRollup.objects.exists()  # live: read from the tables
        run_cancel(run_id=run.pk, user=operator)
        run.refresh_from_db()
        assert set(RunRollup.objects.values_list("kind", "hour", "category", "runs")) == {
            ("created", rollup.hour_of(run.created_at), "cancelled", 1),
            ("finished", rollup.hour_of(run.finished_at), "cancelled", 1)}
        row = AttemptRollup.objects.get()
        assert (row.attempts, row.errors, row.repeated) == (2, 1, 1)
        assert row.latency_min == row.latency_max == pytest.approx(0.3)

    def test_it_leaves_evaluation_runs_out(self, make_run, operator):
        from evaluation.models import Evaluation, EvaluationSuite

        evaluation = Evaluation.objects.create(suite=EvaluationSuite.objects.create(name="s", tasks=[]),
                                               started_by=operator)
        make_run(status="stopped", stop_reason="stalled", evaluation=evaluation)
        assert not RunRollup.objects.exists()

    def test_a_rebuild_gives_the_same_rows_as_recording_as_runs_finish(self, make_run, make_revision, make_step,
                                                                       make_attempt):
        now = timezone.now()
        for i in range(6):
            run = make_run(status="stopped" if i % 2 else "completed", created_at=now - timedelta(hours=i * 5),
                           finished_at=now - timedelta(hours=i * 5 - 1))
            step = make_step(make_revision(run), capability="create_ticket" if i % 3 else "search_documents")
            for n in range(1, 4):
                make_attempt(step, number=n, latency_s=0.05 * n * (i + 1), started_at=now - timedelta(hours=i * 5),
                             status="ok" if n < 3 else "retryable")
        incremental = _snapshot()
        rollup.rebuild()
        assert _snapshot() == incremental


@pytest.mark.parametrize("window_key", ["1h", "24h", "7d", "30d"])
def test_the_dashboard_equals_a_direct_count_over_the_tables(window_key, make_run, make_revision, make_step,
                                                               make_attempt):
    """Finished (rollup), live (tables) and current-hour runs together, checked against plain counts."""
    now = timezone.now()
    ages = [timedelta(minutes=m) for m in (3, 20, 50, 70, 130, 600, 1500, 3000, 9000, 20000, 40000)]
    for n, age in enumerate(ages):
        status = ["completed", "stopped", "running", "awaiting_approval"][n % 4]
        run = make_run(status=status, created_at=now - age,
                       finished_at=now - age + timedelta(minutes=1) if status in ("completed", "stopped") else None)
        step = make_step(make_revision(run))
        for k in range(1, 3):
            make_attempt(step, number=k, latency_s=0.01 * (n + k), started_at=now - age + timedelta(seconds=k),
                         status="ok" if k == 1 else "retryable")
    data = dashboard.dashboard(window_key=window_key, now=now)
    narrowed = dashboard.dashboard(window_key=window_key, now=now, runs=Run.objects.all())  # tables only
    assert {k: narrowed[k] for k in ("runs_created", "finished_total", "attempts_total", "outcomes")} == \
        {k: data[k] for k in ("runs_created", "finished_total", "attempts_total", "outcomes")}
    start = data["start"]
    runs = Run.objects.filter(created_at__gte=start, created_at__lte=now)
    assert data["runs_created"] == runs.count()
    assert data["finished_total"] == Run.objects.filter(finished_at__gte=start, finished_at__lte=now).count()
    from runs.models import Attempt

    attempts = Attempt.objects.filter(started_at__gte=start, started_at__lte=now)
    assert data["attempts_total"] == attempts.count()
    if attempts.exists():
        (row,) = data["capabilities"]
        assert row["errors"] == attempts.exclude(status="ok").count()
        latencies = sorted(attempts.values_list("latency_s", flat=True))
        assert row["p50"] == pytest.approx(latencies[(len(latencies) * 50 + 99) // 100 - 1], rel=0.06)
        assert row["p95"] == pytest.approx(latencies[(len(latencies) * 95 + 99) // 100 - 1], rel=0.06)


def test_the_rebuild_command_recounts_runs_loaded_by_hand(make_run):
    from io import StringIO

    from django.core.management import call_command

    run = make_run(status="completed")
    RunRollup.objects.all().delete()  # as after a bulk load that bypassed run_finish
    out = StringIO()
    call_command("rebuild_rollup", stdout=out)
    assert "Rollup rebuilt: 2 run rows" in out.getvalue()
    assert RunRollup.objects.get(kind="finished").hour == rollup.hour_of(run.finished_at)


def test_a_decision_is_counted_when_services_record_it(make_run, make_revision, make_step, make_approval,
                                                       second_operator):
    from runs.models import Approval, ApprovalRollup
    from runs.services import approval_decide

    run = make_run(status="awaiting_approval")
    rev = make_revision(run)
    approval = make_approval(run, revision=rev, step=make_step(rev))
    Approval.objects.filter(pk=approval.pk).update(requested_at=timezone.now() - timedelta(seconds=90))
    approval_decide(approval_id=approval.pk, user=second_operator, approve=True)
    row = ApprovalRollup.objects.get()
    assert row.decisions == 1 and row.wait_min == pytest.approx(90, abs=2) and row.wait_min == row.wait_max
    snapshot = list(ApprovalRollup.objects.values_list("hour", "bin", "decisions"))
    rollup.rebuild()
    assert list(ApprovalRollup.objects.values_list("hour", "bin", "decisions")) == snapshot
    # An hour later the decision is read from the rollup, not the table.
    data = dashboard.dashboard(window_key="24h", now=timezone.now() + timedelta(hours=1))
    assert data["approvals_decided"] == 1
    assert data["decision_median"].total_seconds() == pytest.approx(90, abs=2)


@pytest.mark.django_db(transaction=True)
def test_a_run_the_engine_finishes_is_counted_once_with_its_attempts(operator, manual_advance):
    """The fenced pass that stops a run (runs.persistence) counts it, as run_finish does."""
    from capabilities.sync import python_capabilities_sync
    from runs import engine, services

    python_capabilities_sync()
    run = services.run_start(owner=operator, goal="Find the travel policy", budgets={"deadline_s": 60},
                             completion={"capability": "search_documents", "path": "documents.0.id", "exists": True},
                             planner="scripted",
                             planner_config={"plans": [[{"capability": "search_documents", "arguments": {"q": "travel"}}]]})
    engine.run_advance(run_id=run.pk, worker="test-worker")
    run.refresh_from_db()
    assert run.status == "completed"
    assert sorted(RunRollup.objects.values_list("kind", "category", "runs")) == [
        ("created", "completed", 1), ("finished", "completed", 1)]
    assert sum(AttemptRollup.objects.values_list("attempts", flat=True)) == 1
    engine.run_advance(run_id=run.pk, worker="test-worker")  # a duplicate delivery changes nothing
    assert sum(RunRollup.objects.values_list("runs", flat=True)) == 2

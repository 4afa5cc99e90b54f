"""The dashboard rollup: written when a run finishes, equal to a recount, read with live rows."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.dashboard import active as dashboard_active
from runs.dashboard import periods as dashboard
from runs.dashboard import rollup
from runs.models import Attempt, AttemptRollup, Run, RunRollup, StopRollup
from tests.binding import bound_hash


def _snapshot():
    runs = sorted(RunRollup.objects.values_list("kind", "hour", "category", "runs"))
    attempts = sorted(AttemptRollup.objects.values_list("hour", "capability_name", "bin", "attempts", "errors",
                                                        "repeated", "latency_min", "latency_max"))
    stops = sorted(StopRollup.objects.values_list("hour", "stop_reason", "capability_name", "runs"))
    return runs, [a[:6] + (round(a[6], 9), round(a[7], 9)) for a in attempts], stops


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
    approval_decide(approval_id=approval.pk, user=second_operator, approve=True,
                    channel="api", expected_hash=bound_hash(approval.pk))
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
    """The fenced pass that stops a run (runs.worker.persistence) counts it, as run_finish does."""
    from capabilities.kinds.python.sync import python_capabilities_sync
    from runs import services
    from runs.worker import engine

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
    # The stop, by the capability of the attempt that ended the run (set in the same write).
    assert list(StopRollup.objects.values_list("hour", "stop_reason", "capability_name", "runs")) == [
        (rollup.hour_of(run.finished_at), "completed", "search_documents", 1)]
    engine.run_advance(run_id=run.pk, worker="test-worker")  # a duplicate delivery changes nothing
    assert sum(RunRollup.objects.values_list("runs", flat=True)) == 2
    assert sum(StopRollup.objects.values_list("runs", flat=True)) == 1


@pytest.mark.parametrize("window_key", ["1h", "24h", "7d", "30d"])
def test_the_previous_period_and_stops_per_capability_equal_direct_counts(window_key, make_run, make_revision,
                                                                           make_step, make_attempt):
    """The trend's earlier period and the stops per capability, read as the window is (rollup hours, live rows),
    checked against plain counts over the tables."""
    now = timezone.now()
    window = dashboard.WINDOWS[window_key]
    start, _end, _starts = dashboard.window_bounds(window, now)
    earlier = start - window.span
    reasons = ["stalled", "budget_exhausted:tool_calls", "completed", "stalled", "budget_exhausted:retries"]
    span_s = (now - earlier).total_seconds()
    for n in range(15):
        created = earlier + timedelta(seconds=span_s * (n + 0.5) / 15)
        status = "running" if n % 5 == 4 else "stopped"
        reason = "" if status == "running" else reasons[n % 5]
        run = make_run(status="completed" if reason == "completed" else status, stop_reason=reason,
                       created_at=created, finished_at=None if status == "running" else created + timedelta(minutes=1))
        attempt = make_attempt(make_step(make_revision(run), capability=["search_documents", "get_document"][n % 2]),
                               started_at=created, repeated_without_progress=n % 3 == 0)
        if reason:
            Run.objects.filter(pk=run.pk).update(stop_attempt=attempt if n % 4 else None)
    rollup.rebuild()  # make_run counted each run before its stop attempt was set

    previous = dashboard_active.previous_figures(start=earlier, end=start)
    runs = Run.objects.filter(evaluation__isnull=True)
    finished = runs.filter(finished_at__gte=earlier, finished_at__lt=start)
    assert previous["runs_created"] == runs.filter(created_at__gte=earlier, created_at__lt=start).count()
    assert previous["finished_total"] == finished.count()
    if finished.exists():
        assert previous["stall_rate"] == finished.filter(stop_reason="stalled").count() / finished.count()
    attempts = Attempt.objects.filter(started_at__gte=earlier, started_at__lt=start)
    if attempts.exists():
        assert previous["repeated_rate"] == attempts.filter(repeated_without_progress=True).count() / attempts.count()

    for period in ((earlier, start), (start, now)):
        rows = {row["capability"]: row for row in dashboard_active.stops_per_capability(start=period[0], end=period[1])}
        stops = runs.filter(finished_at__gte=period[0], finished_at__lte=period[1])
        for name, capability in (("search_documents", "search_documents"), ("(the planner)", None)):
            of_it = stops.filter(stop_attempt__capability_name=capability) if capability else \
                stops.filter(stop_attempt__isnull=True)
            expected = (of_it.filter(stop_reason="stalled").count(),
                        of_it.filter(stop_reason__startswith="budget_exhausted:").count())
            got = (rows[name]["stalls"], rows[name]["budget_stops"]) if name in rows else (0, 0)
            assert got == expected, (period, name)


def test_the_earlier_period_is_read_from_the_rollup(make_run, make_revision, make_step, make_attempt):
    """A day-long period that ended before this hour reads no run of its own from the run table."""
    now = timezone.now()
    run = make_run(status="stopped", stop_reason="stalled", created_at=now - timedelta(hours=30),
                   finished_at=now - timedelta(hours=30))
    attempt = make_attempt(make_step(make_revision(run), capability="get_document"), started_at=run.created_at)
    Run.objects.filter(pk=run.pk).update(stop_attempt=attempt)
    rollup.rebuild()
    start = dashboard.window_bounds(dashboard.WINDOWS["24h"], now)[0]
    earlier = start - timedelta(hours=24)
    assert dashboard_active.stops_per_capability(start=earlier, end=start)[0]["stalls"] == 1
    assert dashboard_active.previous_figures(start=earlier, end=start)["finished_total"] == 1
    StopRollup.objects.all().delete()
    RunRollup.objects.all().delete()
    assert dashboard_active.stops_per_capability(start=earlier, end=start) == []
    assert dashboard_active.previous_figures(start=earlier, end=start)["finished_total"] == 0


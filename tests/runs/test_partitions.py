"""PostgreSQL: attempts partitioned by month (runs.partitions), created ahead, dropped whole by retention."""
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from capabilities.models import StoredOutput
from capabilities.outputs import store_json
from review.models import Annotation
from runs import partitions, services
from runs.models import Attempt, Decision, PlanRevision, Run
from runs.retention import purge_runs

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql",
                                reason="attempts are partitioned on PostgreSQL only; SQLite keeps one table")

JAN_2025 = datetime(2025, 1, 1, tzinfo=UTC)
FEB_2025 = datetime(2025, 2, 1, tzinfo=UTC)


def home_of(attempt) -> str:
    """The partition a row is stored in."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM runs_attempt WHERE id = %s", [attempt.pk])
        return cursor.fetchone()[0]


def names() -> list[str]:
    return [p.name for p in partitions.partitions()]


class TestMonths:
    def test_the_migration_leaves_this_month_and_the_next_ones_and_a_default(self, db, settings):
        now = timezone.now()
        expected = [partitions.month_start(now)]
        for _ in range(settings.AGENTOPS_ATTEMPT_PARTITIONS_AHEAD):
            expected.append(partitions.next_month(expected[-1]))
        assert partitions.is_partitioned()
        assert set(map(partitions.partition_name, expected)) <= set(names())
        assert names()[-1] == partitions.DEFAULT and partitions.partitions()[-1].is_default

    def test_an_attempt_is_stored_in_its_month_and_read_as_any_other(self, make_run, make_revision, make_step,
                                                                       make_attempt):
        step = make_step(make_revision(make_run()))
        attempt = make_attempt(step)
        assert home_of(attempt) == partitions.partition_name(partitions.month_start(attempt.started_at))
        assert Attempt.objects.get(pk=attempt.pk).uid == attempt.uid
        assert list(step.run.attempts.values_list("pk", flat=True)) == [attempt.pk]

    def test_uniqueness_holds_with_the_partition_key(self, make_run, make_revision, make_step, make_attempt):
        from django.db import IntegrityError, transaction

        step = make_step(make_revision(make_run()))
        first = make_attempt(step, decision="")
        with pytest.raises(IntegrityError), transaction.atomic():
            make_attempt(step, number=2, uid=first.uid, started_at=first.started_at, decision="")
        with pytest.raises(IntegrityError), transaction.atomic():
            make_attempt(step, number=1, started_at=first.started_at, decision="")
        # PostgreSQL checks a unique key of a partitioned table only with the partition key in it: at
        # another start time the same uid is taken (the lease fence, not this, keeps writers apart).
        make_attempt(step, number=2, uid=first.uid, started_at=first.started_at + timedelta(seconds=1), decision="")

    def test_ensure_creates_the_months_ahead_once(self, db):
        far = datetime(2031, 5, 17, tzinfo=UTC)
        created = partitions.ensure(now=far, ahead=2)
        assert created == ["runs_attempt_p2031_05", "runs_attempt_p2031_06", "runs_attempt_p2031_07"]
        assert partitions.ensure(now=far, ahead=2) == []
        bounds = {p.name: (p.start, p.end) for p in partitions.partitions()}
        assert bounds["runs_attempt_p2031_06"] == (datetime(2031, 6, 1, tzinfo=UTC), datetime(2031, 7, 1, tzinfo=UTC))

    def test_a_month_created_late_takes_its_rows_from_the_default_partition(self, make_run, make_revision,
                                                                             make_step, make_attempt):
        step = make_step(make_revision(make_run()))
        late = make_attempt(step, started_at=datetime(2033, 3, 9, 12, tzinfo=UTC), error_message="disk quota")
        other = make_attempt(step, number=2, started_at=datetime(2033, 4, 1, tzinfo=UTC))
        assert home_of(late) == home_of(other) == partitions.DEFAULT

        assert partitions.create_months([datetime(2033, 3, 1, tzinfo=UTC)]) == ["runs_attempt_p2033_03"]
        assert home_of(late) == "runs_attempt_p2033_03" and home_of(other) == partitions.DEFAULT
        moved = Attempt.objects.get(pk=late.pk)   # the same id, and every field kept
        assert (moved.uid, moved.error_message, moved.started_at) == (late.uid, "disk quota", late.started_at)
        assert Decision.objects.get(attempt_id=late.pk).run_id == step.run_id
        # The generated search document was recomputed on the way.
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM runs_attempt WHERE search_vector @@ to_tsquery('simple', 'quota')")
            assert [row[0] for row in cursor.fetchall()] == [late.pk]

    def test_the_scheduler_gives_the_default_partitions_rows_their_months(self, make_run, make_revision, make_step,
                                                                          make_attempt):
        step = make_step(make_revision(make_run()))
        stray = make_attempt(step, started_at=datetime(2024, 7, 4, tzinfo=UTC))
        absurd = make_attempt(step, number=2, started_at=datetime(9999, 12, 31, tzinfo=UTC))
        assert home_of(stray) == partitions.DEFAULT
        assert "runs_attempt_p2024_07" in partitions.ensure(now=timezone.now(), ahead=3)
        assert home_of(stray) == "runs_attempt_p2024_07" and home_of(absurd) == partitions.DEFAULT

    def test_the_command_lists_the_months_and_creates_them(self, make_run, make_revision, make_step, make_attempt):
        from io import StringIO

        from django.core.management import call_command
        from django.core.management.base import CommandError

        step = make_step(make_revision(make_run()))
        make_attempt(step, started_at=datetime(2024, 7, 4, tzinfo=UTC))
        out = StringIO()   # (no ANALYZE since: the default partition's rows are counted, not estimated)
        call_command("attempt_partitions", stdout=out)
        assert "runs_attempt_default" in out.getvalue()
        assert "The default partition holds 1 row: --ensure moves them" in out.getvalue()
        out = StringIO()
        call_command("attempt_partitions", "--ensure", "--ahead", "5", stdout=out)
        text = out.getvalue()
        assert text.startswith("Created 3 months: runs_attempt_p2024_07, ") and "runs_attempt_p2024_07" in text
        with pytest.raises(CommandError, match="from 1 to 120"):
            call_command("attempt_partitions", "--ahead", "0")

    def test_the_scheduler_creates_them(self, db, settings):
        from agentops.settings import CELERY_BEAT_SCHEDULE
        from runs.tasks import ensure_attempt_partitions

        assert CELERY_BEAT_SCHEDULE["attempt-partitions"]["task"] == "runs.ensure_attempt_partitions"
        settings.AGENTOPS_ATTEMPT_PARTITIONS_AHEAD = 30
        assert ensure_attempt_partitions() == 30 - 3     # the migration made three months ahead
        assert ensure_attempt_partitions() == 0

    @pytest.mark.django_db(transaction=True)
    def test_the_scheduler_leaves_the_months_to_its_next_tick_when_the_lock_does_not_come(self, settings,
                                                                                          monkeypatch, caplog):
        """A reader of the default partition (a long explorer query) holds what creating a month needs."""
        import psycopg

        from runs.tasks import ensure_attempt_partitions

        settings.AGENTOPS_ATTEMPT_PARTITIONS_AHEAD = 5
        monkeypatch.setattr(partitions, "LOCK_TIMEOUT", "200ms")
        db = connection.settings_dict
        reader = psycopg.connect(host=db["HOST"] or None, port=db["PORT"] or None, user=db["USER"], dbname=db["NAME"])
        try:
            reader.execute(f'LOCK TABLE "{partitions.DEFAULT}" IN ACCESS SHARE MODE')
            assert ensure_attempt_partitions() == 0
            assert "the next tick tries again" in caplog.text
            reader.rollback()
            assert ensure_attempt_partitions() == 2
        finally:
            reader.close()
            with connection.cursor() as cursor:
                for month in partitions.partitions()[-3:-1]:   # leave the migration's months as they were
                    cursor.execute(f'DROP TABLE "{month.name}"')


@pytest.fixture
def old_months(make_run, make_revision, make_step, make_attempt):
    """January 2025 holds only a purgeable run's attempts; February also one of a live run."""
    partitions.create_months([JAN_2025, FEB_2025])
    now = timezone.now()
    old = make_run(goal="old", status="stopped", stop_reason="stalled", finished_at=now - timedelta(days=400))
    step = make_step(make_revision(old))
    only_old, shared = store_json({"rows": ["only the old run"] * 10}), store_json({"rows": ["shared"] * 10})
    first = make_attempt(step, started_at=JAN_2025 + timedelta(days=3), output_ref=only_old)
    second = make_attempt(step, number=2, started_at=JAN_2025 + timedelta(days=4), output_ref=shared)
    Run.objects.filter(pk=old.pk).update(stop_attempt=second)
    PlanRevision.objects.filter(run=old).update(triggering_attempt=first)
    Annotation.objects.create(run=old, attempt=first, body="why did this time out?")
    later = make_attempt(step, number=3, started_at=FEB_2025 + timedelta(days=1))

    live = make_run(goal="live since 2025", status="running", created_at=FEB_2025)
    kept = make_attempt(make_step(make_revision(live)), started_at=FEB_2025 + timedelta(days=2), output_ref=shared)
    return {"old": old, "first": first, "second": second, "later": later, "kept": kept, "only_old": only_old,
            "shared": shared}


class TestRetentionDropsWholeMonths:
    def test_a_month_of_purged_runs_goes_whole_and_a_month_with_a_kept_run_stays(self, old_months):
        old = old_months["old"]
        report = purge_runs(older_than_days=30)
        assert report.partitions == ["runs_attempt_p2025_01"]
        assert (report.runs, report.attempts, report.stored_outputs) == (1, 3, 1)
        assert "runs_attempt_p2025_01" not in names() and "runs_attempt_p2025_02" in names()
        assert not Run.objects.filter(pk=old.pk).exists()
        # February's attempt of the purged run went row by row with its run; the live run's stays.
        assert list(Attempt.objects.filter(started_at__lt=FEB_2025 + timedelta(days=28)).values_list("pk", flat=True)) \
            == [old_months["kept"].pk]
        # What referred to January's attempts went by each relation's on_delete, before the table.
        assert not Annotation.objects.filter(run_id=old.pk).exists()
        assert not Decision.objects.filter(attempt_id__in=[old_months["first"].pk, old_months["second"].pk]).exists()
        assert not StoredOutput.objects.filter(pk=old_months["only_old"].pk).exists()
        assert StoredOutput.objects.filter(pk=old_months["shared"].pk).exists()   # the live run uses it

    def test_dropping_a_month_clears_what_points_at_its_attempts(self, old_months):
        old = old_months["old"]
        month = next(p for p in partitions.partitions() if p.name == "runs_attempt_p2025_01")
        assert partitions.drop(month, timezone.now() - timedelta(days=30)) == 2
        old.refresh_from_db()
        assert old.stop_attempt_id is None
        assert PlanRevision.objects.get(run=old).triggering_attempt_id is None
        assert not Annotation.objects.filter(run=old).exists()

    def test_a_dry_run_names_the_months_and_drops_nothing(self, old_months):
        report = purge_runs(older_than_days=30, dry_run=True)
        assert report.partitions == ["runs_attempt_p2025_01"] and report.attempts == 3
        assert "runs_attempt_p2025_01" in names() and Attempt.objects.count() == 4
        assert "1 months of attempts dropped whole" in report.summary()

    def test_a_month_is_checked_again_when_it_is_dropped(self, old_months, make_attempt):
        january = next(p for p in partitions.partitions() if p.name == "runs_attempt_p2025_01")
        kept = old_months["kept"]    # the live run's: one more attempt of it lands in January meanwhile
        make_attempt(kept.step, number=2, started_at=JAN_2025 + timedelta(days=9))
        assert partitions.drop(january, timezone.now() - timedelta(days=30)) is None
        assert "runs_attempt_p2025_01" in names()

    def test_a_month_that_ended_after_the_cutoff_stays(self, old_months):
        cutoff_days = (timezone.now() - JAN_2025).days - 10   # the cutoff falls inside January 2025
        assert partitions.droppable(timezone.now() - timedelta(days=cutoff_days)) == []


@pytest.mark.django_db(transaction=True)
def test_a_month_whose_lock_does_not_come_waits_for_a_later_purge(make_run, make_revision, make_step, make_attempt,
                                                                    monkeypatch, caplog):
    """Another session writing to the month holds the lock dropping needs: the purge does not fail;
    the runs go row by row today and the month, empty then, on a later day."""
    import psycopg

    partitions.create_months([JAN_2025])
    old = make_run(goal="old", status="stopped", stop_reason="stalled",
                   finished_at=timezone.now() - timedelta(days=400))
    make_attempt(make_step(make_revision(old)), started_at=JAN_2025 + timedelta(days=3))
    monkeypatch.setattr(partitions, "LOCK_TIMEOUT", "200ms")
    settings_dict = connection.settings_dict
    other = psycopg.connect(host=settings_dict["HOST"] or None, port=settings_dict["PORT"] or None,
                            user=settings_dict["USER"], dbname=settings_dict["NAME"])
    try:
        other.execute('LOCK TABLE "runs_attempt_p2025_01" IN ROW EXCLUSIVE MODE')   # as an insert holds it
        report = purge_runs(older_than_days=30)
        assert (report.runs, report.attempts, report.partitions) == (1, 1, [])
        assert report.partitions_busy == ["runs_attempt_p2025_01"]
        assert "busy, left for a later purge: runs_attempt_p2025_01" in report.summary()
        assert "runs_attempt_p2025_01 stays for now" in caplog.text
        assert not Run.objects.filter(pk=old.pk).exists() and "runs_attempt_p2025_01" in names()
        other.rollback()
        assert purge_runs(older_than_days=30).partitions == ["runs_attempt_p2025_01"]   # the next day's
    finally:
        other.close()
        for month in partitions.partitions():
            if month.name == "runs_attempt_p2025_01":
                with connection.cursor() as cursor:
                    cursor.execute(f'DROP TABLE "{month.name}"')


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_records_its_attempts_in_this_months_partition(celery_worker, operator, wait_until):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    run = services.run_start(
        owner=operator, goal="Find the travel policy", planner="scripted",
        planner_config={"plans": [[{"capability": "search_documents", "arguments": {"q": "travel"}}]]},
        completion={"capability": "search_documents", "path": "documents.0.id", "exists": True},
        budgets={"deadline_s": 60})
    wait_until(lambda: Run.objects.get(pk=run.pk).is_finished, message="the run to finish")
    attempts = list(Attempt.objects.filter(run=run))
    assert attempts and Run.objects.get(pk=run.pk).status == "completed"
    assert {home_of(a) for a in attempts} == {partitions.partition_name(partitions.month_start(timezone.now()))}

"""Retention: delete finished runs older than N days, and everything recorded under them.

Runs go in batches, each in its own transaction, so a purge of a million runs never
holds a long lock and can be stopped and resumed. Their revisions, steps, attempts,
decisions, approvals, plan submissions and labels go with them (cascades), and so do
the large outputs only they referred to. Audit events stay: they name their target by
id and outlive it, which is the point of an audit trail. Live runs are never touched.

On PostgreSQL, attempts are partitioned by month (runs.partitions): a month that ended before
the cutoff and holds only the purged runs' attempts is dropped whole first, in its own
transaction, so its rows are never deleted one by one; the runs follow in batches. A purge
stopped in between leaves those runs without their oldest attempts until the next one.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import OperationalError, transaction
from django.utils import timezone

from capabilities.models import StoredOutput
from core.choices import FINISHED_STATUSES
from core.errors import InvalidInput
from core.models import AuditAction, AuditEvent
from runs import partitions
from runs.models import Attempt, Run

log = logging.getLogger(__name__)

BATCH_SIZE = 200


@dataclass
class PurgeReport:
    cutoff: datetime
    runs: int = 0
    attempts: int = 0
    stored_outputs: int = 0
    dry_run: bool = False
    # PostgreSQL's attempt months dropped whole (or, dry_run, that would be).
    partitions: list[str] = field(default_factory=list)
    # Months that could go but whose lock did not come in time: their runs went row by row.
    partitions_busy: list[str] = field(default_factory=list)

    def summary(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        months = (f" ({len(self.partitions)} months of attempts dropped whole: {', '.join(self.partitions)})"
                  if self.partitions else "")
        busy = (f" (busy, left for a later purge: {', '.join(self.partitions_busy)}; their purged runs' attempts "
                f"went row by row)" if self.partitions_busy else "")
        return (f"{verb} {self.runs} runs finished before {self.cutoff:%Y-%m-%d %H:%M} UTC, {self.attempts} attempts "
                f"and {self.stored_outputs} stored outputs{months}{busy}")


def purgeable_runs(cutoff: datetime):
    return Run.objects.filter(status__in=list(FINISHED_STATUSES), finished_at__lt=cutoff)


def purge_runs(*, older_than_days: int, dry_run: bool = False, batch_size: int = BATCH_SIZE, now=None,
               progress: Callable[[PurgeReport, int], None] | None = None) -> PurgeReport:
    """Delete (or, dry_run, count) finished runs older than the cutoff; progress(report, total) per batch."""

    if not isinstance(older_than_days, int) or older_than_days < 1:
        raise InvalidInput("--older-than must be a whole number of days, at least 1.")
    try:
        cutoff = (now or timezone.now()) - timedelta(days=older_than_days)
    except OverflowError:   # a cutoff before year 1 is no date
        raise InvalidInput(f"--older-than {older_than_days} days goes back past year 1.") from None
    report = PurgeReport(cutoff=cutoff, dry_run=dry_run)
    candidates = purgeable_runs(cutoff)
    total = candidates.count()
    months = partitions.droppable(cutoff)
    if dry_run:
        report.runs = total
        report.attempts = Attempt.objects.filter(run__in=candidates.values("pk")).count()
        report.stored_outputs = len(_outputs_only_these_runs_use(list(candidates.values_list("pk", flat=True))))
        report.partitions = [month.name for month in months]
        return report
    for month in months:
        try:
            _drop_month(month, cutoff, report)
        except OperationalError as error:
            # A long read or write on the attempts table holds the lock dropping needs. The runs are
            # still purged today (row by row, below); the month, empty then, goes on a later day.
            if not partitions.lock_timed_out(error):
                raise
            log.warning("retention: %s stays for now: its lock did not come within %s", month.name,
                        partitions.LOCK_TIMEOUT)
            report.partitions_busy.append(month.name)
    while True:
        ids = list(candidates.order_by("finished_at", "id").values_list("pk", flat=True)[:batch_size])
        if not ids:
            break
        _purge_batch(ids, report)
        if progress:
            progress(report, total)
    if report.runs or report.partitions:
        # A purge has no single target object: the row names the retention rule instead.
        AuditEvent.objects.create(actor=None, action=AuditAction.RUNS_PURGED, target_type="retention",
                                  target_id=f"{older_than_days}d", summary=report.summary()[:300],
                                  details={"older_than_days": older_than_days, "cutoff": cutoff.isoformat(),
                                           "runs": report.runs, "attempts": report.attempts,
                                           "stored_outputs": report.stored_outputs,
                                           "partitions_dropped": report.partitions,
                                           "partitions_busy": report.partitions_busy})
    log.info("retention: %s", report.summary())
    return report


def _outputs_only_these_runs_use(run_ids: list[int]) -> set[int]:
    if not run_ids:
        return set()
    referenced = set(Attempt.objects.filter(run_id__in=run_ids, output_ref__isnull=False)
                     .values_list("output_ref_id", flat=True))
    # Outputs are stored once per content: another run may share one.
    kept = set(Attempt.objects.filter(output_ref_id__in=referenced).exclude(run_id__in=run_ids)
               .values_list("output_ref_id", flat=True))
    return set(StoredOutput.objects.filter(pk__in=referenced - kept).values_list("pk", flat=True))


@transaction.atomic
def _drop_month(month: partitions.Partition, cutoff: datetime, report: PurgeReport) -> None:
    referenced = partitions.output_refs(month)
    dropped = partitions.drop(month, cutoff)
    if dropped is None:   # a kept run's attempt arrived since: its runs go row by row
        return
    report.attempts += dropped
    # Outputs are stored once per content: an attempt of another month may still use one.
    kept = set(Attempt.objects.filter(output_ref_id__in=referenced).values_list("output_ref_id", flat=True))
    report.stored_outputs += StoredOutput.objects.filter(pk__in=referenced - kept).delete()[0]
    report.partitions.append(month.name)


@transaction.atomic
def _purge_batch(ids: list[int], report: PurgeReport) -> None:
    # Re-check inside the transaction: a run cannot un-finish, but it may be gone already.
    ids = list(Run.objects.filter(pk__in=ids, status__in=list(FINISHED_STATUSES)).values_list("pk", flat=True))
    outputs = _outputs_only_these_runs_use(ids)
    report.attempts += Attempt.objects.filter(run_id__in=ids).count()
    Run.objects.filter(pk__in=ids).update(stop_attempt=None)
    Run.objects.filter(pk__in=ids).delete()
    report.stored_outputs += StoredOutput.objects.filter(pk__in=outputs).delete()[0]
    report.runs += len(ids)


def purge_by_setting() -> PurgeReport | None:
    """The scheduler's daily purge, when AGENTOPS_RETENTION_DAYS is set."""
    if not settings.AGENTOPS_RETENTION_DAYS:
        return None
    return purge_runs(older_than_days=settings.AGENTOPS_RETENTION_DAYS)

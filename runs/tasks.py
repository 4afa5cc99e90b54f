"""Celery tasks: thin interfaces to runs.worker.engine. They take ids and are safe to repeat."""
import logging
import socket

from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from core.outages import outage_of
from runs import bulk, partitions, request_keys
from runs.retention import purge_by_setting
from runs.worker import engine, queue, sweeps
from runs.worker.leases import INFRASTRUCTURE_ERRORS

log = logging.getLogger(__name__)


@shared_task(name=queue.ADVANCE_RUN, bind=True, acks_late=True, ignore_result=True)
def advance_run(self, run_id: int) -> None:
    worker = f"{self.request.hostname or socket.gethostname()}:{self.request.id}"
    try:
        countdown = engine.run_advance(run_id=run_id, worker=worker)
    except INFRASTRUCTURE_ERRORS as exc:
        # The database is down, restarting or its disk full: nothing was decided. Try again once
        # our lease (which we could not release) has expired; the orphan sweep is the net.
        log.warning("run %s: %s; advancing again later", run_id, outage_of(exc).summary)
        countdown = settings.AGENTOPS_RUN_LEASE_SECONDS + 1
    if countdown is not None:
        queue.advance_later(run_id, countdown)  # recorded, as every send is, for the orphan sweep


@shared_task(name="runs.sweep_overdue_runs", ignore_result=True)
def sweep_overdue_runs() -> int:
    # Expired approvals first: a request expires at the deadline at the latest, so a run
    # waiting on one stops approval_expired rather than budget_exhausted:deadline.
    return sweeps.sweep_expired_approvals() + sweeps.sweep_overdue_runs()


@shared_task(name="runs.requeue_orphaned_runs", ignore_result=True)
def requeue_orphaned_runs() -> int:
    # Bulk actions whose worker died are picked up by the same sweep (their cursor makes it harmless).
    return sweeps.requeue_orphaned_runs() + bulk.requeue_stalled_bulk_actions()


@shared_task(name=bulk.BULK_PROCESS, acks_late=True, ignore_result=True)
def bulk_process(job_id: int) -> None:
    bulk.bulk_process(job_id)


@shared_task(name="runs.purge_old_runs", ignore_result=True)
def purge_old_runs() -> int:
    """Daily, from the scheduler: AGENTOPS_RETENTION_DAYS (0 keeps everything)."""
    report = purge_by_setting()
    return report.runs if report else 0


@shared_task(name="runs.forget_request_keys", ignore_result=True)
def forget_request_keys() -> int:
    """Hourly, from the scheduler: Idempotency-Keys past AGENTOPS_REQUEST_KEY_HOURS (runs.request_keys)."""
    return request_keys.forget_expired()


@shared_task(name="runs.ensure_attempt_partitions", ignore_result=True)
def ensure_attempt_partitions() -> int:
    """Every six hours, from the scheduler: PostgreSQL's attempt months, created ahead (runs.partitions)."""
    try:
        created = partitions.ensure_by_setting()
    except OperationalError as error:
        # A long read or write on the attempts table held the lock past LOCK_TIMEOUT: months are made
        # AGENTOPS_ATTEMPT_PARTITIONS_AHEAD ahead, so the next tick has time to try again.
        if not partitions.lock_timed_out(error):
            raise
        log.warning("attempt partitions: the table's lock did not come within %s; the next tick tries again",
                    partitions.LOCK_TIMEOUT)
        return 0
    if created:
        log.info("attempt partitions created: %s", ", ".join(created))
    return len(created)

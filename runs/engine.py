"""Advancing a run in the background: claim it, run passes, record each, let go.

The Celery task calls `run_advance`; so do tests and the evaluation runner. Only
the worker holding a run's lease advances it, so a duplicate delivery or a second
worker is harmless ("someone else has it" is a normal outcome). The lease is fenced
(runs/leases.py): a worker that lost it writes nothing. Side-effecting calls are
preceded by a committed intent (runs/persistence.PassWriter.begin), so a worker
lost mid-call leaves an outcome the next one resolves instead of repeating.
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from core.choices import FINISHED_STATUSES, ApprovalState, RunStatus
from runs import otel, queue
from runs.adapters import DjangoRegistry, build_controller

# claim, release and renew are the engine's API too (tests and tools call engine.claim).
from runs.leases import INFRASTRUCTURE_ERRORS, Lease, LeaseKeeper, claim, release, renew  # noqa: F401
from runs.models import PlanSubmission, Run
from runs.persistence import PassWriter
from runs.planners.external import awaited_revision
from runs.runtime.intents import LeaseLost
from runs.runtime.state import RunState
from runs.services import run_finish

log = logging.getLogger(__name__)

# How long one task keeps advancing a run before handing it back to the queue,
# so a long run never monopolises a worker slot.
SLICE_SECONDS = 20.0
# Waits shorter than this are slept inline; longer ones re-enqueue with a countdown.
INLINE_WAIT_SECONDS = 1.0
# Longer waits are made of hops of at most this, staying under the broker's visibility timeout.
MAX_COUNTDOWN_SECONDS = 30.0


def run_advance(*, run_id: int, worker: str, slice_seconds: float = SLICE_SECONDS) -> float | None:
    """Advance a run until it finishes, must wait, or its time slice ends.

    Returns the countdown after which it should be advanced again, or None when
    nothing is to do until something outside changes (finished, awaiting a
    decision, or held by another worker, including one that took it over from us).
    """
    lease = claim(run_id, worker)
    if lease is None:
        return None
    keeper = LeaseKeeper(lease)
    keeper.start()
    try:
        return _advance_slice(lease, keeper, slice_seconds)
    except LeaseLost as lost:
        log.warning("%s; worker %s stops advancing it", lost, worker)
        return None
    finally:
        keeper.stop()
        try:
            release(lease)
        except INFRASTRUCTURE_ERRORS:
            log.warning("could not release the lease of run %s: it expires by itself", run_id)


def _advance_slice(lease: Lease, keeper: LeaseKeeper, slice_seconds: float) -> float | None:
    run = Run.objects.select_related("owner").get(pk=lease.run_id)
    writer = PassWriter(run, lease)
    writer.load_interrupted()
    registry = DjangoRegistry()
    controller = build_controller(run, writer, registry)
    state = RunState.from_dict(run.state)
    writer.previous = state
    started = time.monotonic()
    while True:
        if keeper.lost:
            raise LeaseLost(f"run {lease.run_id}: lease {lease.token} was taken over")
        if writer.cancel_requested and not state.cancel_requested:
            state = replace(state, cancel_requested=True)
        if writer.registry_version is not None:
            registry.observe_version(writer.registry_version)
        transition = controller.advance(state)
        if transition.events or transition.state is not state:
            with transaction.atomic():
                writer.write(transition)
                otel.export_transition_on_commit(run, transition)
        state = transition.state
        if state.is_terminal or transition.wait_s is None:
            return None
        if transition.wait_s > INLINE_WAIT_SECONDS or time.monotonic() - started > slice_seconds:
            # A countdown longer than the broker's visibility timeout would be redelivered
            # early; hop in shorter waits instead (a hop that finds nothing due costs no write).
            return min(transition.wait_s, MAX_COUNTDOWN_SECONDS)
        if transition.wait_s > 0:
            time.sleep(transition.wait_s)


def sweep_overdue_runs(now=None) -> int:
    """Stop runs whose deadline passed while no worker advanced them (e.g. awaiting approval)."""
    now = now or timezone.now()
    stopped = 0
    overdue = Run.objects.filter(deadline_at__lt=now).exclude(status__in=FINISHED_STATUSES).filter(
        Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)).values_list("pk", flat=True)
    for run_id in overdue[:500]:
        with transaction.atomic():
            run = Run.objects.select_for_update().get(pk=run_id)
            if run.is_finished or (run.lease_expires_at and run.lease_expires_at > now):
                continue
            waited = _waiting_for(run)
            run_finish(run=run, status=RunStatus.STOPPED, stop_reason="budget_exhausted:deadline",
                       detail=f"The deadline ({run.budgets.get('deadline_s')} s) passed {waited}.", now=now)
            stopped += 1
    _wake_runs_with_submitted_plans(now)
    return stopped


def _waiting_for(run: Run) -> str:
    if run.status == RunStatus.AWAITING_APPROVAL:
        return "while awaiting approval"
    awaited = awaited_revision(run) if run.planner == "external" else None
    if awaited is not None:
        return f"while waiting for the external agent's plan for revision {awaited}"
    return "while queued" if run.status == RunStatus.QUEUED else "while waiting to be advanced"


def _wake_runs_with_submitted_plans(now) -> None:
    """Safety net: a plan submitted while a worker was finishing the pass that found none."""
    waiting = Run.objects.filter(planner="external", status=RunStatus.RUNNING, next_action_at__isnull=True).filter(
        Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)).filter(
        plan_submissions__isnull=False).distinct()
    for run in waiting[:500]:
        awaited = awaited_revision(run)
        if awaited is not None and PlanSubmission.objects.filter(run=run, revision=awaited).exists():
            queue.advance_later(run.pk)


def requeue_orphaned_runs(now=None) -> int:
    """Queue again the runs nobody is advancing, and say how many.

    A task can be lost: a worker killed mid-run (the embedded broker does not
    redeliver; Redis only after its visibility timeout) or a broker that was down
    when the run was committed. A run counts as orphaned when it is queued or
    running, no lease is live, no wait is pending and it has not changed for a
    lease period. External runs wait for their agent, not a worker; they are woken
    by plan submissions. A duplicate task is harmless: claim() lets one through.
    """
    now = now or timezone.now()
    quiet_since = now - timedelta(seconds=settings.AGENTOPS_RUN_LEASE_SECONDS)
    orphans = list(
        Run.objects.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING], updated_at__lt=quiet_since)
        .exclude(planner="external")
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
        .filter(Q(next_action_at__isnull=True) | Q(next_action_at__lt=quiet_since))
        .values_list("pk", flat=True)[:500])
    # A decided approval whose run still says awaiting_approval (decided before this
    # version moved runs out of it, or a wake-up lost with its worker): queue it too.
    decided = list(
        Run.objects.filter(status=RunStatus.AWAITING_APPROVAL,
                           approvals__state__in=[ApprovalState.APPROVED, ApprovalState.REJECTED],
                           approvals__decided_at__gte=F("updated_at"))
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
        .values_list("pk", flat=True).distinct()[:500])
    if decided:
        Run.objects.filter(pk__in=decided, status=RunStatus.AWAITING_APPROVAL).update(status=RunStatus.QUEUED,
                                                                                       updated_at=now)
    for run_id in orphans + decided:
        log.warning("run %s had no worker for over %s s: queued again", run_id, settings.AGENTOPS_RUN_LEASE_SECONDS)
        queue.advance_later(run_id)
    return len(orphans) + len(decided)

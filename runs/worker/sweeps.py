"""The scheduler's sweeps: what no worker is there to do.

Approval requests that expire undecided stop their run `approval_expired`, at that moment:
a request expires at the earlier of its TTL and the run's deadline (the runtime sets
expires_at so). A run awaiting approval has no worker advancing it, so the scheduler's
sweep stops it; a worker that advances it after the expiry reaches the same stop
through the runtime (approval_gate.take_approval).
"""
from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction
from django.db.models import Exists, F, IntegerField, OuterRef, Q, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from core.choices import FINISHED_STATUSES, ApprovalState, RunStatus
from runs.models import Approval, PlanSubmission, Run
from runs.planners.external import AGENT_PLANNERS, awaited_revision
from runs.services import run_finish
from runs.worker import queue
from runtime.budgets import BudgetName
from runtime.stop import StopKind, stop_reason

log = logging.getLogger(__name__)

BATCH = 500  # rows a sweep takes at a time; the next sweep takes the rest


def sweep_expired_approvals(now=None) -> int:
    """Stop every run whose pending approval request has expired; returns how many."""
    now = now or timezone.now()
    stopped = 0
    expired = (Approval.objects.filter(state=ApprovalState.PENDING, expires_at__lte=now)
               .exclude(run__status__in=FINISHED_STATUSES)
               .filter(Q(run__lease_expires_at__isnull=True) | Q(run__lease_expires_at__lt=now))
               .values_list("pk", "run_id"))
    for approval_id, run_id in expired[:BATCH]:
        with transaction.atomic():
            run = Run.objects.select_for_update(no_key=True).get(pk=run_id)
            approval = Approval.objects.select_related("step").get(pk=approval_id)
            # Decided or stopped meanwhile, or a worker holds the run: nothing to do here.
            if run.is_finished or approval.state != ApprovalState.PENDING or (
                    run.lease_expires_at and run.lease_expires_at > now):
                continue
            run_finish(run=run, status=RunStatus.STOPPED, stop_reason=StopKind.APPROVAL_EXPIRED.value,
                       detail=expired_detail(approval, run), now=now)
            stopped += 1
    return stopped


def expired_detail(approval: Approval, run: Run) -> str:
    what = (f"step {approval.step.key} ({approval.capability_name})" if approval.kind == "step"
            else f"plan revision {approval.revision.number}")
    by = "the run's deadline" if run.deadline_at and approval.expires_at >= run.deadline_at else "its TTL"
    return (f"The approval request for {what} expired undecided at {approval.expires_at:%Y-%m-%d %H:%M:%S} UTC "
            f"({by}).")


def sweep_overdue_runs(now=None) -> int:
    """Stop runs whose deadline passed while no worker advanced them (e.g. awaiting approval)."""
    now = now or timezone.now()
    stopped = 0
    overdue = Run.objects.filter(deadline_at__lt=now).exclude(status__in=FINISHED_STATUSES).filter(
        Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)).values_list("pk", flat=True)
    for run_id in overdue[:BATCH]:
        with transaction.atomic():
            run = Run.objects.select_for_update(no_key=True).get(pk=run_id)
            if run.is_finished or (run.lease_expires_at and run.lease_expires_at > now):
                continue
            waited = _waiting_for(run)
            run_finish(run=run, status=RunStatus.STOPPED, stop_reason=stop_reason(StopKind.BUDGET_EXHAUSTED, BudgetName.DEADLINE),
                       detail=f"The deadline ({run.budgets.get('deadline_s')} s) passed {waited}.", now=now)
            stopped += 1
    _wake_runs_with_submitted_plans(now)
    return stopped


def _waiting_for(run: Run) -> str:
    if run.status == RunStatus.AWAITING_APPROVAL:
        return "while awaiting approval"
    awaited = awaited_revision(run) if run.planner in AGENT_PLANNERS else None
    if awaited is not None:
        return f"while waiting for the external agent's plan for revision {awaited}"
    return "while queued" if run.status == RunStatus.QUEUED else "while waiting to be advanced"


def _wake_runs_with_submitted_plans(now) -> None:
    """Safety net: a plan submitted while a worker was finishing the pass that found none.

    Decided in one query (the awaited revision is external.awaited_revision's, in SQL): however many
    agent runs wait for their agents, no run's checkpoint is loaded and nothing is asked per run."""
    awaited = Coalesce(Cast(KT("state__usage__plans"), IntegerField()), Value(0)) + 1
    waiting = (Run.objects.filter(planner__in=AGENT_PLANNERS, status=RunStatus.RUNNING, next_action_at__isnull=True,
                                  state__planning__has_key="reason_code")   # a plan is awaited
               .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
               .annotate(awaited=awaited)
               .filter(Exists(PlanSubmission.objects.filter(run=OuterRef("pk"), revision=OuterRef("awaited"))))
               .values_list("pk", flat=True))
    for run_id in waiting[:BATCH]:
        queue.advance_later(run_id)


def requeue_orphaned_runs(now=None) -> int:
    """Queue again the runs nobody is advancing, and say how many.

    A task can be lost: a worker killed mid-run (the embedded broker does not
    redeliver; Redis only after its visibility timeout) or a broker that was down
    when it was sent. A run waiting its turn in a backlog is not lost, and sending
    it again would only lengthen the queue in front of it. A duplicate task is
    harmless (claim() lets one through), but each costs a place in the queue.
    An agent's run (external, gateway) waiting for its agent's plan waits for the
    agent, not a worker (its plan's submission wakes it); carrying out a plan (a call
    in flight when its worker died or lost the database) it needs a worker as any run.
    """
    now = now or timezone.now()
    candidates = Run.objects.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING]).exclude(
        lease_expires_at__gte=now).filter(orphaned(now))
    # In the query, not after it: agent runs idle for their agent's plan would otherwise fill
    # the batch and hide a stranded one (planning is null, or absent, when no plan is awaited).
    needs_worker = ~Q(planner__in=AGENT_PLANNERS) | Q(state__planning=None) | Q(state__planning__isnull=True)
    orphans = list(candidates.filter(needs_worker).values_list("pk", flat=True)[:BATCH])
    # A decided approval whose run still says awaiting_approval (decided before this
    # version moved runs out of it, or a wake-up lost with its worker): queue it too.
    decided = list(
        Run.objects.filter(status=RunStatus.AWAITING_APPROVAL,
                           approvals__state__in=[ApprovalState.APPROVED, ApprovalState.REJECTED],
                           approvals__decided_at__gte=F("updated_at"))
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
        .values_list("pk", flat=True).distinct()[:BATCH])
    if decided:
        Run.objects.filter(pk__in=decided, status=RunStatus.AWAITING_APPROVAL).update(status=RunStatus.QUEUED,
                                                                                       updated_at=now)
    for run_id in orphans + decided:
        log.warning("run %s had no worker and no task on its way: queued again", run_id)
        queue.advance_later(run_id)  # records the send: the next sweep waits again
    return len(orphans) + len(decided)


def orphaned(now) -> Q:
    """Which live runs without a live lease have no task on its way (runs.worker.queue records each send)."""
    # Its worker died after claiming it (the lease ran out) and nothing was sent since the claim.
    worker_died = Q(lease_expires_at__lt=now) & (Q(task_sent_at__isnull=True) |
                                                 Q(task_sent_at__lt=F("lease_expires_at")))
    # No sign of life for the broker's visibility timeout: no task due, no change (a start or a
    # decision whose task is still being sent), no wait pending. Had a worker taken the task and
    # died, Redis would have redelivered it by now; a task still queued behind a backlog that
    # takes longer than this to drain is sent again, once per visibility timeout.
    cutoff = now - timedelta(seconds=queue.visibility_timeout_s())
    unclaimed = ((Q(task_sent_at__isnull=True) | Q(task_sent_at__lt=cutoff)) & Q(updated_at__lt=cutoff)
                 & (Q(next_action_at__isnull=True) | Q(next_action_at__lt=cutoff)))
    return worker_died | unclaimed

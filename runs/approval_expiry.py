"""Approval requests that expire undecided stop their run `approval_expired`, at that moment.

A request expires at the earlier of its TTL and the run's deadline (the runtime sets
expires_at so). A run awaiting approval has no worker advancing it, so the scheduler's
sweep stops it; a worker that advances it after the expiry reaches the same stop
through the runtime (approval_gate.take_approval).
"""
from __future__ import annotations

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.choices import FINISHED_STATUSES, ApprovalState, RunStatus
from runs.models import Approval, Run
from runs.services import run_finish


def sweep_expired_approvals(now=None) -> int:
    """Stop every run whose pending approval request has expired; returns how many."""
    now = now or timezone.now()
    stopped = 0
    expired = (Approval.objects.filter(state=ApprovalState.PENDING, expires_at__lte=now)
               .exclude(run__status__in=FINISHED_STATUSES)
               .filter(Q(run__lease_expires_at__isnull=True) | Q(run__lease_expires_at__lt=now))
               .values_list("pk", "run_id"))
    for approval_id, run_id in expired[:500]:
        with transaction.atomic():
            run = Run.objects.select_for_update().get(pk=run_id)
            approval = Approval.objects.select_related("step").get(pk=approval_id)
            # Decided or stopped meanwhile, or a worker holds the run: nothing to do here.
            if run.is_finished or approval.state != ApprovalState.PENDING or (
                    run.lease_expires_at and run.lease_expires_at > now):
                continue
            run_finish(run=run, status=RunStatus.STOPPED, stop_reason="approval_expired",
                       detail=expired_detail(approval, run), now=now)
            stopped += 1
    return stopped


def expired_detail(approval: Approval, run: Run) -> str:
    what = (f"step {approval.step.key} ({approval.capability_name})" if approval.kind == "step"
            else f"plan revision {approval.revision.number}")
    by = "the run's deadline" if run.deadline_at and approval.expires_at >= run.deadline_at else "its TTL"
    return (f"The approval request for {what} expired undecided at {approval.expires_at:%Y-%m-%d %H:%M:%S} UTC "
            f"({by}).")

"""Advancing a run in the background: claim it, run passes, record each, let go.

The Celery task calls `run_advance`; so do tests and the evaluation runner. Only
the worker holding a run's lease advances it, so a duplicate delivery or a second
worker is harmless ("someone else has it" is a normal outcome).
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from capabilities.models import Capability
from runs import otel
from runs.choices import FINISHED_STATUSES, RunStatus
from runs.models import Run
from runs.persistence import DjangoApprovalBook, record_transition
from runs.runtime.capability import CapabilitySpec
from runs.runtime.controller import Controller, Transition
from runs.runtime.state import RunState

log = logging.getLogger(__name__)

# How long one task keeps advancing a run before handing it back to the queue,
# so a long run never monopolises a worker slot.
SLICE_SECONDS = 20.0
# Waits shorter than this are slept inline; longer ones re-enqueue with a countdown.
INLINE_WAIT_SECONDS = 1.0


class WallClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class OwnerAuthorizer:
    """The run owner's permissions, read fresh on every question (they may change mid-run)."""

    def __init__(self, owner_id: int):
        self.owner_id = owner_id

    def permits(self, permission: str) -> bool:
        if not permission:
            return True
        user = get_user_model().objects.filter(pk=self.owner_id, is_active=True).first()
        return bool(user and user.has_perm(permission))


class DjangoRegistry:
    """The registry as the runtime sees it: current versions as CapabilitySpecs."""

    def get(self, name: str) -> CapabilitySpec | None:
        capability = (Capability.objects.select_related("current_version", "mcp_server")
                      .filter(name=name, current_version__isnull=False).first())
        return capability.current_version.to_spec() if capability else None

    def visible(self, authorizer) -> list[CapabilitySpec]:
        specs = [c.current_version.to_spec() for c in Capability.objects.select_related("current_version", "mcp_server")
                 .filter(enabled=True, current_version__isnull=False).order_by("name")]
        # A side-effecting capability the owner may not use is not offered to the planner.
        return [s for s in specs if not (s.changes_state and s.permission) or authorizer.permits(s.permission)]


def build_controller(run: Run) -> Controller:
    from capabilities.ratelimit import rate_limited_executor
    from runs.planners import planner_for

    from runs.runtime.ids import RandomIds

    return Controller(registry=DjangoRegistry(), executor=rate_limited_executor(context={"run_id": run.pk}),
                      planner=planner_for(run),
                      clock=WallClock(), authorizer=OwnerAuthorizer(run.owner_id),
                      approvals=DjangoApprovalBook(run), ids=RandomIds(),
                      approval_ttl_s=settings.AGENTOPS_APPROVAL_TTL_SECONDS)


def claim(run_id: int, worker: str) -> bool:
    """Take the run's lease with one conditional UPDATE; False if someone else holds it."""
    now = timezone.now()
    return bool(Run.objects.filter(pk=run_id).exclude(status__in=FINISHED_STATUSES).filter(
        Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now) | Q(lease_owner=worker)
    ).update(lease_owner=worker, lease_expires_at=now + timedelta(seconds=settings.AGENTOPS_RUN_LEASE_SECONDS)))


def release(run_id: int, worker: str) -> None:
    Run.objects.filter(pk=run_id, lease_owner=worker).update(lease_owner="", lease_expires_at=None)


def run_advance(*, run_id: int, worker: str, slice_seconds: float = SLICE_SECONDS) -> float | None:
    """Advance a run until it finishes, must wait, or its time slice ends.

    Returns the countdown after which it should be advanced again, or None when
    nothing is to do until something outside changes (finished, awaiting a
    decision, or held by another worker).
    """
    if not claim(run_id, worker):
        return None
    try:
        run = Run.objects.select_related("owner").get(pk=run_id)
        controller = build_controller(run)
        state = RunState.from_dict(run.state)
        started = time.monotonic()
        while True:
            cancel_requested = Run.objects.filter(pk=run_id).values_list("cancel_requested_at", flat=True).get()
            if cancel_requested and not state.cancel_requested:
                state = replace(state, cancel_requested=True)
            transition = controller.advance(state)
            _commit(run, worker, transition)
            state = transition.state
            if state.is_terminal or transition.wait_s is None:
                return None
            if transition.wait_s > INLINE_WAIT_SECONDS or time.monotonic() - started > slice_seconds:
                return transition.wait_s
            if transition.wait_s > 0:
                time.sleep(transition.wait_s)
    finally:
        release(run_id, worker)


def _commit(run: Run, worker: str, transition: Transition) -> None:
    """One pass, one transaction: its records, the checkpoint and a renewed lease."""
    with transaction.atomic():
        record_transition(run, transition)
        Run.objects.filter(pk=run.pk, lease_owner=worker).update(
            lease_expires_at=timezone.now() + timedelta(seconds=settings.AGENTOPS_RUN_LEASE_SECONDS))
        otel.export_transition_on_commit(run, transition)


def sweep_overdue_runs(now=None) -> int:
    """Stop runs whose deadline passed while no worker advanced them (e.g. awaiting approval)."""
    from runs.services import run_finish

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
    from runs.planners.external import awaited_revision

    if run.status == RunStatus.AWAITING_APPROVAL:
        return "while awaiting approval"
    awaited = awaited_revision(run) if run.planner == "external" else None
    if awaited is not None:
        return f"while waiting for the external agent's plan for revision {awaited}"
    return "while queued" if run.status == RunStatus.QUEUED else "while waiting to be advanced"


def _wake_runs_with_submitted_plans(now) -> None:
    """Safety net: a plan submitted while a worker was finishing the pass that found none."""
    from runs.models import PlanSubmission
    from runs.planners.external import awaited_revision
    from runs.tasks import advance_run

    waiting = Run.objects.filter(planner="external", status=RunStatus.RUNNING, next_action_at__isnull=True).filter(
        Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)).filter(
        plan_submissions__isnull=False).distinct()
    for run in waiting[:500]:
        awaited = awaited_revision(run)
        if awaited is not None and PlanSubmission.objects.filter(run=run, revision=awaited).exists():
            advance_run.apply_async((run.pk,))


def requeue_orphaned_runs(now=None) -> int:
    """Queue again the runs nobody is advancing, and say how many.

    A task can be lost: a worker killed mid-run (the embedded broker does not
    redeliver; Redis only after its visibility timeout) or a broker that was down
    when the run was committed. A run counts as orphaned when it is queued or
    running, no lease is live, no wait is pending and it has not changed for a
    lease period. External runs wait for their agent, not a worker; they are woken
    by plan submissions. A duplicate task is harmless: claim() lets one through.
    """
    from runs.tasks import advance_run

    now = now or timezone.now()
    quiet_since = now - timedelta(seconds=settings.AGENTOPS_RUN_LEASE_SECONDS)
    orphans = list(
        Run.objects.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING], updated_at__lt=quiet_since)
        .exclude(planner="external")
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
        .filter(Q(next_action_at__isnull=True) | Q(next_action_at__lt=quiet_since))
        .values_list("pk", flat=True)[:500])
    for run_id in orphans:
        log.warning("run %s had no worker for over %s s: queued again", run_id, settings.AGENTOPS_RUN_LEASE_SECONDS)
        advance_run.apply_async((run_id,))
    return len(orphans)

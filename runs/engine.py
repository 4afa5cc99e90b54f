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
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from capabilities.models import Capability
from runs import otel
from runs.choices import FINISHED_STATUSES, ApprovalState, RunStatus
from runs.models import Run
# claim, release and renew are the engine's API too (tests and tools call engine.claim).
from runs.leases import INFRASTRUCTURE_ERRORS, Lease, LeaseKeeper, claim, release, renew  # noqa: F401
from runs.persistence import DjangoApprovalBook, PassWriter
from runs.runtime.capability import CapabilitySpec
from runs.runtime.controller import Controller
from runs.runtime.intents import LeaseLost
from runs.runtime.state import RunState

log = logging.getLogger(__name__)

# How long one task keeps advancing a run before handing it back to the queue,
# so a long run never monopolises a worker slot.
SLICE_SECONDS = 20.0
# Waits shorter than this are slept inline; longer ones re-enqueue with a countdown.
INLINE_WAIT_SECONDS = 1.0
# Longer waits are made of hops of at most this, staying under the broker's visibility timeout.
MAX_COUNTDOWN_SECONDS = 30.0
# How long an owner's permission answer is reused within one slice of a run.
PERMISSION_RECHECK_SECONDS = 5.0


class WallClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class OwnerAuthorizer:
    """The run owner's permissions, re-read at most every PERMISSION_RECHECK_SECONDS.

    Asked at validation and before every execution; within one slice of a run the
    answer is cached for a few seconds, so a permission removed mid-run takes
    effect at the latest that many seconds later, and a pass costs no query.
    """

    def __init__(self, owner_id: int, recheck_s: float | None = None):
        self.owner_id = owner_id
        self.recheck_s = PERMISSION_RECHECK_SECONDS if recheck_s is None else recheck_s
        self._cache: dict[str, tuple[float, bool]] = {}
        self._user: tuple[float, object] | None = None

    def permits(self, permission: str) -> bool:
        if not permission:
            return True
        now = time.monotonic()
        cached = self._cache.get(permission)
        if cached is not None and now - cached[0] < self.recheck_s:
            return cached[1]
        if self._user is None or now - self._user[0] >= self.recheck_s:
            # One read of the owner (and of their permissions, by has_perm) for every permission
            # asked within the recheck period, not one per permission.
            self._user = (now, get_user_model().objects.filter(pk=self.owner_id, is_active=True).first())
        user = self._user[1]
        allowed = bool(user and user.has_perm(permission))
        self._cache[permission] = (now, allowed)
        return allowed


class DjangoRegistry:
    """The registry as the runtime sees it: current versions as CapabilitySpecs.

    Specs are cached for the life of the object (one slice of one run) and dropped
    when the registry's version (its latest change, returned with every pass's
    commit) moves, so an edit or a disable takes effect at the next pass.
    """

    def __init__(self):
        self._specs: dict[str, CapabilitySpec | None] = {}
        self.version = None

    def observe_version(self, version) -> None:
        if version != self.version:
            self._specs.clear()
            self.version = version

    def get(self, name: str) -> CapabilitySpec | None:
        if name not in self._specs:
            capability = (Capability.objects.select_related("current_version", "mcp_server")
                          .filter(name=name, current_version__isnull=False).first())
            self._specs[name] = _spec_of(capability) if capability else None
        return self._specs[name]

    def visible(self, authorizer) -> list[CapabilitySpec]:
        specs = [_spec_of(c) for c in Capability.objects.select_related("current_version", "mcp_server")
                 .filter(enabled=True, current_version__isnull=False).order_by("name")]
        # The plan's steps are looked up next: they find the specs read here.
        self._specs.update((s.name, s) for s in specs if s.name not in self._specs)
        # A side-effecting capability the owner may not use is not offered to the planner.
        return [s for s in specs if not (s.changes_state and s.permission) or authorizer.permits(s.permission)]


def _spec_of(capability: Capability) -> CapabilitySpec:
    version = capability.current_version
    version.capability = capability  # already loaded: to_spec() would read it again, once per capability
    return version.to_spec()


def build_controller(run: Run, writer: PassWriter | None = None, registry: DjangoRegistry | None = None) -> Controller:
    from capabilities.ratelimit import rate_limited_executor
    from runs.planners import planner_for

    from runs.runtime.ids import RandomIds

    return Controller(registry=registry or DjangoRegistry(),
                      executor=rate_limited_executor(context={"run_id": run.pk}), planner=planner_for(run), clock=WallClock(), authorizer=OwnerAuthorizer(run.owner_id),
                      approvals=DjangoApprovalBook(run), ids=RandomIds(),
                      approval_ttl_s=settings.AGENTOPS_APPROVAL_TTL_SECONDS, intents=writer,
                      abandon_on=INFRASTRUCTURE_ERRORS)


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
    # Specs read from now on are at least this version: the first pass's commit keeps them if unchanged.
    registry.observe_version(lease.registry_version)
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
            writer.commit(transition)
            otel.export_transition_on_commit(run, transition)  # committed: runs now, or with an outer transaction
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
        advance_run.apply_async((run_id,))
    return len(orphans) + len(decided)

"""Advancing a run in the background: claim it, run passes, record each, let go.

The Celery task calls `run_advance`; so do tests and the evaluation runner. Only
the worker holding a run's lease advances it, so a duplicate delivery or a second
worker is harmless ("someone else has it" is a normal outcome). The lease is fenced
(runs/worker/leases.py): a worker that lost it writes nothing. Side-effecting calls are
preceded by a committed intent (runs/persistence.PassWriter.begin), so a worker
lost mid-call leaves an outcome the next one resolves instead of repeating.
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace

from capabilities.executors.open_calls import OPEN_CALLS
from core.db_sessions import SESSION_CHECK_AFTER_S, check_session
from core.projects import project_scope
from runs import checkpoint, otel, wakeups
from runs.models import PlanSubmission, Run
from runs.planners.external import AGENT_PLANNERS, awaited_revision
from runs.worker import queue
from runs.worker.adapters import DjangoRegistry, build_controller
from runs.worker.leases import INFRASTRUCTURE_ERRORS, Lease, LeaseKeeper, claim, release
from runs.worker.persistence import PassWriter
from runtime.controller import Transition
from runtime.intents import LeaseLost
from runtime.state import RunState

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
    finished, planner = False, None
    try:
        run = lease.run or Run.objects.select_related("owner").get(pk=lease.run_id)
        planner = run.planner
        # The pass acts in the run's project: its registry, its owner's roles there, its quotas.
        with project_scope(run.project_id):
            countdown, finished = _advance_slice(run, lease, keeper, slice_seconds)
        return countdown
    except LeaseLost as lost:
        log.warning("%s; worker %s stops advancing it", lost, worker)
        return None
    finally:
        # A call abandoned at its timeout may still land: the run stays ours (renewed) until its
        # thread ends, so no other worker looks its outcome up before it can no longer land.
        if finished or not OPEN_CALLS.when_closed(run_id, lambda: _let_go(lease, keeper, wake=True)):
            _let_go(lease, keeper, released=finished)
        # After letting go: the agent's next plan, sent the moment its waiter wakes, finds the run free.
        if planner in AGENT_PLANNERS:
            wakeups.announce(run_id)
            if not finished:
                _advance_if_plan_arrived(run_id)


def _advance_if_plan_arrived(run_id: int) -> None:
    """A plan stored while this slice held the run (its tasks' claims refused, the follow-up too when
    letting go took longer under load) is taken up now: checked after letting go, so a plan stored
    later finds the run free, and one stored before is seen here."""
    try:
        run = Run.objects.only("status", "state").get(pk=run_id)
        awaited = awaited_revision(run)
        if awaited is not None and PlanSubmission.objects.filter(run_id=run_id, revision=awaited).exists():
            queue.advance_later(run_id)
    except INFRASTRUCTURE_ERRORS:   # the sweep of runs with submitted plans is the net
        log.warning("run %s: could not check for a plan stored meanwhile", run_id)


def _let_go(lease: Lease, keeper: LeaseKeeper, *, released: bool = False, wake: bool = False) -> None:
    keeper.stop()
    if released or keeper.lost:   # a finishing pass let go of the lease in its own write
        return
    try:
        release(lease)
        if wake:   # the run waited for its open call: advance it now, not at its next countdown
            queue.advance_later(lease.run_id)
    except INFRASTRUCTURE_ERRORS:
        log.warning("could not release the lease of run %s: it expires by itself", lease.run_id)


def _advance_slice(run: Run, lease: Lease, keeper: LeaseKeeper, slice_seconds: float) -> tuple[float | None, bool]:
    """(the countdown as run_advance returns it, whether the run finished and its lease was let go)."""
    registry = DjangoRegistry()
    # Specs read from now on are at least this version: the first pass's commit keeps them if unchanged.
    registry.observe_version(lease.registry_version)
    writer = PassWriter(run, lease, version_of=registry.version_id)
    writer.load_interrupted()
    writer.load_interrupted_planner_calls()
    controller = build_controller(run, writer, registry)
    state = checkpoint.load(run)
    writer.previous = state
    started = pass_began = time.monotonic()

    def before_pass(state: RunState) -> RunState:
        nonlocal pass_began
        pass_began = time.monotonic()
        # What the pass's fenced UPDATE returned: lease kept, cancel requested, registry version.
        if keeper.lost:
            raise LeaseLost(f"run {lease.run_id}: lease {lease.token} was taken over")
        if writer.registry_version is not None:
            registry.observe_version(writer.registry_version)
        cancelled = writer.cancel_requested and not state.cancel_requested
        return replace(state, cancel_requested=True) if cancelled else state

    def write(transition: Transition) -> None:
        if time.monotonic() - pass_began > SESSION_CHECK_AFTER_S:   # a planner's call too
            check_session()
        writer.commit(transition)
        otel.export_transition_on_commit(run, transition)  # committed: runs now, or with an outer transaction

    def hand_back(transition: Transition) -> bool:
        return transition.wait_s > INLINE_WAIT_SECONDS or time.monotonic() - started > slice_seconds

    last = controller.drive(state, before_pass=before_pass, on_transition=write, hand_back=hand_back)
    if last.wait_s is None:
        return None, writer.released
    # A countdown longer than the broker's visibility timeout would be redelivered early; hop in
    # shorter waits instead (a hop that finds nothing due costs no write).
    return min(last.wait_s, MAX_COUNTDOWN_SECONDS), False

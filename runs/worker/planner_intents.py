"""The planner-call half of the intent log (runtime.intents.IntentLog), as PlannerCall rows.

PassWriter takes these methods in: a planner call is committed (fenced by the run's
lease) before it is made, its answer's figures are recorded the moment they arrive,
and the pass that counts it closes the row in the pass's own transaction, so a call
is counted exactly once: by that pass, or by the next worker's first pass when the
worker making it was lost (runtime/planner_calls.py).
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from core.outages import DATABASE_ERRORS
from runs.models import PlannerCall, Run
from runs.worker.leases import Lease, fenced_update, withdraw_unsent
from runtime import events as ev
from runtime.budgets import Usage
from runtime.intents import LeaseLost, PlannerCallIntent


def _at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


class PlannerCallIntents:
    """Mixed into PassWriter, which holds `run` and `lease`."""

    run: Run
    lease: Lease | None
    _lost_planner_calls: list[PlannerCallIntent] | None = None
    _open_planner_calls: frozenset[str] = frozenset()   # begun by this writer and not yet closed

    def begin_planner_call(self, intent: PlannerCallIntent) -> None:
        """Commit the call's row before it is made; LeaseLost (nothing sent) if the run is no longer ours.

        The lease is renewed, not stretched to the call's timeout: a planner call lands no side
        effect, so a dead worker's run should be resumed as soon as any other."""
        try:
            self._begin_planner_call(intent)
        except DATABASE_ERRORS:
            withdraw_unsent(self.lease, self.run.pk, PlannerCall.objects.filter(uid=intent.call_id, in_flight=True),
                            "a planner call")
            raise
        self._open_planner_calls = self._open_planner_calls | {intent.call_id}

    def _begin_planner_call(self, intent: PlannerCallIntent) -> None:
        lease = self.lease
        with transaction.atomic():
            until = timezone.now() + timedelta(seconds=settings.AGENTOPS_RUN_LEASE_SECONDS)
            if lease is not None and not fenced_update(
                    self.run.pk, lease, {"lease_expires_at": Greatest(F("lease_expires_at"), Value(until))}):
                raise LeaseLost(f"run {self.run.pk}: lease {lease.token} lost before asking the planner")
            PlannerCall.objects.create(run=self.run, uid=intent.call_id, revision=intent.revision,
                                       started_at=_at(intent.started_at), max_tokens=intent.max_tokens,
                                       max_cost=intent.max_cost, worker=(lease.worker if lease else "")[:100],
                                       lease_token=lease.token if lease else None)

    def planner_call_answered(self, intent: PlannerCallIntent, tokens: int, cost: float) -> None:
        # Not fenced by the lease: what a call spent is a fact whoever holds the run now. Only a row
        # still in flight takes it; once a pass counted the call, its figures stay what was counted.
        PlannerCall.objects.filter(uid=intent.call_id, in_flight=True).update(
            answered_at=timezone.now(), tokens=tokens, cost=cost)

    def interrupted_planner_call(self) -> PlannerCallIntent | None:
        return self._lost_planner_calls.pop(0) if self._lost_planner_calls else None

    def load_interrupted_planner_calls(self) -> None:
        """Once per slice: the planner calls lost workers left in flight (two when the worker that found
        one was lost too before counting it)."""
        if self.lease is not None and not self.lease.in_flight:
            return  # the claim saw none
        self._lost_planner_calls = [
            PlannerCallIntent(call_id=row.uid, revision=row.revision, started_at=row.started_at.timestamp(),
                              max_tokens=row.max_tokens, max_cost=row.max_cost,
                              answered_tokens=row.tokens if row.answered_at else None,
                              answered_cost=row.cost if row.answered_at else None)
            for row in PlannerCall.objects.filter(run=self.run, in_flight=True)]

    def record_planner_call_ended(self, event: ev.PlannerCallEnded) -> None:
        """Inside the pass's transaction: the figures the pass counted, on the row it closes."""
        PlannerCall.objects.filter(uid=event.call_id, in_flight=True).update(
            in_flight=False, ended_at=_at(event.ended_at), tokens=event.tokens, cost=event.cost, lost=event.lost,
            estimated=event.estimated)
        self._open_planner_calls = self._open_planner_calls - {event.call_id}


def count_planner_calls_left_in_flight(*, run_id: int, now) -> None:
    """A run that finished (a sweep, a cancel, an error) with planner calls nobody counted: each is counted
    now at its answer's figures or its ceiling, as the runtime counts a lost call, so none is dropped."""
    calls = list(PlannerCall.objects.filter(run_id=run_id, in_flight=True))
    if not calls:
        return
    run = Run.objects.only("state", "tokens", "cost").get(pk=run_id)
    state = dict(run.state or {})
    usage = Usage.from_dict(state.get("usage"))
    for call in calls:
        answered = call.answered_at is not None
        tokens, cost = (call.tokens, call.cost) if answered else (call.max_tokens, call.max_cost)
        usage = usage.counted_lost_planner_call(tokens=tokens, cost=cost, estimated=not answered)
        PlannerCall.objects.filter(pk=call.pk, in_flight=True).update(
            in_flight=False, ended_at=now, tokens=tokens, cost=cost, lost=True, estimated=not answered)
        run.tokens, run.cost = run.tokens + tokens, run.cost + cost
    Run.objects.filter(pk=run_id).update(state={**state, "usage": usage.to_dict()}, tokens=run.tokens, cost=run.cost)

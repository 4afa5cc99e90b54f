"""The trace page's data, built outside the view: what the run did, what stopped it, the page of attempts."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from django.core.paginator import Page, Paginator

from runs import selectors
from runs.models import Attempt, Run
from runs.trace import calls_in_flight, reconciliation, review, timeline
from runs.trace.labels import attempt_label
from runs.trace.review import StopTrigger, TraceFilters
from runtime.stop import StopKind


@dataclass(frozen=True)
class TracePage:
    run: Run
    revisions: list            # each with .step_rows, each step with .page_attempts
    attempts_page: Page
    gauges: list
    approvals: list
    call_in_flight: Any
    reconciliation: Any        # a recorded reconciliation of an unknown outcome, if any
    trigger: StopTrigger | None
    trigger_repeats: Any       # when the stopping attempt is a repeat: the attempt it repeats
    stall_kind: str
    last_failure: Attempt | None
    first_failure_uid: str | None
    trace_filters: TraceFilters
    timeline: Any
    fork_origin: Any           # a fork: its source, fork point and inherited calls (selectors.ForkOrigin)
    forks: list                # the runs forked from this one

    def context(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def trace_page(run: Run, *, capability_calls: dict[str, int], trace_filters: TraceFilters, page_number: str,
               attempt_uid: str = "") -> TracePage:
    """`capability_calls`: selectors.run_capability_calls, which the page's filter form reads too."""
    # Paged by id on the (run, started_at, id) index, then the page's rows are read.
    attempt_ids = review.filter_attempts(selectors.run_attempt_ids(run=run), trace_filters)
    if attempt_uid and not trace_filters.active:
        # A link to one attempt opens the page it is on.
        position = selectors.attempt_position(run=run, uid=attempt_uid)
        if position is not None:
            page_number = str(position // selectors.ATTEMPTS_PER_PAGE + 1)
    attempts_page = Paginator(attempt_ids, selectors.ATTEMPTS_PER_PAGE).get_page(page_number)
    # The page's ids stay a subquery: one query reads the page's rows by id.
    attempts_page.object_list = selectors.attempts_in_order(run=run, ids=attempts_page.object_list)
    revisions = selectors.run_revisions(run=run)
    revision_numbers = {rev.pk: rev.number for rev in revisions}
    for rev in revisions:
        attempt = rev.triggering_attempt
        if attempt is not None:
            attempt.label = attempt_label(revision_numbers.get(attempt.step.revision_id),
                                                 attempt.step.key, attempt.number)
    approvals = selectors.run_approvals(run=run)
    trigger = review.stop_trigger(run=run, approvals=approvals, revisions=revisions)
    for approval in approvals:
        approval.is_stop_trigger = bool(trigger and trigger.anchor == f"approval-{approval.pk}")
    attempts = review.mark_attempts(list(attempts_page.object_list), run=run,
                                    revision_numbers=revision_numbers, trigger=trigger)
    steps = selectors.run_steps(run=run)
    for step in steps:
        # A step a stopped run never reached is not "pending": nothing will run it.
        step.never_ran = run.is_finished and step.status in ("pending", "running") and not step.attempt_count
    last_failure = review.last_failure(run=run) if run.is_finished and run.stop_reason != StopKind.COMPLETED else None
    if last_failure is not None:
        last_failure.label = attempt_label(last_failure.step.revision.number, last_failure.step.key,
                                                  last_failure.number)
    return TracePage(
        run=run, revisions=_group_steps(revisions, steps, attempts), attempts_page=attempts_page,
        gauges=selectors.budget_gauges(run=run, capability_calls=capability_calls), approvals=approvals,
        call_in_flight=calls_in_flight.call_shown(run),
        reconciliation=getattr(run, "reconciliation", None) if run.stop_reason == reconciliation.OUTCOME_UNKNOWN
        else None,
        trigger=trigger, trigger_repeats=next((a.repeats for a in attempts if a.is_stop_trigger and a.repeats), None),
        stall_kind=review.stall_kind(run), last_failure=last_failure,
        first_failure_uid=review.first_failure_uid(run=run), trace_filters=trace_filters,
        timeline=timeline.run_timeline(run=run, revisions=revisions, approvals=approvals, trigger=trigger),
        fork_origin=selectors.fork_origin(run=run), forks=selectors.run_forks(run=run),
    )


def _group_steps(revisions, steps, attempts):
    """Revisions -> steps -> the attempts on this page, for the trace's nested tables."""
    by_step: dict[int, list[Attempt]] = {}
    for attempt in attempts:
        by_step.setdefault(attempt.step_id, []).append(attempt)
    steps_by_revision: dict[int, list] = {}
    for step in steps:
        step.page_attempts = by_step.get(step.pk, [])
        steps_by_revision.setdefault(step.revision_id, []).append(step)
    for revision in revisions:
        revision.step_rows = steps_by_revision.get(revision.pk, [])
    return revisions

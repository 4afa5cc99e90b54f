"""Two runs compared, read in a fixed number of queries whatever their size (the page and the API).

The whole alignment is built from light rows (each run's steps, and its attempts' outcomes: no
output, no arguments); the arguments and outcomes are read only for the rows of the page asked
for, each under a cap (`VALUE_CAP`, cut in the database: a stored output of megabytes is never
read whole), and diffed by the pure runs.trace.compare.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import IntegerField, TextField, Value
from django.db.models.functions import Cast, Coalesce, Length, Substr
from django.utils import timezone

from runs import selectors
from runs.models import Attempt, PlanRevision, Run, Step
from runs.trace.as_json import iso
from runs.trace.compare import (
    Aligned,
    AlignmentCounts,
    AttemptCell,
    CappedText,
    StepSide,
    UsageRow,
    ValueDiff,
    align,
    counts,
    usage_rows,
    value_diff,
)
from runs.trace.labels import attempt_label

ROWS_PER_PAGE = 25
MAX_ROWS_PER_PAGE = 100
ATTEMPTS_SHOWN = 10          # per step and side; the rest are a link into the trace
REVISIONS_SHOWN = 50         # per run; a gateway session can hold thousands
VALUE_CAP = 32_000           # characters of an argument or output value read for its diff


class RunMissing(Exception):
    """One of the two runs asked for does not exist."""

    def __init__(self, field: str, run_id: int):
        super().__init__(f"There is no run #{run_id} ({field}).")
        self.field, self.run_id = field, run_id
        self.message = str(self)


def compare_runs_get(*, a_id: int, b_id: int) -> tuple[Run, Run]:
    runs = {}
    for field, run_id in (("a", a_id), ("b", b_id)):
        try:
            runs[field] = selectors.run_get(run_id=run_id)
        except Run.DoesNotExist:
            raise RunMissing(field, run_id) from None
    return runs["a"], runs["b"]


@dataclass(frozen=True)
class RevisionSummary:
    number: int
    accepted: bool
    reason_code: str
    reason: str
    steps: int
    changes: list[tuple[str, str]]     # selectors.revision_diff's (kind, text) lines
    tokens: int
    cost: float
    created_at: datetime


@dataclass(frozen=True)
class RunSide:
    run: Run
    revisions: list[RevisionSummary]   # the first REVISIONS_SHOWN
    plans: int                         # every plan received
    steps: int
    attempts: int
    wall_s: float | None
    stop_attempt_label: str

    @property
    def revisions_hidden(self) -> int:
        return max(0, self.plans - len(self.revisions))


@dataclass(frozen=True)
class RowDetail:
    """An aligned row of the page, with its arguments and outcome compared."""

    row: Aligned
    arguments: ValueDiff
    outcome: ValueDiff


@dataclass(frozen=True)
class ComparePage:
    a: RunSide
    b: RunSide
    usage: list[UsageRow]
    summary: AlignmentCounts
    rows_page: Page                    # of RowDetail
    differences_only: bool

    def context(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def compare_page(a: Run, b: Run, *, page_number: int | str = 1, per_page: int = ROWS_PER_PAGE,
                 differences_only: bool = False, now: datetime | None = None) -> ComparePage:
    now = now or timezone.now()
    steps_a, attempts_a = _steps(a)
    steps_b, attempts_b = _steps(b)
    rows = align(steps_a, steps_b)
    summary = counts(rows)
    shown = [row for row in rows if row.differs] if differences_only else rows
    aligned_page = Paginator(shown, per_page).get_page(page_number)
    page_rows = [replace(row, a=_with_attempts(row.a, attempts_a), b=_with_attempts(row.b, attempts_b))
                 for row in aligned_page.object_list]
    details: list[RowDetail] = _details(page_rows)
    page: Page = Page(details, aligned_page.number, aligned_page.paginator)  # type: ignore[misc]
    side_a = _side(a, steps=len(steps_a), attempts=sum(map(len, attempts_a.values())), now=now)
    side_b = _side(b, steps=len(steps_b), attempts=sum(map(len, attempts_b.values())), now=now)
    return ComparePage(a=side_a, b=side_b, usage=usage_rows(_usage(side_a), _usage(side_b)), summary=summary,
                       rows_page=page, differences_only=differences_only)


# -- the runs ---------------------------------------------------------------------------------


def _side(run: Run, *, steps: int, attempts: int, now: datetime) -> RunSide:
    revisions = list(PlanRevision.objects.filter(run=run).order_by("number")
                     .only("number", "accepted", "reason_code", "reason", "steps", "changes", "tokens", "cost",
                           "created_at")[:REVISIONS_SHOWN])
    summaries, previous = [], None
    for rev in revisions:
        summaries.append(RevisionSummary(
            number=rev.number, accepted=rev.accepted, reason_code=rev.reason_code, reason=rev.reason,
            steps=len(rev.steps) if isinstance(rev.steps, list) else 0,
            changes=selectors.revision_diff(rev.changes, previous.steps if previous else None, rev.steps),
            tokens=rev.tokens, cost=rev.cost, created_at=rev.created_at))
        previous = rev
    started = run.started_at or run.created_at
    wall_s = ((run.finished_at or now) - started).total_seconds() if run.started_at else None
    stop = run.stop_attempt
    stop_label = attempt_label(stop.step.revision.number, stop.step.key, stop.number) if stop else ""
    return RunSide(run=run, revisions=summaries, plans=max(run.revisions, len(summaries)), steps=steps,
                   attempts=attempts, wall_s=wall_s, stop_attempt_label=stop_label)


def _usage(side: RunSide) -> dict[str, float | None]:
    run = side.run
    return {"tool_calls": run.tool_calls, "attempts": side.attempts, "steps": side.steps, "plans": side.plans,
            "iterations": run.iterations, "retries": run.retries, "tokens": run.tokens, "cost": run.cost,
            "wall_s": None if side.wall_s is None else round(side.wall_s, 3),
            "side_effects_committed": run.side_effects_committed, "approvals_requested": run.approvals_requested,
            "repeated_attempts": run.repeated_attempts}


# -- the steps, light ---------------------------------------------------------------------------


_ATTEMPT_COLUMNS = ("step_id", "uid", "number", "kind", "status", "error_code", "latency_s", "side_effect_status",
                    "repeated_without_progress")


def _steps(run: Run) -> tuple[list[StepSide], dict[int, list[tuple]]]:
    """The run's steps in the order they ran (revision, then index), each with its number of attempts
    and its outcome, and the attempts' light rows by step: three queries, each along an index on
    the run, no JSON read."""
    # The revisions' numbers by a query of their own: a join would have the planner hash every
    # revision of every run (a sequential scan that grows with the table, not with the run).
    numbers = dict(PlanRevision.objects.filter(run=run).values_list("id", "number"))
    steps = sorted(((pk, numbers.get(revision_id, 0), index, key, capability, status, arguments_hash)
                    for pk, revision_id, index, key, capability, status, arguments_hash
                    in Step.objects.filter(run=run).values_list("id", "revision_id", "index", "key",
                                                                "capability_name", "status", "arguments_hash")),
                   key=lambda row: (row[1], row[2]))
    by_step: dict[int, list[tuple]] = {}
    # Light tuples, found by the run's index and sorted by (step, number): a few thousand rows, no JSON.
    for row in Attempt.objects.filter(run=run).order_by("step_id", "number").values_list(*_ATTEMPT_COLUMNS):
        by_step.setdefault(row[0], []).append(row)
    sides = []
    for step_id, revision, index, key, capability, status, arguments_hash in steps:
        made = by_step.get(step_id, ())
        sides.append(StepSide(id=step_id, revision=revision, index=index, key=key, capability=capability,
                              status=status, arguments_hash=arguments_hash, attempt_count=len(made),
                              outcome=(made[-1][4], made[-1][5]) if made else None))
    return sides, by_step


def _with_attempts(step: StepSide | None, rows: dict[int, list[tuple]]) -> StepSide | None:
    """A step of the page with its first attempts and its last as cells (built for the page's rows only)."""
    if step is None:
        return None

    def cell(row: tuple) -> AttemptCell:
        _step, uid, number, kind, status, code, latency, side_effect, repeated = row
        return AttemptCell(uid=uid, revision=step.revision, step_key=step.key, number=number, kind=kind,
                           status=status, error_code=code, latency_s=latency, side_effect=side_effect,
                           repeated=repeated)

    made = rows.get(step.id, [])
    return replace(step, attempts=tuple(cell(r) for r in made[:ATTEMPTS_SHOWN]),
                   last=cell(made[-1]) if made else None)


# -- the page's values --------------------------------------------------------------------------


def _details(rows: list[Aligned]) -> list[RowDetail]:
    """The page's rows with their arguments and outcomes compared: two queries for the whole page."""
    step_ids = {side.id for row in rows for side in (row.a, row.b) if side is not None}
    arguments = {pk: CappedText(text or "", size or 0, truncated=(size or 0) > VALUE_CAP)
                 for pk, text, size in Step.objects.filter(pk__in=step_ids)
                 .annotate(text=Substr(Cast("arguments", TextField()), 1, VALUE_CAP),
                           size=Length(Cast("arguments", TextField())))
                 .values_list("pk", "text", "size")}
    last_uids = {side.last.uid for row in rows for side in (row.a, row.b) if side is not None and side.last}
    outcomes = _outcomes(last_uids)
    details = []
    for row in rows:
        args = [arguments.get(side.id) if side else None for side in (row.a, row.b)]
        outs = [outcomes.get(side.last.uid) if side and side.last else None for side in (row.a, row.b)]
        details.append(RowDetail(row=row, arguments=value_diff(*args, what="arguments"),
                                 outcome=value_diff(*outs, what="outcome")))
    return details


def _outcomes(uids: set[str]) -> dict[str, CappedText]:
    """Each attempt's outcome as JSON text: its output (a stored one read from its start, up to the cap),
    or for a failure what failed: {"status", "error_code", "error_message"}."""
    found: dict[str, CappedText] = {}
    if not uids:
        return found
    rows = (Attempt.objects.filter(uid__in=uids)
            .annotate(out_text=Substr(Cast("output", TextField()), 1, VALUE_CAP),
                      out_size=Length(Cast("output", TextField())),
                      ref_text=Substr("output_ref__content", 1, VALUE_CAP),
                      ref_size=Coalesce("output_ref__size_bytes", Value(0), output_field=IntegerField()),
                      message=Substr("error_message", 1, 2000))
            .values_list("uid", "status", "error_code", "message", "output_ref_id", "output_ref__sha256", "out_text",
                         "out_size", "ref_text", "ref_size"))
    for uid, status, code, message, ref_id, sha, out_text, out_size, ref_text, ref_size in rows:
        if ref_id is not None:
            found[uid] = CappedText(ref_text or "", ref_size, truncated=ref_size > VALUE_CAP, sha256=sha or "")
        elif status == "ok":
            size = out_size or 0
            found[uid] = CappedText(out_text or "null", size, truncated=size > VALUE_CAP)
        else:
            text = json.dumps({"status": status, "error_code": code, "error_message": message}, ensure_ascii=False)
            found[uid] = CappedText(text, len(text))
    return found



# -- as JSON (the API) ----------------------------------------------------------------------------


def compare_dict(page: ComparePage) -> dict[str, Any]:
    """The comparison as the API answers it (runs.api.compare documents the shape); paging is the caller's."""
    return {
        "a": _run_dict(page.a), "b": _run_dict(page.b),
        "usage": [{"name": u.name, "label": u.label, "a": u.a, "b": u.b, "delta": u.delta} for u in page.usage],
        "summary": asdict(page.summary), "differences_only": page.differences_only,
        "page": page.rows_page.number, "pages": page.rows_page.paginator.num_pages,
        "count": page.rows_page.paginator.count,
        "results": [_row_dict(d) for d in page.rows_page.object_list],
    }


def _run_dict(side: RunSide) -> dict[str, Any]:
    run = side.run
    return {
        "id": run.pk, "goal": run.goal, "status": run.status, "stop_reason": run.stop_reason or None,
        "stop_detail": run.stop_detail, "stall_kind": run.stall_kind, "stop_attempt": side.stop_attempt_label or None,
        "planner": run.planner, "owner": run.owner.get_username(), "labels": run.labels,
        "created_at": iso(run.created_at), "started_at": iso(run.started_at), "finished_at": iso(run.finished_at),
        "plans": side.plans, "revisions_not_shown": side.revisions_hidden,
        "revisions": [{"number": r.number, "accepted": r.accepted, "reason_code": r.reason_code, "reason": r.reason,
                       "steps": r.steps, "changes": [{"kind": k, "text": t} for k, t in r.changes],
                       "tokens": r.tokens, "cost": r.cost, "created_at": iso(r.created_at)} for r in side.revisions],
    }


def _attempt_dict(cell: AttemptCell) -> dict[str, Any]:
    return {"uid": cell.uid, "label": cell.label, "number": cell.number, "kind": cell.kind, "status": cell.status,
            "error_code": cell.error_code or None, "latency_s": cell.latency_s, "side_effect": cell.side_effect,
            "repeated_without_progress": cell.repeated}


def _step_dict(step: StepSide | None) -> dict[str, Any] | None:
    if step is None:
        return None
    return {"revision": step.revision, "key": step.key, "index": step.index, "label": step.label,
            "capability": step.capability, "status": step.status, "arguments_hash": step.arguments_hash,
            "attempt_count": step.attempt_count, "attempts": [_attempt_dict(c) for c in step.attempts],
            "last": _attempt_dict(step.last) if step.last else None}


def _diff_dict(diff: ValueDiff) -> dict[str, Any]:
    return {"same": diff.same, "lines": [{"kind": line.kind, "text": line.text} for line in diff.lines],
            "notes": list(diff.notes)}


def _row_dict(detail: RowDetail) -> dict[str, Any]:
    row = detail.row
    return {"position": row.position, "match": row.match, "differs": row.differs, "a": _step_dict(row.a),
            "b": _step_dict(row.b), "arguments": _diff_dict(detail.arguments), "outcome": _diff_dict(detail.outcome)}

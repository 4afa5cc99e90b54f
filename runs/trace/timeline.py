"""The run's waterfall: planner calls, attempts, waits and approvals on one time axis, as SVG.

Server-rendered like core.charts (no JavaScript). One query whatever the run's size
(revisions and approvals come from the page), and the markup stays bounded: bars
narrower than a pixel, or landing on a pixel another bar of the lane already took,
are merged into one column (MERGE_PX wide) that counts what it holds.

Up to AGGREGATE_ABOVE attempts the query reads every attempt and Python merges them.
Above it the database groups the attempts into those same columns (per capability;
Python folds the lanes past MAX_CAPABILITY_LANES) with their counts of attempts,
failures and repeats, and returns a row per column plus, for each, its first attempt
(its link and the "first:" of its title); the notable attempts (the stop trigger's
and the first repeats, with the earlier attempt each repeats) come back as rows of
their own and are drawn as bars over the columns, named and linked. Waits are
counted in the column of the retry or poll that ends them, titled by the first one.
So the work is bounded by pixels, not attempts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import (
    BooleanField,
    Case,
    CharField,
    Count,
    F,
    FloatField,
    IntegerField,
    Min,
    OuterRef,
    Q,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, Concat, Floor, Greatest, Least
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from runs.expressions import EpochSeconds
from runs.models import Approval, Attempt, PlanRevision, Run, Step
from runs.trace.review import StopTrigger, attempt_label, kind_label
from runtime.stop import RunStatus, StopKind

WIDTH, LEFT, RIGHT, TOP, LANE_H, AXIS_H = 1000, 150, 16, 8, 26, 34
MERGE_PX = 3  # merged columns are this wide: fewer, still readable, and the markup stays small
MAX_CAPABILITY_LANES = 12
MAX_CONNECTORS = 40
# Up to this many attempts every one is read and drawn; above it the database merges them into columns.
AGGREGATE_ABOVE = 2000
OTHER_LANE = "other capabilities"
COLOURS = {"ok": "#2f6fdf", "retryable": "#b42318", "terminal": "#7a1010", "unknown": "#9a5b00",
           "wait": "#b8c2d6", "planner": "#6941c6", "planner_rejected": "#b42318", "approved": "#1f7a3d",
           "rejected": "#b42318", "pending": "#9a5b00", "expired": "#56607a"}


@dataclass
class _Bar:
    lane: str
    start: float  # seconds from the run's start
    end: float
    colour: str
    title: str
    href: str = ""
    classes: str = ""
    failed: bool = False
    always: bool = False  # drawn as a bar (at least a pixel wide) on top of the columns, never merged


@dataclass
class _Column:
    count: int = 0
    failed: int = 0
    repeated: int = 0
    first_title: str = ""
    href: str = ""
    notable: list = field(default_factory=list)  # titles of repeats and the stop, named even when merged
    classes: set = field(default_factory=set)


def _attempt_href(uid: str) -> str:
    return f"?attempt={uid}#attempt-{uid}"


def run_timeline(*, run: Run, revisions: list[PlanRevision], approvals: list[Approval],
                 trigger: StopTrigger | None, now: datetime | None = None) -> SafeString | None:
    origin = run.started_at or run.created_at
    end_moment = run.finished_at or now or timezone.now()
    stop_uid = trigger.attempt_uid if trigger and trigger.kind in ("attempt", "completion") else ""
    # One query whatever the run's size: every attempt up to AGGREGATE_ABOVE, else a row per merged column.
    found = _attempt_rows(run, stop_uid, min([origin.timestamp()] + [rev.created_at.timestamp()
                                                                      for rev in revisions[:1]]),
                          end_moment.timestamp())
    if any(row[13] != _EXACT for row in found):
        return _aggregated(run, revisions, approvals, trigger, end_moment, found)
    rows = [row[:13] for row in found]
    if not rows and not revisions:
        return None
    # The axis starts at the earliest thing recorded (clocks of workers and web may differ a little).
    origin_s = min([origin.timestamp()] + [r[1] for r in rows[:1]] + [rev.created_at.timestamp()
                                                                      for rev in revisions[:1]])
    last_s = max([end_moment.timestamp()] + [r[2] for r in rows])
    span = max(last_s - origin_s, 0.001)

    def sec(moment: datetime) -> float:
        return max(0.0, moment.timestamp() - origin_s)

    bars: list[_Bar] = []
    capabilities: list[str] = []
    step_last_end: dict[int, float] = {}
    by_signature: dict[str, tuple[str, float, str]] = {}
    connectors: list[tuple[str, float, float, str]] = []
    ended_at_by_uid: dict[str, float] = {}
    for uid, started, ended, kind, status, code, capability, repeated, step_id, key, rev, number, sig in rows:
        label = attempt_label(rev, key, number)
        if capability not in capabilities:
            capabilities.append(capability)
        s, e = max(0.0, started - origin_s), max(0.0, ended - origin_s)
        ended_at_by_uid[uid] = e
        if kind in ("retry", "poll") and step_id in step_last_end and step_last_end[step_id] < s:
            what = "backoff before retry" if kind == "retry" else "poll interval"
            bars.append(_Bar("Waits", step_last_end[step_id], s, COLOURS["wait"],
                             f"{what} {label}: {s - step_last_end[step_id]:.1f} s", _attempt_href(uid), "wait"))
        step_last_end[step_id] = e
        classes = ["attempt", status]
        title = f"{label} {kind_label(kind)} {capability}: {status}{' ' + code if code else ''}"
        outcome_key = (sig, status, code)  # the same call with the same outcome (as trace_review matches)
        if repeated and outcome_key in by_signature:
            earlier_label, earlier_start, earlier_lane = by_signature[outcome_key]
            title += f"; repeats {earlier_label} without progress"
            classes.append("repeated")
            if len(connectors) < MAX_CONNECTORS:
                connectors.append((capability, earlier_start, s, f"{label} repeats {earlier_label}"))
        if uid == stop_uid:
            classes.append("stop" if trigger.kind == "attempt" else "completion")
            title += "; stopped the run" if trigger.kind == "attempt" else "; met the completion criteria"
        by_signature[outcome_key] = (label, s, capability)
        bars.append(_Bar(capability, s, e, COLOURS.get(status, COLOURS["ok"]), title, _attempt_href(uid),
                         " ".join(classes), failed=status != "ok"))
    bars += _planner_and_approval_bars(revisions, approvals, sec, last_s - origin_s,
                                       lambda uid, created: ended_at_by_uid.get(uid, created))
    lanes = ["Planner", "Approvals", "Waits"]
    lanes = [lane for lane in lanes if any(b.lane == lane for b in bars)]
    shown_caps = capabilities[:MAX_CAPABILITY_LANES]
    if len(capabilities) > MAX_CAPABILITY_LANES:
        for b in bars:
            if b.lane in capabilities[MAX_CAPABILITY_LANES:]:
                b.lane = "other capabilities"
        shown_caps.append("other capabilities")
    lanes += shown_caps
    return _render(run, bars, lanes, connectors, span, trigger, sec(end_moment) if run.finished_at else None,
                   len(rows))


def _planner_and_approval_bars(revisions, approvals, sec, last, ended_at) -> list[_Bar]:
    """The Planner and Approvals lanes, from the page's own revisions and approvals (no query)."""
    bars = []
    for revision in revisions:
        created = sec(revision.created_at)
        trigger_uid = revision.triggering_attempt.uid if revision.triggering_attempt_id else ""
        begin = ended_at(trigger_uid, created) if trigger_uid else 0.0
        title = f"planner: revision {revision.number} ({revision.reason_code}"
        title += ", rejected)" if not revision.accepted else ")"
        if revision.triggering_attempt_id:
            t = revision.triggering_attempt
            title += f" after {t.capability_name} #{t.number} ({t.status}{' ' + t.error_code if t.error_code else ''})"
        bars.append(_Bar("Planner", min(begin, created), created, COLOURS["planner" if revision.accepted else
                                                                           "planner_rejected"],
                         title, f"#revision-{revision.number}", "planner", failed=not revision.accepted))
    for approval in approvals:
        start = sec(approval.requested_at)
        stop = sec(approval.decided_at) if approval.decided_at else last
        what = f"step {approval.step.key}" if approval.kind == "step" and approval.step else "plan"
        bars.append(_Bar("Approvals", start, stop, COLOURS.get(approval.state, COLOURS["pending"]),
                         f"approval of {what}: {approval.state}, waited {stop - start:.0f} s", "#approvals-heading",
                         f"approval {approval.state}", failed=approval.state in ("rejected", "expired")))
    return bars


# The columns of the one query's rows; the first 13 are those the exact path reads.
_FIELDS = ("auid", "t0", "t1", "akind", "astatus", "code", "cap", "repeated", "astep", "key", "rev", "num", "sig",
           "part", "aid", "col", "n", "failed_n", "repeated_n", "first_id", "is_wait", "origin", "last",
           "previous_end", "earlier_t0", "earlier_label")
_TYPES = dict(zip(_FIELDS, ["s", "f", "f", "s", "s", "s", "s", "b", "i", "s", "i", "i", "s", "s", "i", "f", "i", "i", "i",
                            "i", "i", "f", "f", "f", "f", "s"], strict=True))
_FIELD_TYPES = {"s": CharField, "f": FloatField, "i": IntegerField, "b": BooleanField}
_EXACT, _GROUP, _DETAIL = "a", "g", "d"


def _typed_null(name: str):
    return Cast(Value(None), _FIELD_TYPES[_TYPES[name]]())


def _attempt_rows(run: Run, stop_uid: str, floor_s: float, end_s: float) -> list[tuple]:
    """The run's attempts as _FIELDS, in one query: a UNION ALL of three parts, of which a
    one-time condition on the run's attempt count keeps either the first or the other two.

    - At most AGGREGATE_ABOVE attempts: every attempt (part "a"), as the exact path reads them.
    - Above: a row per capability, merged column and "a wait precedes" (part "g"), with its counts
      of attempts, failures and repeats and its first attempt (the earliest recorded that is
      neither a repeat nor the stop, if any); the columns are placed on the axis the page draws,
      whose ends the database computes once from the first and the last attempt started. Then
      (part "d") those first attempts, and the notable ones: the stop trigger's and the first
      repeats, with the earlier attempt each repeats. Python takes the notables out of the counts.
    """
    attempts = Attempt.objects.filter(run=run).order_by()
    in_order = [F("started_at").asc(), F("id").asc()]
    count = Subquery(attempts.values("run").annotate(c=Count("*")).values("c"))
    # The axis' ends, from the (run, started_at, id) index: the first start, the last started attempt's end.
    first_start = Subquery(attempts.order_by(*in_order).annotate(e=EpochSeconds("started_at")).values("e")[:1])
    last_end = Subquery(attempts.order_by("-started_at", "-id").annotate(e=EpochSeconds("ended_at")).values("e")[:1])
    origin = Least(Value(floor_s), first_start, output_field=FloatField())
    last = Greatest(Value(end_s), last_end, output_field=FloatField())
    scale = Value(float(WIDTH - LEFT - RIGHT)) / Greatest(last - origin, Value(0.001))
    column = Floor((Value(float(LEFT)) + (EpochSeconds("started_at") - origin) * scale) / Value(float(MERGE_PX)))
    # The first repeats (twice the connectors: a repeat with no earlier match draws none) and the stop.
    first_repeats = Subquery(attempts.filter(repeated_without_progress=True).order_by(*in_order)
                             .values("id")[:2 * MAX_CONNECTORS])
    repeat_q = Q(repeated_without_progress=True, id__in=first_repeats)
    notable_q = repeat_q | Q(uid=stop_uid) if stop_uid else repeat_q
    wait_q = Q(kind__in=("retry", "poll"), number__gt=1)  # a retry or poll follows a wait on its step

    def attempt_columns(labels_joined=True):
        step = Step.objects.filter(pk=OuterRef("step_id")).order_by()  # a few rows: by key, not a join of all
        return {"auid": F("uid"), "t0": EpochSeconds("started_at"), "t1": EpochSeconds("ended_at"),
                "akind": F("kind"), "astatus": F("status"), "code": F("error_code"), "cap": F("capability_name"),
                "repeated": F("repeated_without_progress"), "astep": F("step_id"),
                "key": F("step__key") if labels_joined else Subquery(step.values("key")),
                "rev": F("step__revision__number") if labels_joined else Subquery(step.values("revision__number")),
                "num": F("number"), "sig": F("signature_hash"), "aid": F("id")}

    def nulls(*names):
        return {name: _typed_null(name) for name in names}

    small = attempts.alias(total=count).filter(total__lte=AGGREGATE_ABOVE).annotate(
        **attempt_columns(), part=Value(_EXACT), **nulls(*_FIELDS[15:]))
    big = attempts.alias(total=count).filter(total__gt=AGGREGATE_ABOVE)
    # Per capability, column and whether a wait precedes: counts (notables included: Python takes them
    # out) and the column's first attempt (the earliest recorded) that is neither a repeat nor the stop.
    not_notable = Q(repeated_without_progress=False) & ~Q(uid=stop_uid)
    groups = big.annotate(col=column, is_wait=_one_if(wait_q)).values("capability_name", "col", "is_wait").annotate(
        first_id=Coalesce(Min(Case(When(not_notable, then=F("id")))), Min("id")))
    grouped = groups.annotate(
        n=Count("id"), failed_n=Sum(_one_if(~Q(status="ok"))),
        repeated_n=Sum(_one_if(Q(repeated_without_progress=True))),
        cap=F("capability_name"), part=Value(_GROUP),
        **nulls(*(name for name in _FIELDS if name not in (
            "cap", "col", "n", "failed_n", "repeated_n", "first_id", "is_wait", "part")))
    ).values_list(*_FIELDS)
    earlier = (Attempt.objects.filter(run=OuterRef("run"), signature_hash=OuterRef("signature_hash"),
                                      status=OuterRef("status"), error_code=OuterRef("error_code"))
               .filter(Q(started_at__lt=OuterRef("started_at"))
                       | Q(started_at=OuterRef("started_at"), id__lt=OuterRef("id")))
               .order_by("-started_at", "-id"))
    earlier_label = Concat(Value("r"), Cast("step__revision__number", CharField()), Value("·"), "step__key",
                           Value("#"), Cast("number", CharField()), output_field=CharField())
    # The step's attempt before, along the (step, number) index.
    previous = Attempt.objects.filter(step=OuterRef("step"), number__lt=OuterRef("number")).order_by("-number")
    details = big.filter(Q(id__in=groups.values("first_id")) | notable_q).annotate(
        **attempt_columns(labels_joined=False), part=Value(_DETAIL), col=column, origin=origin, last=last,
        previous_end=Subquery(previous.annotate(e=EpochSeconds("ended_at")).values("e")[:1]),
        earlier_t0=Case(When(repeated_without_progress=True, then=Subquery(
            earlier.annotate(e=EpochSeconds("started_at")).values("e")[:1])), default=None, output_field=FloatField()),
        earlier_label=Case(When(repeated_without_progress=True, then=Subquery(
            earlier.annotate(label=earlier_label).values("label")[:1])), default=None, output_field=CharField()),
        **nulls("n", "failed_n", "repeated_n", "first_id", "is_wait"))
    query = small.values_list(*_FIELDS).union(grouped, details.values_list(*_FIELDS), all=True)
    return list(query.order_by("part", "t0", "aid"))


def _one_if(q: Q) -> Case:
    return Case(When(q, then=Value(1)), default=Value(0), output_field=IntegerField())


def _aggregated(run, revisions, approvals, trigger, end_moment, rows) -> SafeString:
    """More than AGGREGATE_ABOVE attempts: draw the columns the database merged (titled by their
    first attempt, the earliest recorded), and the notable attempts (the stop trigger, the first
    repeats with the attempt each repeats) as bars of their own on top of them."""
    at = {name: i for i, name in enumerate(_FIELDS)}
    groups = [row for row in rows if row[at["part"]] == _GROUP]
    details = [row for row in rows if row[at["part"]] == _DETAIL]  # in trace order
    by_id = {row[at["aid"]]: row for row in details}
    origin_s, last_s = details[0][at["origin"]], details[0][at["last"]]
    span = max(last_s - origin_s, 0.001)
    stop_uid = trigger.attempt_uid if trigger and trigger.kind in ("attempt", "completion") else ""

    def sec(moment: datetime) -> float:
        return max(0.0, moment.timestamp() - origin_s)

    capabilities: list[str] = []
    for row in details:  # every capability's first attempt is here: it is first of its column, or notable
        if row[at["cap"]] not in capabilities:
            capabilities.append(row[at["cap"]])
    shown_caps = capabilities[:MAX_CAPABILITY_LANES]
    if len(capabilities) > MAX_CAPABILITY_LANES:
        shown_caps.append(OTHER_LANE)

    def lane_of(capability):
        return capability if capability in shown_caps else OTHER_LANE

    def title_of(row):
        code = row[at["code"]]
        return (f"{attempt_label(row[at['rev']], row[at['key']], row[at['num']])} {kind_label(row[at['akind']])} "
                f"{row[at['cap']]}: {row[at['astatus']]}{' ' + code if code else ''}")

    columns: dict[tuple[str, int], _Column] = {}
    firsts: dict[tuple[str, int], tuple] = {}

    def add(key, count, failed, repeated, first, title):
        column = columns.setdefault(key, _Column())
        column.count += count
        column.failed += failed
        column.repeated += repeated
        order = (first[at["t0"]], first[at["aid"]])
        if key not in firsts or order < firsts[key]:  # several groups in a column: the earliest first stays first
            firsts[key] = order
            column.first_title, column.href = title, _attempt_href(first[at["auid"]])

    for group in groups:
        pixel = int(group[at["col"]]) * MERGE_PX
        first = by_id[group[at["first_id"]]]
        add((lane_of(group[at["cap"]]), pixel), group[at["n"]], group[at["failed_n"]], group[at["repeated_n"]],
            first, title_of(first))
        if group[at["is_wait"]]:
            label = attempt_label(first[at["rev"]], first[at["key"]], first[at["num"]])
            what = "backoff before retry" if first[at["akind"]] == "retry" else "poll interval"
            previous_end = first[at["previous_end"]]
            gap = max(0.0, first[at["t0"]] - previous_end) if previous_end is not None else 0.0
            add(("Waits", pixel), group[at["n"]], 0, 0, first, f"{what} {label}: {gap:.1f} s")
    bars: list[_Bar] = []
    connectors: list[tuple[str, float, float, str]] = []
    for row in details:
        uid, status, capability = row[at["auid"]], row[at["astatus"]], row[at["cap"]]
        if not (row[at["repeated"]] or uid == stop_uid):
            continue  # a column's first attempt only
        # A notable attempt is a bar of its own: the column it falls in no longer counts it.
        key = (lane_of(capability), int(row[at["col"]]) * MERGE_PX)
        column = columns[key]
        column.count -= 1
        column.failed -= status != "ok"
        column.repeated -= bool(row[at["repeated"]])
        if not column.count:
            del columns[key]
        label = attempt_label(row[at["rev"]], row[at["key"]], row[at["num"]])
        s, e = max(0.0, row[at["t0"]] - origin_s), max(0.0, row[at["t1"]] - origin_s)
        title, classes = title_of(row), ["attempt", status]
        earlier_label = row[at["earlier_label"]]
        if row[at["repeated"]] and earlier_label is not None:
            title += f"; repeats {earlier_label} without progress"
            classes.append("repeated")
            if len(connectors) < MAX_CONNECTORS:
                connectors.append((capability, max(0.0, row[at["earlier_t0"]] - origin_s), s,
                                   f"{label} repeats {earlier_label}"))
        if uid == stop_uid:
            classes.append("stop" if trigger.kind == "attempt" else "completion")
            title += "; stopped the run" if trigger.kind == "attempt" else "; met the completion criteria"
        bars.append(_Bar(lane_of(capability), s, e, COLOURS.get(status, COLOURS["ok"]), title, _attempt_href(uid),
                         " ".join(classes), failed=status != "ok", always=True))
    for column in columns.values():
        column.classes = {"repeated"} if column.repeated else set()
    ended_at = {r.triggering_attempt.uid: sec(r.triggering_attempt.ended_at) for r in revisions
                if r.triggering_attempt_id}
    bars += _planner_and_approval_bars(revisions, approvals, sec, last_s - origin_s,
                                       lambda uid, created: ended_at.get(uid, created))
    lanes = [lane for lane in ("Planner", "Approvals") if any(b.lane == lane for b in bars)]
    lanes += ["Waits"] if any(key[0] == "Waits" for key in columns) else []
    total = sum(group[at["n"]] for group in groups)
    return _render(run, bars, lanes + shown_caps, connectors, span, trigger,
                   sec(end_moment) if run.finished_at else None, total, columns=columns)


def _render(run, bars, lanes, connectors, span, trigger, stop_at, attempt_count, columns=None) -> SafeString:
    plot_w = WIDTH - LEFT - RIGHT
    height = TOP + LANE_H * len(lanes) + AXIS_H
    scale = plot_w / span
    lane_y = {lane: TOP + i * LANE_H for i, lane in enumerate(lanes)}
    summary = (f"{attempt_count} attempts over {span:.1f} s in {len(lanes)} lanes; "
               + ("stopped: " + run.stop_reason if run.stop_reason else "still running"))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" role="group" '
             f'aria-labelledby="timeline-title timeline-desc" class="timeline-svg">'
             f'<title id="timeline-title">Timeline of run {run.pk}</title><desc id="timeline-desc">{escape(summary)}</desc>']
    for lane, y in lane_y.items():
        parts.append(f'<rect x="{LEFT}" y="{y}" width="{plot_w}" height="{LANE_H}" class="lane-bg"/>')
        parts.append(f'<text x="{LEFT - 8}" y="{y + LANE_H * 0.66:.1f}" text-anchor="end" class="lane-label">'
                     f'{escape(lane)}</text>')
    for k in range(6):
        x = LEFT + plot_w * k / 5
        y = TOP + LANE_H * len(lanes)
        parts.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{y + 4}" class="gridline"/>')
        parts.append(f'<text x="{x:.1f}" y="{y + 18}" text-anchor="{"start" if k == 0 else "end" if k == 5 else "middle"}">'
                     f'{_seconds(span * k / 5)}</text>')
    columns: dict[tuple[str, int], _Column] = columns if columns is not None else {}  # merged by the database
    taken: set[tuple[str, int]] = set()
    on_top: list[str] = []
    for bar in sorted(bars, key=lambda b: b.start):
        if bar.lane not in lane_y:
            continue
        if bar.always:
            x, w = LEFT + bar.start * scale, max((bar.end - bar.start) * scale, 1.0)
            on_top.append(f'<a href="{escape(bar.href)}" class="bar {escape(bar.classes)}">'
                          f'<rect x="{x:.1f}" y="{lane_y[bar.lane] + 4}" width="{w:.1f}" height="{LANE_H - 8}" '
                          f'fill="{bar.colour}"><title>{escape(bar.title)}</title></rect></a>')
            continue
        x = LEFT + bar.start * scale
        w = (bar.end - bar.start) * scale
        pixel = int(x)
        if w < 1 or (bar.lane, pixel) in taken:
            column = columns.setdefault((bar.lane, pixel - pixel % MERGE_PX), _Column())
            column.count += 1
            column.failed += int(bar.failed)
            column.repeated += int("repeated" in bar.classes)
            marks = {c for c in bar.classes.split() if c in ("stop", "completion", "repeated")}
            column.classes |= marks
            if marks and len(column.notable) < 3:
                column.notable.append(bar.title)
            if not column.href:
                column.href, column.first_title = bar.href, bar.title
            continue
        taken.update((bar.lane, p) for p in range(pixel, int(x + w) + 1))
        y = lane_y[bar.lane]
        parts.append(f'<a href="{escape(bar.href)}" class="bar {escape(bar.classes)}">'
                     f'<rect x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="{LANE_H - 8}" fill="{bar.colour}">'
                     f'<title>{escape(bar.title)}</title></rect></a>')
    for (lane, pixel), column in columns.items():
        y = lane_y[lane]
        if column.count == 1:
            title = column.first_title
        else:
            title = (f"{column.count} items here ({column.failed} failed"
                     f"{f', {column.repeated} repeated' if column.repeated else ''}); first: {column.first_title}")
            if column.notable:
                title += "; " + "; ".join(column.notable)
        colour = COLOURS["retryable"] if column.failed else COLOURS["ok"] if lane not in (
            "Waits", "Planner", "Approvals") else COLOURS["wait"]
        classes = " ".join(["bar", "aggregate", *sorted(column.classes)])
        parts.append(f'<a href="{escape(column.href)}" class="{classes}"><rect x="{pixel}" y="{y + 4}" width="{MERGE_PX - 0.5}" '
                     f'height="{LANE_H - 8}" fill="{colour}"><title>{escape(title)}</title></rect></a>')
    parts += on_top
    for lane, a, b, title in connectors:
        if lane not in lane_y:
            continue
        x1, x2, y = LEFT + a * scale, LEFT + b * scale, lane_y[lane] + 4
        mid = (x1 + x2) / 2
        parts.append(f'<path d="M{x1:.1f} {y} Q{mid:.1f} {y - 14} {x2:.1f} {y}" class="repeat-link">'
                     f'<title>{escape(title)}</title></path>')
    if stop_at is not None:
        x = LEFT + stop_at * scale
        completed = run.stop_reason == StopKind.COMPLETED
        cls = "stop-line completed" if completed else "stop-line"
        label = RunStatus.COMPLETED if completed else RunStatus.STOPPED
        parts.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + LANE_H * len(lanes)}" class="{cls}">'
                     f'<title>{escape(label)}: {escape(run.stop_reason)}</title></line>')
    parts.append("</svg>")
    return mark_safe("".join(parts))


def _seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 10:
        return f"{value:.1f} s"
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"

"""The run's waterfall: planner calls, attempts, waits and approvals on one time axis, as SVG.

Server-rendered like runs.charts (no JavaScript). Two queries whatever the run's
size (attempts, approvals come from the page), and the markup stays bounded: bars
narrower than a pixel, or landing on a pixel another bar of the lane already
took, are merged into one column per pixel that counts what it holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import FloatField, Func
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from runs.models import Approval, Attempt, PlanRevision, Run
from runs.trace_review import StopTrigger, attempt_label, kind_label

WIDTH, LEFT, RIGHT, TOP, LANE_H, AXIS_H = 1000, 150, 16, 8, 26, 34
MERGE_PX = 3  # merged columns are this wide: fewer, still readable, and the markup stays small
MAX_CAPABILITY_LANES = 12
MAX_CONNECTORS = 40
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


@dataclass
class _Column:
    count: int = 0
    failed: int = 0
    repeated: int = 0
    first_title: str = ""
    href: str = ""
    notable: list = field(default_factory=list)  # titles of repeats and the stop, named even when merged
    classes: set = field(default_factory=set)


class EpochSeconds(Func):
    """A moment as Unix seconds, computed by the database: 5,000 rows need no datetime parsing."""

    output_field = FloatField()

    def as_sql(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"CAST(EXTRACT(EPOCH FROM {sql}) AS double precision)", params  # numeric otherwise

    def as_sqlite(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        # julianday() of the stored UTC text; 2440587.5 is the Unix epoch as a Julian day.
        return f"((julianday({sql}) - 2440587.5) * 86400.0)", params


def _attempt_href(uid: str) -> str:
    return f"?attempt={uid}#attempt-{uid}"


def run_timeline(*, run: Run, revisions: list[PlanRevision], approvals: list[Approval],
                 trigger: StopTrigger | None, now: datetime | None = None) -> SafeString | None:
    origin = run.started_at or run.created_at
    rows = list(Attempt.objects.filter(run=run).order_by("started_at", "id").annotate(
        t0=EpochSeconds("started_at"), t1=EpochSeconds("ended_at")).values_list(
        "uid", "t0", "t1", "kind", "status", "error_code", "capability_name",
        "repeated_without_progress", "step_id", "step__key", "step__revision__number", "number",
        "signature_hash").iterator(chunk_size=2000))
    if not rows and not revisions:
        return None
    # The axis starts at the earliest thing recorded (clocks of workers and web may differ a little).
    origin_s = min([origin.timestamp()] + [r[1] for r in rows[:1]] + [rev.created_at.timestamp()
                                                                      for rev in revisions[:1]])
    end_moment = run.finished_at or now or timezone.now()
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
    stop_uid = trigger.attempt_uid if trigger and trigger.kind in ("attempt", "completion") else ""
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
    for revision in revisions:
        created = sec(revision.created_at)
        trigger_uid = revision.triggering_attempt.uid if revision.triggering_attempt_id else ""
        begin = ended_at_by_uid.get(trigger_uid, created) if trigger_uid else 0.0
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
        stop = sec(approval.decided_at) if approval.decided_at else last_s - origin_s
        what = f"step {approval.step.key}" if approval.kind == "step" and approval.step else "plan"
        bars.append(_Bar("Approvals", start, stop, COLOURS.get(approval.state, COLOURS["pending"]),
                         f"approval of {what}: {approval.state}, waited {stop - start:.0f} s", "#approvals-heading",
                         f"approval {approval.state}", failed=approval.state in ("rejected", "expired")))

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


def _render(run, bars, lanes, connectors, span, trigger, stop_at, attempt_count) -> SafeString:
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
    columns: dict[tuple[str, int], _Column] = {}
    taken: set[tuple[str, int]] = set()
    for bar in sorted(bars, key=lambda b: b.start):
        if bar.lane not in lane_y:
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
    for lane, a, b, title in connectors:
        if lane not in lane_y:
            continue
        x1, x2, y = LEFT + a * scale, LEFT + b * scale, lane_y[lane] + 4
        mid = (x1 + x2) / 2
        parts.append(f'<path d="M{x1:.1f} {y} Q{mid:.1f} {y - 14} {x2:.1f} {y}" class="repeat-link">'
                     f'<title>{escape(title)}</title></path>')
    if stop_at is not None:
        x = LEFT + stop_at * scale
        completed = run.stop_reason == "completed"
        cls = "stop-line completed" if completed else "stop-line"
        label = "completed" if completed else "stopped"
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

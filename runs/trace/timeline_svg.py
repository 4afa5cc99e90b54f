"""The run's waterfall as SVG, from typed rows and numbers only: pure Python, no Django, no query.

Server-rendered like core.charts (no JavaScript). Lanes for the planner's revisions, the
approvals, the waits and each capability (past MAX_CAPABILITY_LANES they fold into one);
bars narrower than a pixel, or landing on a pixel another bar of the lane already took, are
merged into one column (MERGE_PX wide) that counts what it holds, so the markup stays bounded.

Two inputs (runs.trace.timeline reads them in one query): every attempt (`render_attempts`),
or, above the query's threshold, the columns the database merged with the attempts that
title them and the notable ones drawn on top (`render_merged`). Moments are Unix seconds.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape  # what django.utils.html.escape does, without Django

from runs.trace.labels import attempt_label, kind_label
from runtime.stop import RunStatus, StopKind

WIDTH, LEFT, RIGHT, TOP, LANE_H, AXIS_H = 1000, 150, 16, 8, 26, 34
MERGE_PX = 3  # merged columns are this wide: fewer, still readable, and the markup stays small
MAX_CAPABILITY_LANES = 12
MAX_CONNECTORS = 40
OTHER_LANE = "other capabilities"
COLOURS = {"ok": "#2f6fdf", "retryable": "#b42318", "terminal": "#7a1010", "unknown": "#9a5b00",
           "wait": "#b8c2d6", "planner": "#6941c6", "planner_rejected": "#b42318", "approved": "#1f7a3d",
           "rejected": "#b42318", "pending": "#9a5b00", "expired": "#56607a"}


# -- the rows ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunFrame:
    """The run around its rows: what the axis, the title and the stop line need."""

    run_id: int
    stop_reason: str
    origin: float      # when the run started (or was created, if it never started)
    end: float         # when it finished, or now
    finished: bool
    stop_uid: str = ""   # the attempt that stopped the run or met the completion criteria
    stop_kind: str = ""  # "attempt" (it stopped the run) or "completion", with stop_uid


@dataclass(frozen=True)
class AttemptRow:
    """One attempt."""

    uid: str
    started: float
    ended: float
    kind: str
    status: str
    error_code: str
    capability: str
    repeated: bool     # repeated without progress
    step_id: int
    step_key: str
    revision: int | None
    number: int
    signature_hash: str


@dataclass(frozen=True)
class ColumnAttempt(AttemptRow):
    """An attempt read with the merged columns: the first of a column, or a notable one (the stop
    trigger's, a first repeat), placed in its column of the axis the database computed."""

    id: int
    column: float      # the column's index: its x is column * MERGE_PX
    origin: float      # the axis' ends, as the database computed them
    last: float
    previous_end: float | None   # when the step's attempt before it ended (a wait's start)
    earlier_started: float | None  # for a repeat: when the attempt it repeats started, and its label
    earlier_label: str | None


@dataclass(frozen=True)
class ColumnRow:
    """The attempts of one capability the database merged into one column (after a wait, or not)."""

    capability: str
    column: float
    attempts: int
    failed: int
    repeated: int
    first_id: int      # the ColumnAttempt that titles it
    after_wait: int    # 1: retries or polls, each following a wait on its step


@dataclass(frozen=True)
class MergedAttempts:
    columns: list[ColumnRow]
    attempts: list[ColumnAttempt]   # in trace order


@dataclass(frozen=True)
class TriggeringAttempt:
    uid: str
    capability: str
    number: int
    status: str
    error_code: str
    ended: float


@dataclass(frozen=True)
class RevisionRow:
    number: int
    reason_code: str
    accepted: bool
    created: float
    trigger: TriggeringAttempt | None   # the attempt whose outcome asked for this revision


@dataclass(frozen=True)
class ApprovalRow:
    kind: str
    step_key: str | None
    state: str
    requested: float
    decided: float | None


# -- what is drawn ----------------------------------------------------------------------------

@dataclass
class _Bar:
    lane: str
    start: float  # seconds from the axis' origin
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


_Connector = tuple[str, float, float, str]   # lane, from, to (seconds), title


def _attempt_href(uid: str) -> str:
    return f"?attempt={uid}#attempt-{uid}"


def _title(attempt: AttemptRow) -> str:
    code = attempt.error_code
    return (f"{attempt_label(attempt.revision, attempt.step_key, attempt.number)} {kind_label(attempt.kind)} "
            f"{attempt.capability}: {attempt.status}{' ' + code if code else ''}")


def _mark_stop(frame: RunFrame, title: str, classes: list[str]) -> str:
    """The stop trigger's bar says so (classes gains its mark); its title, returned, too."""
    classes.append("stop" if frame.stop_kind == "attempt" else "completion")
    return title + ("; stopped the run" if frame.stop_kind == "attempt" else "; met the completion criteria")


def _stop_at(frame: RunFrame, origin_s: float) -> float | None:
    return max(0.0, frame.end - origin_s) if frame.finished else None


# -- every attempt ----------------------------------------------------------------------------

def render_attempts(frame: RunFrame, attempts: list[AttemptRow], revisions: list[RevisionRow],
                    approvals: list[ApprovalRow]) -> str | None:
    """The timeline of every attempt (in trace order); None when there is nothing to draw."""
    if not attempts and not revisions:
        return None
    # The axis starts at the earliest thing recorded (clocks of workers and web may differ a little).
    origin_s = min([frame.origin] + [a.started for a in attempts[:1]] + [rev.created for rev in revisions[:1]])
    last_s = max([frame.end] + [a.ended for a in attempts])
    span = max(last_s - origin_s, 0.001)
    bars, capabilities, connectors, ended_at_by_uid = _attempt_bars(frame, attempts, origin_s)
    bars += _planner_and_approval_bars(revisions, approvals, origin_s, last_s - origin_s,
                                       lambda uid, created: ended_at_by_uid.get(uid, created))
    lanes = [lane for lane in ("Planner", "Approvals", "Waits") if any(b.lane == lane for b in bars)]
    shown_caps = capabilities[:MAX_CAPABILITY_LANES]
    if len(capabilities) > MAX_CAPABILITY_LANES:
        for b in bars:
            if b.lane in capabilities[MAX_CAPABILITY_LANES:]:
                b.lane = OTHER_LANE
        shown_caps.append(OTHER_LANE)
    return _svg(frame, bars, lanes + shown_caps, connectors, span, _stop_at(frame, origin_s), len(attempts))


def _attempt_bars(frame: RunFrame, attempts: list[AttemptRow],
                  origin_s: float) -> tuple[list[_Bar], list[str], list[_Connector], dict[str, float]]:
    """(bars of the attempts and the waits before retries and polls, capabilities in order of first
    use, the repeats' connectors, each attempt's end by uid)."""
    bars: list[_Bar] = []
    capabilities: list[str] = []
    step_last_end: dict[int, float] = {}
    by_signature: dict[tuple[str, str, str], tuple[str, float, str]] = {}
    connectors: list[_Connector] = []
    ended_at_by_uid: dict[str, float] = {}
    for a in attempts:
        label = attempt_label(a.revision, a.step_key, a.number)
        if a.capability not in capabilities:
            capabilities.append(a.capability)
        s, e = max(0.0, a.started - origin_s), max(0.0, a.ended - origin_s)
        ended_at_by_uid[a.uid] = e
        if a.kind in ("retry", "poll") and a.step_id in step_last_end and step_last_end[a.step_id] < s:
            what = "backoff before retry" if a.kind == "retry" else "poll interval"
            bars.append(_Bar("Waits", step_last_end[a.step_id], s, COLOURS["wait"],
                             f"{what} {label}: {s - step_last_end[a.step_id]:.1f} s", _attempt_href(a.uid), "wait"))
        step_last_end[a.step_id] = e
        classes = ["attempt", a.status]
        title = _title(a)
        outcome_key = (a.signature_hash, a.status, a.error_code)  # the same call with the same outcome (as trace_review)
        if a.repeated and outcome_key in by_signature:
            earlier_label, earlier_start, _earlier_lane = by_signature[outcome_key]
            title += f"; repeats {earlier_label} without progress"
            classes.append("repeated")
            if len(connectors) < MAX_CONNECTORS:
                connectors.append((a.capability, earlier_start, s, f"{label} repeats {earlier_label}"))
        if a.uid == frame.stop_uid:
            title = _mark_stop(frame, title, classes)
        by_signature[outcome_key] = (label, s, a.capability)
        bars.append(_Bar(a.capability, s, e, COLOURS.get(a.status, COLOURS["ok"]), title, _attempt_href(a.uid),
                         " ".join(classes), failed=a.status != "ok"))
    return bars, capabilities, connectors, ended_at_by_uid


def _planner_and_approval_bars(revisions: list[RevisionRow], approvals: list[ApprovalRow], origin_s: float,
                               last: float, ended_at: Callable[[str, float], float]) -> list[_Bar]:
    """The Planner and Approvals lanes. `ended_at(uid, default)`: when a triggering attempt ended."""
    def sec(moment: float) -> float:
        return max(0.0, moment - origin_s)

    bars = []
    for revision in revisions:
        created = sec(revision.created)
        t = revision.trigger
        begin = ended_at(t.uid, created) if t is not None and t.uid else 0.0
        title = f"planner: revision {revision.number} ({revision.reason_code}"
        title += ", rejected)" if not revision.accepted else ")"
        if t is not None:
            title += f" after {t.capability} #{t.number} ({t.status}{' ' + t.error_code if t.error_code else ''})"
        bars.append(_Bar("Planner", min(begin, created), created, COLOURS["planner" if revision.accepted else
                                                                           "planner_rejected"],
                         title, f"#revision-{revision.number}", "planner", failed=not revision.accepted))
    for approval in approvals:
        start = sec(approval.requested)
        stop = sec(approval.decided) if approval.decided is not None else last
        what = f"step {approval.step_key}" if approval.kind == "step" and approval.step_key is not None else "plan"
        bars.append(_Bar("Approvals", start, stop, COLOURS.get(approval.state, COLOURS["pending"]),
                         f"approval of {what}: {approval.state}, waited {stop - start:.0f} s", "#approvals-heading",
                         f"approval {approval.state}", failed=approval.state in ("rejected", "expired")))
    return bars


# -- columns the database merged ----------------------------------------------------------------

def render_merged(frame: RunFrame, merged: MergedAttempts, revisions: list[RevisionRow],
                  approvals: list[ApprovalRow]) -> str:
    """The columns the database merged (titled by their first attempt, the earliest recorded), and the
    notable attempts (the stop trigger, the first repeats with the attempt each repeats) as bars of
    their own on top of them."""
    details = merged.attempts
    origin_s, last_s = details[0].origin, details[0].last
    span = max(last_s - origin_s, 0.001)
    capabilities: list[str] = []
    for row in details:  # every capability's first attempt is here: it is first of its column, or notable
        if row.capability not in capabilities:
            capabilities.append(row.capability)
    shown_caps = capabilities[:MAX_CAPABILITY_LANES]
    if len(capabilities) > MAX_CAPABILITY_LANES:
        shown_caps.append(OTHER_LANE)

    def lane_of(capability: str) -> str:
        return capability if capability in shown_caps else OTHER_LANE

    columns = _merged_columns(merged, lane_of)
    bars, connectors = _notable_bars(frame, details, columns, origin_s, lane_of)
    for column in columns.values():
        column.classes = {"repeated"} if column.repeated else set()
    ended_at = {r.trigger.uid: max(0.0, r.trigger.ended - origin_s) for r in revisions if r.trigger is not None}
    bars += _planner_and_approval_bars(revisions, approvals, origin_s, last_s - origin_s,
                                       lambda uid, created: ended_at.get(uid, created))
    lanes = [lane for lane in ("Planner", "Approvals") if any(b.lane == lane for b in bars)]
    lanes += ["Waits"] if any(key[0] == "Waits" for key in columns) else []
    total = sum(group.attempts for group in merged.columns)
    return _svg(frame, bars, lanes + shown_caps, connectors, span, _stop_at(frame, origin_s), total, columns=columns)


def _merged_columns(merged: MergedAttempts, lane_of: Callable[[str], str]) -> dict[tuple[str, int], _Column]:
    """(lane, x) -> the column: the database's groups, those of folded lanes added up, each titled by its
    earliest first attempt; a group after waits adds a column to the Waits lane too."""
    by_id = {row.id: row for row in merged.attempts}
    columns: dict[tuple[str, int], _Column] = {}
    firsts: dict[tuple[str, int], tuple[float, int]] = {}

    def add(key, count, failed, repeated, first, title):
        column = columns.setdefault(key, _Column())
        column.count += count
        column.failed += failed
        column.repeated += repeated
        order = (first.started, first.id)
        if key not in firsts or order < firsts[key]:  # several groups in a column: the earliest first stays first
            firsts[key] = order
            column.first_title, column.href = title, _attempt_href(first.uid)

    for group in merged.columns:
        pixel = int(group.column) * MERGE_PX
        first = by_id[group.first_id]
        add((lane_of(group.capability), pixel), group.attempts, group.failed, group.repeated, first, _title(first))
        if group.after_wait:
            label = attempt_label(first.revision, first.step_key, first.number)
            what = "backoff before retry" if first.kind == "retry" else "poll interval"
            gap = max(0.0, first.started - first.previous_end) if first.previous_end is not None else 0.0
            add(("Waits", pixel), group.attempts, 0, 0, first, f"{what} {label}: {gap:.1f} s")
    return columns


def _notable_bars(frame: RunFrame, details: list[ColumnAttempt], columns: dict[tuple[str, int], _Column],
                  origin_s: float, lane_of: Callable[[str], str]) -> tuple[list[_Bar], list[_Connector]]:
    """The notable attempts as bars of their own, taken out of the counts of the columns they fall in."""
    bars: list[_Bar] = []
    connectors: list[_Connector] = []
    for row in details:
        uid, status, capability = row.uid, row.status, row.capability
        if not (row.repeated or uid == frame.stop_uid):
            continue  # a column's first attempt only
        # A notable attempt is a bar of its own: the column it falls in no longer counts it.
        key = (lane_of(capability), int(row.column) * MERGE_PX)
        column = columns[key]
        column.count -= 1
        column.failed -= status != "ok"
        column.repeated -= bool(row.repeated)
        if not column.count:
            del columns[key]
        label = attempt_label(row.revision, row.step_key, row.number)
        s, e = max(0.0, row.started - origin_s), max(0.0, row.ended - origin_s)
        title, classes = _title(row), ["attempt", status]
        if row.repeated and row.earlier_label is not None:
            title += f"; repeats {row.earlier_label} without progress"
            classes.append("repeated")
            if len(connectors) < MAX_CONNECTORS:
                connectors.append((capability, max(0.0, (row.earlier_started or 0.0) - origin_s), s,
                                   f"{label} repeats {row.earlier_label}"))
        if uid == frame.stop_uid:
            title = _mark_stop(frame, title, classes)
        bars.append(_Bar(lane_of(capability), s, e, COLOURS.get(status, COLOURS["ok"]), title, _attempt_href(uid),
                         " ".join(classes), failed=status != "ok", always=True))
    return bars, connectors


# -- the SVG ------------------------------------------------------------------------------------

def _svg(frame: RunFrame, bars: list[_Bar], lanes: list[str], connectors: list[_Connector], span: float,
         stop_at: float | None, attempt_count: int, columns: dict[tuple[str, int], _Column] | None = None) -> str:
    """`columns`: those the database merged, if any (bars that land on a taken pixel join them)."""
    plot_w = WIDTH - LEFT - RIGHT
    height = TOP + LANE_H * len(lanes) + AXIS_H
    scale = plot_w / span
    lane_y = {lane: TOP + i * LANE_H for i, lane in enumerate(lanes)}
    summary = (f"{attempt_count} attempts over {span:.1f} s in {len(lanes)} lanes; "
               + ("stopped: " + frame.stop_reason if frame.stop_reason else "still running"))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" role="group" '
             f'aria-labelledby="timeline-title timeline-desc" class="timeline-svg">'
             f'<title id="timeline-title">Timeline of run {frame.run_id}</title>'
             f'<desc id="timeline-desc">{escape(summary)}</desc>']
    parts += _lanes_and_axis(lane_y, len(lanes), span)
    columns = columns if columns is not None else {}
    drawn, on_top = _bars(bars, lane_y, scale, columns)
    parts += drawn + _columns(columns, lane_y) + on_top
    for lane, a, b, title in connectors:
        if lane not in lane_y:
            continue
        x1, x2, y = LEFT + a * scale, LEFT + b * scale, lane_y[lane] + 4
        mid = (x1 + x2) / 2
        parts.append(f'<path d="M{x1:.1f} {y} Q{mid:.1f} {y - 14} {x2:.1f} {y}" class="repeat-link">'
                     f'<title>{escape(title)}</title></path>')
    if stop_at is not None:
        parts.append(_stop_line(frame, LEFT + stop_at * scale, len(lanes)))
    parts.append("</svg>")
    return "".join(parts)


def _lanes_and_axis(lane_y: dict[str, int], lane_count: int, span: float) -> list[str]:
    plot_w = WIDTH - LEFT - RIGHT
    parts = []
    for lane, y in lane_y.items():
        parts.append(f'<rect x="{LEFT}" y="{y}" width="{plot_w}" height="{LANE_H}" class="lane-bg"/>')
        parts.append(f'<text x="{LEFT - 8}" y="{y + LANE_H * 0.66:.1f}" text-anchor="end" class="lane-label">'
                     f'{escape(lane)}</text>')
    for k in range(6):
        x = LEFT + plot_w * k / 5
        y = TOP + LANE_H * lane_count
        parts.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{y + 4}" class="gridline"/>')
        parts.append(f'<text x="{x:.1f}" y="{y + 18}" text-anchor="{"start" if k == 0 else "end" if k == 5 else "middle"}">'
                     f'{_seconds(span * k / 5)}</text>')
    return parts


def _bars(bars: list[_Bar], lane_y: dict[str, int], scale: float,
          columns: dict[tuple[str, int], _Column]) -> tuple[list[str], list[str]]:
    """(the bars drawn in place, those drawn on top of the columns); a bar under a pixel wide, or on a
    pixel its lane already took, joins that pixel's column instead."""
    parts: list[str] = []
    on_top: list[str] = []
    taken: set[tuple[str, int]] = set()
    # A bar is drawn within the axis: clocks that disagree (a run recorded as ending before it was
    # created) would otherwise make it millions of pixels wide, and its pixels a slow loop.
    right = WIDTH - RIGHT
    for bar in sorted(bars, key=lambda b: b.start):
        if bar.lane not in lane_y:
            continue
        if bar.always:
            x = min(LEFT + bar.start * scale, right - 1.0)
            w = min(max((bar.end - bar.start) * scale, 1.0), right - x)
            on_top.append(f'<a href="{escape(bar.href)}" class="bar {escape(bar.classes)}">'
                          f'<rect x="{x:.1f}" y="{lane_y[bar.lane] + 4}" width="{w:.1f}" height="{LANE_H - 8}" '
                          f'fill="{bar.colour}"><title>{escape(bar.title)}</title></rect></a>')
            continue
        x = min(LEFT + bar.start * scale, right)
        w = min((bar.end - bar.start) * scale, right - x)
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
    return parts, on_top


def _columns(columns: dict[tuple[str, int], _Column], lane_y: dict[str, int]) -> list[str]:
    parts = []
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
    return parts


def _stop_line(frame: RunFrame, x: float, lane_count: int) -> str:
    completed = frame.stop_reason == StopKind.COMPLETED
    cls = "stop-line completed" if completed else "stop-line"
    label = RunStatus.COMPLETED if completed else RunStatus.STOPPED
    return (f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + LANE_H * lane_count}" class="{cls}">'
            f'<title>{escape(label)}: {escape(frame.stop_reason)}</title></line>')


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

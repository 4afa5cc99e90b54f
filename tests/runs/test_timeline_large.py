"""The timeline of a run with more attempts than runs.trace.timeline.AGGREGATE_ABOVE: the database merges
the columns, the notable attempts are still named and linked, and the page costs the same queries."""
import re
from datetime import timedelta
from itertools import pairwise

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.models import Attempt, Decision, PlanRevision, Run
from runs.trace import timeline, timeline_svg

N = 120
COLUMN = re.compile(r'<a href="\?attempt=(\w+)#attempt-\1" class="bar aggregate[^"]*"><rect x="(\d+)" y="(\d+)" '
                    r'width="[\d.]+" height="\d+" fill="[^"]+"><title>([^<]*)</title>')
BAR = re.compile(r'<a href="\?attempt=(\w+)#attempt-\1" class="bar attempt ([^"]*)"><rect x="([\d.]+)" y="(\d+)" '
                 r'width="[\d.]+" height="\d+" fill="[^"]+"><title>([^<]*)</title>')
COUNTS = re.compile(r"^(\d+) items here \((\d+) failed(?:, (\d+) repeated)?\); first: ")


def svg_of(response):
    body = response.content.decode()
    svg = body[body.index('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1000'):]
    return svg[:svg.index("</svg>")]


def columns_of(svg):
    """(lane y, column x) -> (attempts, failed, repeated, link uid, title) of every merged column."""
    found = {}
    for uid, x, y, title in COLUMN.findall(svg):
        title = title.replace("&#x27;", "'")
        m = COUNTS.match(title)
        if m:
            counts = (int(m[1]), int(m[2]), int(m[3] or 0))
        else:  # a column of one attempt has that attempt's title
            counts = (1, int(": retryable" in title), int("; repeats " in title))
        found[(int(y), int(x))] = (*counts, uid, title)
    return found


@pytest.fixture
def build_run(make_run, make_revision, make_step):
    """n attempts, 0.02 s each, every 0.05 s over two steps in two lanes; 1 in 4 of s1 fails the same way
    (each after the first a repeat without progress); the last failure stops the run."""
    def build(n):
        return _build(make_run, make_revision, make_step, n)

    return build


@pytest.fixture
def big_run(build_run):
    return build_run(N)


def _build(make_run, make_revision, make_step, n):
    t0 = timezone.now().replace(microsecond=0) - timedelta(seconds=200)
    run = make_run(status="stopped", stop_reason="stalled", started_at=t0, finished_at=t0 + timedelta(seconds=100),
                   budgets={"max_tool_calls": 1000})
    rev = make_revision(run)
    PlanRevision.objects.filter(pk=rev.pk).update(created_at=t0 + timedelta(seconds=1))
    s1 = make_step(rev, index=0, capability="search_documents")
    s2 = make_step(rev, index=1, capability="get_ticket_status")
    rows, numbers, failures = [], {s1.pk: 0, s2.pk: 0}, 0
    for i in range(n):
        step = s1 if i % 2 == 0 else s2
        numbers[step.pk] += 1
        failed = step is s1 and i % 8 == 0
        at = t0 + timedelta(seconds=2 + i * 0.05)
        rows.append(Attempt(
            run=run, step=step, uid=f"r{run.pk}a{i:04d}", number=numbers[step.pk],
            kind=("call" if numbers[step.pk] == 1 else "retry" if step is s1 else "poll"),
            capability_name=step.capability_name, signature="s", signature_hash="fail" if failed else f"ok{i}",
            started_at=at, ended_at=at + timedelta(milliseconds=20), latency_s=0.02,
            status="retryable" if failed else "ok", error_code="timeout" if failed else "",
            repeated_without_progress=failed and failures > 0, trace_id=run.trace_id, span_id=f"s{i}"))
        failures += failed
    Attempt.objects.bulk_create(rows)
    stop = Attempt.objects.filter(run=run, status="retryable").order_by("-started_at").first()
    Decision.objects.create(run=run, attempt=stop, decision="stop_stalled", reason="stalled", usage={})
    Run.objects.filter(pk=run.pk).update(stop_attempt=stop)
    return run


@pytest.mark.django_db
def test_a_run_above_the_threshold_is_merged_by_the_database(client_for, viewer, big_run, build_run, monkeypatch):
    client = client_for(viewer)
    url = f"/runs/{big_run.pk}/"
    exact = svg_of(client.get(url))  # every attempt read and merged in Python (N < 2,000)
    monkeypatch.setattr(timeline, "AGGREGATE_ABOVE", 50)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    merged = svg_of(response)
    assert merged != exact and f"{N} attempts over 100.0 s in 4 lanes" in merged

    # The repeats and the stop are bars of their own, named and linked, with the arcs to what they repeat.
    failures = list(Attempt.objects.filter(run=big_run, status="retryable").order_by("started_at"))
    notable = {uid: (classes, float(x), int(y), title) for uid, classes, x, y, title in BAR.findall(merged)}
    assert set(notable) == {a.uid for a in failures[1:]}
    for earlier, repeat in pairwise(failures):
        classes, _, _, title = notable[repeat.uid]
        assert "repeated" in classes.split()
        assert f"r1·s1#{repeat.number} retry search_documents: retryable timeout; repeats r1·s1#{earlier.number} " \
               f"without progress" in title
        assert f"<title>r1·s1#{repeat.number} repeats r1·s1#{earlier.number}</title>" in merged
    assert merged.count('class="repeat-link"') == len(failures) - 1
    stop = failures[-1]
    assert "stop" in notable[stop.uid][0].split() and notable[stop.uid][3].endswith("; stopped the run")
    assert 'class="stop-line"' in merged and "planner: revision 1 (initial)" in merged

    # Every other attempt is counted in the column the renderer merges it into (all bars < 1 px here).
    exact_columns, merged_columns = columns_of(exact), columns_of(merged)
    attempt_lanes = {y for (y, _) in exact_columns if y >= timeline_svg.TOP + 2 * timeline_svg.LANE_H}  # below Planner, Waits
    expected = {key: list(value[:3]) for key, value in exact_columns.items() if key[0] in attempt_lanes}
    for _classes, x, y, _ in notable.values():
        pixel = int(x)
        column = expected[(y, pixel - pixel % timeline_svg.MERGE_PX)]
        column[0] -= 1
        column[1] -= 1
        column[2] -= 1
    expected = {key: tuple(value) for key, value in expected.items() if value[0]}
    got = {key: value[:3] for key, value in merged_columns.items() if key[0] in attempt_lanes}
    assert got == expected
    assert sum(count for count, _, _ in got.values()) == N - len(notable)
    assert any(count > 1 for count, _, _ in got.values())  # really merged
    # A column with no notable attempt in it is drawn exactly as before: its link, its title, its rectangle.
    same = [key for key, value in got.items() if exact_columns[key][:3] == value]
    assert len(same) > 10
    for key in same:
        assert merged_columns[key][3:] == exact_columns[key][3:]
    first = Attempt.objects.filter(run=big_run).order_by("started_at").first()
    assert f'<a href="?attempt={first.uid}#attempt-{first.uid}" class="bar aggregate' in merged
    assert "first: r1·s1#1 call search_documents: retryable timeout" in merged

    # The waits (every retry and poll after a step's first attempt) are counted in the Waits lane.
    waits_y = timeline_svg.TOP + timeline_svg.LANE_H + 4  # the rectangles sit 4 px into their lane
    assert sum(v[0] for (y, _), v in merged_columns.items() if y == waits_y) == N - 2
    assert re.search(r"first: (poll interval r1·s2|backoff before retry r1·s1)#\d+: 0\.\d s", merged)

    # The same queries as a small run's page (20 attempts, under the threshold: every one read).
    small = build_run(20)
    with CaptureQueriesContext(connection) as small_queries:
        small_svg = svg_of(client.get(f"/runs/{small.pk}/"))
    assert "20 attempts over" in small_svg
    assert len(queries) == len(small_queries)


@pytest.mark.django_db
def test_lanes_past_the_limit_fold_and_connectors_stay_capped(client_for, viewer, big_run, monkeypatch):
    monkeypatch.setattr(timeline, "AGGREGATE_ABOVE", 50)
    monkeypatch.setattr(timeline_svg, "MAX_CAPABILITY_LANES", 1)
    monkeypatch.setattr(timeline_svg, "MAX_CONNECTORS", 3)
    merged = svg_of(client_for(viewer).get(f"/runs/{big_run.pk}/"))
    assert ">other capabilities</text>" in merged and ">get_ticket_status</text>" not in merged
    assert merged.count('class="repeat-link"') == 3
    columns = columns_of(merged)
    assert sum(v[0] for (y, _), v in columns.items() if y >= timeline_svg.TOP + 3 * timeline_svg.LANE_H) == N // 2

"""Keyset pagination of the runs list: every sort walks the whole list once, both ways."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core.pagination import InvalidCursor, capped_count, encode_cursor, keyset_page
from runs import selectors
from runs.web.views import SORT_CHOICES


@pytest.fixture
def many_runs(make_run):
    now = timezone.now()
    runs = []
    for i in range(23):
        finished = i % 3 != 0
        runs.append(make_run(goal=f"run-{i}", status="completed" if finished else "running",
                             created_at=now - timedelta(minutes=i), tool_calls=i % 4, tokens=(i * 7) % 5,
                             cost=(i % 3) / 10, finished_at=now - timedelta(minutes=i % 5) if finished else None))
    return runs


def _walk(sort: str, per_page: int):
    queryset = selectors.run_list(filters=selectors.RunFilters(sort=sort))
    ordering = selectors.run_ordering(sort)
    forward, page, numbers = [], keyset_page(queryset, ordering=ordering, per_page=per_page), []
    while True:
        forward += [r.pk for r in page.object_list]
        numbers.append(page.number)
        if not page.has_next:
            break
        page = keyset_page(queryset, ordering=ordering, per_page=per_page, after=page.next_cursor,
                           number=page.next_page_number)
    backward = []
    while page.has_previous:
        page = keyset_page(queryset, ordering=ordering, per_page=per_page, before=page.previous_cursor,
                           number=page.previous_page_number)
        backward = [r.pk for r in page.object_list] + backward
    return forward, backward, numbers, page


@pytest.mark.parametrize("sort", [key for key, _ in SORT_CHOICES])
def test_it_walks_every_sort_once_forward_and_back(many_runs, sort):
    expected = list(selectors.run_list(filters=selectors.RunFilters(sort=sort)).values_list("pk", flat=True))
    forward, backward, numbers, first = _walk(sort, per_page=5)
    assert forward == expected and len(set(forward)) == len(many_runs)
    assert numbers == [1, 2, 3, 4, 5]
    assert backward == expected[:20] and first.number == 1  # every page before the last (3 rows)
    if sort.lstrip("-") != "created":  # by finish time or usage: unfinished runs come last in either direction
        finished = {r.pk for r in many_runs if r.finished_at}
        assert set(forward[:len(finished)]) == finished


@pytest.mark.parametrize("sort,counter", [("tool_calls", "tool_calls"), ("-tool_calls", "tool_calls"),
                                          ("tokens", "tokens"), ("-tokens", "tokens"), ("cost", "cost"),
                                          ("-cost", "cost")])
def test_usage_sorts_order_finished_runs_by_their_counters_and_live_runs_last(make_run, sort, counter):
    """The usage sorts read Run.final_* (generated: the counter once the run has finished, NULL
    before), so that no index names a counter every pass changes (HOT updates of the run row)."""
    from runs.models import Run

    live = make_run(goal="live", status="running", tool_calls=50, tokens=5000, cost=5.0)
    small = make_run(goal="small", status="completed", tool_calls=1, tokens=100, cost=0.1)
    large = make_run(goal="large", status="stopped", tool_calls=9, tokens=900, cost=0.9)
    finished = [small.pk, large.pk] if not sort.startswith("-") else [large.pk, small.pk]
    assert list(selectors.run_list(filters=selectors.RunFilters(sort=sort)).values_list("pk", flat=True)) == \
        finished + [live.pk]
    forward, backward, _, _ = _walk(sort, per_page=1)
    assert forward == finished + [live.pk] and backward == finished  # back from the last page
    final = f"final_{counter}"
    assert getattr(Run.objects.get(pk=live.pk), final) is None
    assert getattr(Run.objects.get(pk=large.pk), final) == getattr(large, counter)
    # A later correction of a finished run's counter moves it; a live run gets its value as it stops.
    Run.objects.filter(pk=small.pk).update(**{counter: 10_000})
    Run.objects.filter(pk=live.pk).update(status="completed", stop_reason="completed", finished_at=timezone.now())
    assert getattr(Run.objects.get(pk=small.pk), final) == 10_000
    assert getattr(Run.objects.get(pk=live.pk), final) == getattr(live, counter)
    order = list(selectors.run_list(filters=selectors.RunFilters(sort=sort)).values_list("pk", flat=True))
    assert order == ([large.pk, live.pk, small.pk] if not sort.startswith("-") else [small.pk, live.pk, large.pk])


def test_page_numbers_without_a_cursor_are_served_by_offset(many_runs):
    queryset = selectors.run_list(filters=selectors.RunFilters())
    page = keyset_page(queryset, ordering=selectors.run_ordering("-created"), per_page=10, number=2)
    assert [r.goal for r in page.object_list] == [f"run-{i}" for i in range(10, 20)]
    assert page.has_previous and page.has_next and page.num_pages == 3
    last = keyset_page(queryset, ordering=selectors.run_ordering("-created"), per_page=10, number=99)
    assert last.number == 3 and len(last.object_list) == 3 and not last.has_next


def test_it_counts_exactly_up_to_the_cap_then_estimates_or_says_more(many_runs):
    from django.db import connection

    queryset = selectors.run_list(filters=selectors.RunFilters())
    assert capped_count(queryset, cap=23) == (23, True)
    count, exact = capped_count(queryset, cap=10)
    assert not exact
    assert (count is not None and count >= 11) if connection.vendor == "postgresql" else count is None


@pytest.mark.parametrize("cursor", ["garbage!", encode_cursor("not a date", 3), encode_cursor(None, 3),
                                    encode_cursor("2026-01-01T00:00:00+00:00", "x")])
def test_a_bad_cursor_is_a_clear_400(client_for, viewer, many_runs, cursor):
    with pytest.raises(InvalidCursor):
        keyset_page(selectors.run_list(filters=selectors.RunFilters()), ordering=selectors.run_ordering("-created"),
                    per_page=5, after=cursor)
    response = client_for(viewer).get("/runs/", {"after": cursor})
    assert response.status_code == 400
    assert b"Invalid page cursor" in response.content


def test_the_list_pages_by_cursor_with_filters_kept(client_for, viewer, many_runs, monkeypatch):
    monkeypatch.setattr(selectors, "RUNS_PER_PAGE", 10)
    client = client_for(viewer)
    body = client.get("/runs/", {"status": "completed", "sort": "-tool_calls"}).content.decode()
    assert "15 runs" in body
    seen = set()
    response = client.get("/runs/", {"sort": "created"})
    for number in (1, 2, 3):
        page = response.context["page"]
        assert page.number == number
        seen |= {r.pk for r in page.object_list}
        if page.has_next:
            response = client.get("/runs/", {"sort": "created", "after": page.next_cursor, "page": number + 1})
    assert len(seen) == 23


@pytest.mark.parametrize("page", ["abc", "-3", "0", "99999999999999999999999"])
def test_a_junk_page_number_is_never_an_error(client_for, viewer, many_runs, page):
    assert client_for(viewer).get("/runs/", {"page": page}).status_code == 200


def _goal_holds(digit: str):
    """A WalkFirst condition: the goal holds `digit` (indexed or not, the same rows)."""
    def apply(queryset, indexed):
        return queryset.filter(goal__contains=digit) if indexed else queryset.filter(goal__regex=digit)
    return apply


@pytest.mark.parametrize("walks", [(2,), (4, 50), (1_000,)])
@pytest.mark.parametrize("digit", ["1", "2", "9"])
def test_a_walk_first_reads_the_same_pages_as_the_condition_read_whole(many_runs, walks, digit):
    """Whether the walk fills the page (many matches) or falls back to the whole read (few), every page
    forward and back is the condition's; a count above the cap is an estimate, below it exact."""
    from core.pagination import WalkFirst

    ordering = selectors.run_ordering("-created")
    queryset = selectors.run_list(filters=selectors.RunFilters())
    walk_first = WalkFirst(_goal_holds(digit), order=ordering.order_by(), walks=walks)
    expected = list(queryset.filter(goal__contains=digit).order_by(*ordering.order_by()).values_list("pk", flat=True))
    page, seen = keyset_page(queryset, ordering=ordering, per_page=2, walk_first=walk_first), []
    assert page.count == len(expected) and page.count_exact
    while True:
        seen += [r.pk for r in page.object_list]
        if not page.has_next:
            break
        page = keyset_page(queryset, ordering=ordering, per_page=2, after=page.next_cursor, walk_first=walk_first)
    assert seen == expected
    back = []
    while page.has_previous:
        page = keyset_page(queryset, ordering=ordering, per_page=2, before=page.previous_cursor, walk_first=walk_first)
        back = [r.pk for r in page.object_list] + back
    assert back == expected[:len(back)] and len(back) >= len(expected) - 2
    second = keyset_page(queryset, ordering=ordering, per_page=2, number=2, walk_first=walk_first)
    assert [r.pk for r in second.object_list] == (expected[2:4] if len(expected) > 2 else expected[:2])  # clamped


def test_a_walk_first_count_above_the_cap_is_told_from_the_walk(many_runs):
    from django.db import connection

    from core.pagination import WalkFirst

    ordering = selectors.run_ordering("-created")
    queryset = selectors.run_list(filters=selectors.RunFilters())
    walk_first = WalkFirst(_goal_holds("run"), order=ordering.order_by(), walks=(5,))
    count, exact = capped_count(queryset, 3, walk_first)
    assert not exact
    if connection.vendor == "postgresql":   # every walked row matched: the estimate is the list's planned size
        assert count is not None and count >= 4
    assert capped_count(queryset, 30, walk_first) == (23, True)

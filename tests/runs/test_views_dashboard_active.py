"""The actionable dashboard: active runs by burn, stops per capability, trends, and where each figure leads."""
from __future__ import annotations

from datetime import UTC, timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from django.utils import timezone

from runs import dashboard_active, rollup
from runs.models import Run


def links_in(body, fragment):
    import re

    hrefs = [href.replace("&amp;", "&") for href in re.findall(r'href="([^"]*)"', body)]
    return [href for href in hrefs if fragment in href]


@pytest.mark.django_db
class TestActiveRuns:
    def test_it_ranks_live_runs_by_the_most_used_budget(self, make_run):
        now = timezone.now()
        calm = make_run(status="running", goal="calm", tool_calls=1, budgets={"max_tool_calls": 100, "deadline_s": 600},
                        started_at=now - timedelta(seconds=10), deadline_at=now + timedelta(seconds=590))
        hot = make_run(status="awaiting_approval", goal="hot", tool_calls=9,
                       budgets={"max_tool_calls": 10, "deadline_s": 600}, started_at=now - timedelta(seconds=10),
                       deadline_at=now + timedelta(seconds=590))
        late = make_run(status="running", goal="late", budgets={"deadline_s": 100},
                        started_at=now - timedelta(seconds=95), deadline_at=now + timedelta(seconds=5))
        make_run(status="stopped", goal="finished", tool_calls=10, budgets={"max_tool_calls": 10})
        rows, total = dashboard_active.active_runs_by_burn(now=now)
        assert [r.run.pk for r in rows] == [late.pk, hot.pk, calm.pk] and total == 3
        assert rows[1].burns[0].label == "tool calls" and rows[1].burns[0].percent == 90
        assert rows[0].time_left == timedelta(seconds=5)

    def test_it_leaves_evaluation_runs_out_unless_asked(self, make_run):
        from evaluation.models import Evaluation, EvaluationSuite

        suite = EvaluationSuite.objects.create(name="s", tasks=[])
        evaluation = Evaluation.objects.create(suite=suite, started_by=make_run().owner)
        make_run(status="running", evaluation=evaluation)
        assert dashboard_active.active_runs_by_burn()[1] == 1
        assert dashboard_active.active_runs_by_burn(include_evaluations=True)[1] == 2


@pytest.mark.django_db
class TestStopsPerCapability:
    def test_it_puts_the_previous_period_beside_each_capability(self):
        current = [{"capability": "a", "stalls": 3, "budget_stops": 0}, {"capability": "b", "stalls": 1, "budget_stops": 1}]
        dashboard_active.add_previous_stops(current, [{"capability": "a", "stalls": 1, "budget_stops": 2}])
        assert (current[0]["stalls_before"], current[0]["budget_stops_before"]) == (1, 2)
        assert (current[1]["stalls_before"], current[1]["budget_stops_before"]) == (0, 0)

    def test_it_counts_stalls_and_budget_stops_by_the_stopping_attempts_capability(
            self, make_run, make_revision, make_step, make_attempt):
        now = timezone.now()
        for reason, capability in (("stalled", "search_documents"), ("stalled", "search_documents"),
                                   ("budget_exhausted:retries", "get_document"), ("completed", "get_document")):
            run = make_run(status="completed" if reason == "completed" else "stopped", stop_reason=reason,
                           finished_at=now - timedelta(minutes=5))
            attempt = make_attempt(make_step(make_revision(run), capability=capability))
            Run.objects.filter(pk=run.pk).update(stop_attempt=attempt)
        make_run(status="stopped", stop_reason="stalled", finished_at=now - timedelta(minutes=5))  # no attempt
        rollup.rebuild_stops()  # make_run counted each run before its stop attempt was set
        rows = dashboard_active.stops_per_capability(start=now - timedelta(hours=1), end=now)
        by_name = {r["capability"]: r for r in rows}
        assert by_name["search_documents"]["stalls"] == 2 and by_name["get_document"]["budget_stops"] == 1
        assert by_name["get_document"]["budget_list"] == [("retries", 1)]
        assert by_name["(the planner)"]["stalls"] == 1
        query = parse_qs(urlparse(by_name["search_documents"]["stalls_url"]).query)
        assert query["stop_reason"] == ["stalled"] and query["stop_capability"] == ["search_documents"]


@pytest.mark.django_db
class TestDashboardPage:
    def test_an_unknown_window_is_a_400_that_says_which_exist(self, client_for, viewer):
        response = client_for(viewer).get("/runs/dashboard/", {"window": "2y"})
        assert response.status_code == 400
        assert "Unknown time window “2y”: choose one of 1h, 24h, 7d, 30d." in response.content.decode()

    def test_every_card_and_row_leads_to_the_filtered_list_of_its_runs(
            self, client_for, viewer, make_run, make_revision, make_step, make_attempt):
        now = timezone.now()
        stalled = make_run(status="stopped", stop_reason="stalled", finished_at=now - timedelta(minutes=5))
        attempt = make_attempt(make_step(make_revision(stalled)), started_at=now - timedelta(minutes=6))
        Run.objects.filter(pk=stalled.pk).update(stop_attempt=attempt)
        rollup.rebuild_stops()  # make_run counted it before its stop attempt was set
        make_run(status="completed", finished_at=now - timedelta(minutes=5))
        client = client_for(viewer)
        body = client.get("/runs/dashboard/").content.decode()
        stall_link = [h for h in links_in(body, "stop_reason=stalled") if "stop_capability" not in h][0]
        listed = client.get(stall_link).content.decode()
        assert f'id="run-{stalled.pk}"' in listed and listed.count('<tr id="run-') == 1
        capability_link = links_in(body, "stop_capability=search_documents")[0]
        assert client.get(capability_link).content.decode().count('<tr id="run-') == 1
        assert links_in(body, "capability=search_documents&created_from=")
        assert 'vs the previous period' in body and "(was 0)" in body
        assert '<a href="/runs/?created_from=' in body  # the outcome chart's bars


@pytest.mark.django_db
class TestRunListFilters:
    def test_evaluation_runs_are_hidden_until_shown_and_the_choice_is_remembered(self, client_for, viewer, make_run):
        from evaluation.models import Evaluation, EvaluationSuite

        suite = EvaluationSuite.objects.create(name="s", tasks=[])
        evaluation = Evaluation.objects.create(suite=suite, started_by=viewer)
        make_run(goal="Operations run")
        make_run(goal="Evaluation task run", evaluation=evaluation)
        client = client_for(viewer)
        body = client.get("/runs/").content.decode()
        assert "Operations run" in body and "Evaluation task run" not in body and "show them" in body
        assert "Evaluation task run" in client.get("/runs/", {"evaluation_runs": "show"}).content.decode()
        assert "Evaluation task run" in client.get("/runs/").content.decode()  # remembered
        only = client.get("/runs/", {"evaluation_runs": "only"}).content.decode()
        assert "Operations run" not in only

    def test_it_filters_by_stop_kind_stop_capability_finished_window_and_repeats(
            self, client_for, viewer, make_run, make_revision, make_step, make_attempt):
        now = timezone.now()
        budget = make_run(goal="budget stop", status="stopped", stop_reason="budget_exhausted:tool_calls",
                          finished_at=now - timedelta(hours=2))
        attempt = make_attempt(make_step(make_revision(budget), capability="get_document"))
        Run.objects.filter(pk=budget.pk).update(stop_attempt=attempt)
        make_run(goal="old stall", status="stopped", stop_reason="stalled", finished_at=now - timedelta(days=2),
                 repeated_attempts=2)
        make_run(goal="still going", status="awaiting_approval")
        client = client_for(viewer)

        def goals(**params):
            body = client.get("/runs/", params).content.decode()
            return {g for g in ("budget stop", "old stall", "still going") if g in body}

        assert goals(stop_kind="budget_exhausted") == {"budget stop"}
        assert goals(stop_capability="get_document") == {"budget stop"}
        assert goals(stop_capability="(none)", status="finished") == {"old stall"}
        since = timezone.localtime(now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")
        assert goals(finished_from=since) == {"budget stop"}
        assert goals(repeated="on") == {"old stall"}
        assert goals(status="active") == {"still going"}


def test_an_upper_bound_rounds_up_to_the_next_second():
    from datetime import datetime

    moment = datetime(2026, 12, 1, 15, 0, 5, 500_000, tzinfo=UTC)
    assert dashboard_active.local_param(moment).endswith(":05")
    assert dashboard_active.local_param(moment, upper=True).endswith(":06")
    assert dashboard_active.local_param(moment.replace(microsecond=0), upper=True).endswith(":05")


def test_a_bad_window_is_a_400_page_that_says_what_is_wrong(client_for, viewer):
    response = client_for(viewer).get("/runs/dashboard/?window=3y")
    assert response.status_code == 400
    body = response.content.decode()
    assert "<title>Bad request" in body and "Not allowed" not in body
    assert "Unknown time window “3y”" in body

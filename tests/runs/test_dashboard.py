"""The dashboard: numbers on a small known dataset, charts, empty states, bounded queries."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.dashboard import periods as dashboard
from runs.dashboard import rollup
from runs.models import Approval


@pytest.fixture
def known_dataset(make_run, make_revision, make_step, make_attempt, make_approval, operator):
    now = timezone.now()
    finished = [("completed", "completed"), ("stopped", "stalled"), ("stopped", "budget_exhausted:deadline"),
                ("stopped", "budget_exhausted:deadline"), ("stopped", "budget_exhausted:tool_calls")]
    runs = [make_run(status=status, stop_reason=reason, created_at=now - timedelta(hours=2),
                     finished_at=now - timedelta(hours=1)) for status, reason in finished]
    make_run(status="running", created_at=now - timedelta(minutes=30))
    # Outside a 24 h window: counted by no number below.
    make_run(status="stopped", stop_reason="stalled", created_at=now - timedelta(days=3),
             finished_at=now - timedelta(days=3))
    rev = make_revision(runs[1])
    search = make_step(rev, index=0)
    for n in range(1, 11):
        make_attempt(search, number=n, latency_s=n / 10, started_at=now - timedelta(minutes=90),
                     status="retryable" if n in (3, 4) else "ok", repeated_without_progress=n == 4)
    ticket = make_step(rev, index=1, key="s2", capability="create_ticket")
    make_attempt(ticket, latency_s=2.0, started_at=now - timedelta(minutes=80))
    old = make_step(make_revision(runs[0]), index=0)
    make_attempt(old, latency_s=50.0, started_at=now - timedelta(days=2))
    # Approvals: one waiting, three decided after 60 s, 120 s and 600 s.
    waiting_run = make_run(status="awaiting_approval")
    wrev = make_revision(waiting_run)
    make_approval(waiting_run, revision=wrev, step=make_step(wrev))
    for i, wait in enumerate((60, 120, 600)):
        run = runs[i]
        r = make_revision(run, number=9)
        approval = make_approval(run, revision=r, step=make_step(r), state="approved", decided_by=operator,
                                 decided_at=now - timedelta(minutes=30))
        Approval.objects.filter(pk=approval.pk).update(requested_at=now - timedelta(minutes=30, seconds=wait))
    # Rows written by hand, not through runs.services: count them as the services would have.
    rollup.rebuild()
    return now


class TestDashboardNumbers:
    def test_it_computes_rates_over_finished_runs(self, known_dataset):
        data = dashboard.dashboard(window_key="24h", now=known_dataset)
        assert data["finished_total"] == 5
        assert data["stall_rate"] == pytest.approx(1 / 5)
        assert data["budget_stop_rate"] == pytest.approx(3 / 5)
        assert data["budget_stops"] == [("deadline", 2), ("tool_calls", 1)]
        assert data["runs_created"] == 5 + 1  # not the old one, nor those created after `now`

    def test_it_counts_outcomes_and_stop_reasons_per_bucket(self, known_dataset):
        data = dashboard.dashboard(window_key="24h", now=known_dataset)
        assert len(data["labels"]) == 24
        assert sum(data["outcomes"]["stopped"]) == 4 and sum(data["outcomes"]["completed"]) == 1
        assert sum(data["stop_reasons"]["budget_exhausted"]) == 3
        assert sum(data["stop_reasons"]["stalled"]) == 1
        assert "cancelled" not in data["stop_reasons"]

    def test_it_computes_repeated_rate_errors_and_latency_percentiles(self, known_dataset):
        data = dashboard.dashboard(window_key="24h", now=known_dataset)
        assert data["attempts_total"] == 11
        assert data["repeated_rate"] == pytest.approx(1 / 11)
        search, ticket = data["capabilities"]
        assert search["capability_name"] == "search_documents" and search["calls"] == 10
        assert search["errors"] == 2 and search["error_rate"] == pytest.approx(0.2)
        assert search["p50"] == pytest.approx(0.5, abs=0.06)  # nearest rank 0.5; percentile_cont 0.55
        assert search["p95"] == pytest.approx(1.0, abs=0.06)
        assert ticket["p50"] == ticket["p95"] == pytest.approx(2.0)

    def test_it_reports_approvals_waiting_and_time_to_decision(self, known_dataset):
        data = dashboard.dashboard(window_key="24h", now=known_dataset)
        assert data["approvals_waiting"] == 1
        assert data["approvals_decided"] == 3
        assert data["decision_median"].total_seconds() == pytest.approx(120, abs=1)
        assert data["decision_avg"].total_seconds() == pytest.approx(260, abs=1)

    def test_it_widens_with_the_window(self, known_dataset):
        data = dashboard.dashboard(window_key="7d", now=known_dataset)
        assert data["finished_total"] == 6 and data["attempts_total"] == 12
        assert len(data["labels"]) == 28

    def test_it_leaves_evaluation_runs_out(self, known_dataset, operator, make_run):
        from evaluation.models import Evaluation, EvaluationSuite

        suite = EvaluationSuite.objects.create(name="s", tasks=[])
        evaluation = Evaluation.objects.create(suite=suite, started_by=operator)
        make_run(status="stopped", stop_reason="stalled", evaluation=evaluation)
        assert dashboard.dashboard(window_key="24h", now=timezone.now())["finished_total"] == 5

    def test_it_falls_back_to_24h_for_an_unknown_window(self, db):
        assert dashboard.dashboard(window_key="forever")["window"].key == "24h"


class TestDashboardView:
    url = "/runs/dashboard/"

    def test_it_redirects_anonymous_users_to_login(self, client, db):
        response = client.get(self.url)
        assert response.status_code == 302 and response["Location"].startswith("/login/")

    def test_it_refuses_users_without_view_permission(self, client_for, nobody):
        assert client_for(nobody).get(self.url).status_code == 403

    def test_it_shows_clear_empty_states(self, client_for, viewer):
        body = client_for(viewer).get(self.url).content.decode()
        assert "No runs were created in this window." in body
        assert "No runs finished in this window." in body
        assert "No capability was called in this window." in body

    def test_it_renders_charts_and_numbers(self, client_for, viewer, known_dataset):
        body = client_for(viewer).get(self.url, {"window": "24h"}).content.decode()
        assert body.count("<svg class=\"swatch\"") < body.count("<svg")  # legend swatches are SVG too
        # Three charts; their bars are links to the runs behind them, so each is a group of links.
        assert body.count('class="bar-chart"') == 3 and body.count('role="group"') == 3
        assert "<title>Runs stopped per exhausted budget</title>" in body
        assert "60.0 %" in body  # budget-stop rate
        assert "20.0 %" in body  # stall rate
        assert "search_documents" in body
        assert "500 ms" in body or "550 ms" in body  # p50: nearest rank (SQLite) or interpolated (PostgreSQL)

    def test_it_swaps_only_the_body_for_htmx(self, client_for, viewer, known_dataset):
        response = client_for(viewer).get(self.url, {"window": "1h"}, headers={"HX-Request": "true"})
        body = response.content.decode()
        assert body.lstrip().startswith('<div id="dashboard-body">') and "<html" not in body
        assert 'aria-current="true">Last hour' in body

    def test_it_escapes_capability_names_in_charts(self, db):
        from core.charts import bars, stacked_bars

        svg = bars(title="t<script>", items=[("<b>x</b>", 1)], x_label="n")
        assert "<b>x</b>" not in svg and "&lt;b&gt;x&lt;/b&gt;" in svg and "t<script>" not in svg
        svg = stacked_bars(title="t", labels=["<i>"], series={"<s>": [1]}, y_label="y", x_label="x")
        assert "<i>" not in svg and "<s>" not in svg

    @pytest.mark.parametrize("top, axis", [(0, 4), (1, 4), (3, 4), (7, 8), (100, 100), (0.5, 0.8), (0.05, 0.08)])
    def test_the_y_axis_ends_on_a_round_figure_whole_for_counts_finer_for_shares(self, top, axis):
        from core.charts import _nice_max

        assert _nice_max(top) == pytest.approx(axis)

    @pytest.mark.parametrize("scale", [1, 40])
    def test_it_issues_a_bounded_number_of_queries(self, client_for, viewer, make_run, make_revision, make_step,
                                                   make_attempt, scale, django_assert_max_num_queries):
        for i in range(scale):
            run = make_run(status="stopped", stop_reason="budget_exhausted:tokens" if i % 2 else "stalled")
            step = make_step(make_revision(run), capability="search_documents" if i % 3 else "create_ticket")
            make_attempt(step, latency_s=i / 10)
        client = client_for(viewer)
        # + active runs, stops per capability (this period: the rollup and the current hour's runs; the
        # previous one: the rollup), the previous period's figures (read as the window is: the rollup,
        # the runs and attempts still live), the session (evaluation-runs choice)
        with django_assert_max_num_queries(23):   # +1: the projects the user holds (the switcher)
            assert client.get(self.url).status_code == 200


@pytest.mark.parametrize("window_key,ago", [("1h", timedelta(minutes=7)), ("24h", timedelta(hours=5, minutes=10)),
                                            ("7d", timedelta(days=2, hours=3)), ("30d", timedelta(days=11))])
def test_a_run_lands_in_the_bucket_its_time_falls_in(make_run, window_key, ago):
    from django.utils import timezone

    from runs.dashboard.periods import WINDOWS, dashboard, window_bounds

    now = timezone.now()
    created = now - ago
    make_run(status="completed", created_at=created, finished_at=created)
    _, _, starts = window_bounds(WINDOWS[window_key], now)
    expected = int((created - starts[0]) / WINDOWS[window_key].bucket)
    data = dashboard(window_key=window_key, now=now)
    counts = data["outcomes"]["completed"]
    assert counts[expected] == 1 and sum(counts) == 1
    assert data["stop_reasons"]["completed"][expected] == 1

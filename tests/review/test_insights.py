"""Score dashboards (review.insights): spread and trend of one config's scores, overall and by capability,
planner, agent and a label's values; the page and GET /api/review/score-insights/ answer the same."""
from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.utils import timezone

from gateway.models import Agent, GatewaySession
from review import insights
from review.models import Score, ScoreConfig
from runs.models import Attempt, PlanRevision, Run, RunLabel, Step

pytestmark = pytest.mark.django_db

_seq = itertools.count(1)
URL = "/api/review/score-insights/"


@pytest.fixture
def make_run(operator):
    def make(*, planner="scripted", capabilities=(), labels=None):
        now = timezone.now()
        run = Run.objects.create(goal="g", completion={}, budgets={}, planner=planner, owner=operator,
                                 status="completed", stop_reason="completed", trace_id=f"t{next(_seq):031d}",
                                 started_at=now, finished_at=now, labels=labels or {})
        for key, value in (labels or {}).items():
            RunLabel.objects.create(run=run, key=key, value=value)
        if capabilities:
            revision = PlanRevision.objects.create(run=run, number=1, accepted=True, steps=[], reason_code="initial")
            for n, name in enumerate(capabilities):
                step = Step.objects.create(run=run, revision=revision, index=n, key=f"s{n}", capability_name=name,
                                           arguments={}, arguments_hash="h")
                Attempt.objects.create(run=run, step=step, uid=f"i{next(_seq):08d}", number=1, capability_name=name,
                                       signature=f"{name}:{{}}", signature_hash="sig", started_at=now, ended_at=now,
                                       latency_s=0, status="ok", trace_id=run.trace_id, span_id=f"{next(_seq):016d}")
        return run
    return make


def score(config, run, value, *, ago=timedelta(0), attempt=None, author="a"):
    row = Score.objects.create(config=config, run=run, attempt=attempt, source="person", author_key=f"user:{author}",
                               number=None if isinstance(value, str) else float(value),
                               category=value if isinstance(value, str) else "")
    Score.objects.filter(pk=row.pk).update(created_at=timezone.now() - ago)
    return row


@pytest.fixture
def helpful(db):
    return ScoreConfig.objects.create(name="helpful", kind="numeric", min_value=0, max_value=10)


def report(config, **kw):
    return insights.score_insights(config=config, now=timezone.now(), **kw)


class TestDistributions:
    def test_a_numeric_score_spreads_over_ten_bins_of_its_range_and_the_window_holds_only_its_own(
            self, helpful, make_run):
        run = make_run()
        for value in (0, 1, 9.5, 10):
            score(helpful, run, value, author=str(value))
        score(helpful, run, 5, ago=timedelta(days=9), author="old")   # before the 7-day window
        found = report(helpful, window_key="7d")
        assert found.overall.n == 4 and found.overall.mean == pytest.approx(5.125)
        assert found.bin_labels[0] == "0–1" and found.bin_labels[-1] == "9–10"
        assert found.overall.bins == [1, 1, 0, 0, 0, 0, 0, 0, 0, 2]   # the top of the range is in the last bin
        assert sum(found.overall.n_by_bucket) == 4 and found.overall.trend[-1] == pytest.approx(5.125)
        assert report(helpful, window_key="30d").overall.n == 5

    def test_a_categorical_score_follows_its_most_frequent_category_and_keeps_retired_ones(self, make_run):
        verdict = ScoreConfig.objects.create(name="verdict", kind="categorical", categories=["good", "bad", "meh"])
        run = make_run()
        for n, value in enumerate(["good", "good", "bad", "gone"]):
            score(verdict, run, value, author=str(n))
        found = report(verdict)
        assert found.headline == "good" and found.overall.mean == pytest.approx(0.5)
        assert found.bin_labels == ["good", "bad", "meh", insights.OTHER]
        assert found.overall.bins == [2, 1, 0, 1]

    def test_a_boolean_score_is_read_as_its_share_of_yes(self, make_run):
        safe = ScoreConfig.objects.create(name="safe", kind="boolean")
        run = make_run()
        for n, value in enumerate([True, True, True, False]):
            score(safe, run, value, author=str(n))
        found = report(safe)
        assert found.bin_labels == ["no", "yes"] and found.overall.bins == [1, 3]
        assert found.overall.mean == pytest.approx(0.75)

    def test_an_unbounded_numeric_score_spreads_over_what_was_written(self, make_run):
        cost = ScoreConfig.objects.create(name="spend", kind="numeric", min_value=0)
        run = make_run()
        for n, value in enumerate([0, 50, 100]):
            score(cost, run, value, author=str(n))
        found = report(cost)
        assert found.bin_labels[-1] == "90–100" and found.overall.bins[0] == 1 and found.overall.bins[-1] == 1

    def test_evaluation_runs_are_left_out(self, helpful, make_run, operator):
        from evaluation.models import Evaluation, EvaluationSuite

        suite = EvaluationSuite.objects.create(name="s", tasks=[])
        rehearsal = make_run()
        Run.objects.filter(pk=rehearsal.pk).update(
            evaluation=Evaluation.objects.create(suite=suite, started_by=operator))
        score(helpful, rehearsal, 1)
        score(helpful, make_run(), 9)
        found = report(helpful)
        assert found.overall.n == 1 and found.overall.mean == 9.0

    def test_no_scores_is_an_empty_report_not_an_error(self, helpful):
        found = report(helpful, group="planner")
        assert found.overall.n == 0 and found.overall.mean is None and found.groups == []


class TestGroups:
    def test_by_planner_each_group_has_its_own_figures(self, helpful, make_run):
        score(helpful, make_run(planner="scripted"), 2)
        score(helpful, make_run(planner="scripted"), 4)
        score(helpful, make_run(planner="llm"), 10)
        found = report(helpful, group="planner")
        assert [(g.key, g.n, g.mean) for g in found.groups] == [("scripted", 2, 3.0), ("llm", 1, 10.0)]
        assert found.overall.n == 3

    def test_by_capability_a_runs_score_counts_under_each_capability_it_called_and_once_overall(
            self, helpful, make_run):
        both = make_run(capabilities=["search", "fetch", "search"])
        score(helpful, both, 8)
        score(helpful, make_run(capabilities=["fetch"]), 2)
        score(helpful, make_run(), 5)                                      # no tool call
        on_attempt = make_run(capabilities=["search", "fetch"])
        score(helpful, on_attempt, 6, attempt=on_attempt.attempts.get(capability_name="search"))
        found = report(helpful, group="capability")
        groups = {g.label: (g.n, g.mean) for g in found.groups}
        assert groups == {"search": (2, 7.0), "fetch": (2, 5.0), "(no tool call)": (1, 5.0)}
        assert found.overlapping and found.overall.n == 4 and found.overall.mean == pytest.approx(21 / 4)

    def test_by_label_the_scores_split_by_the_keys_values(self, helpful, make_run):
        score(helpful, make_run(labels={"team": "payments"}), 3)
        score(helpful, make_run(labels={"team": "search"}), 9)
        score(helpful, make_run(labels={"env": "prod"}), 1)
        found = report(helpful, group="label", label_key="team")
        assert {g.label: g.n for g in found.groups} == {"payments": 1, "search": 1, "(no team)": 1}

    def test_by_agent_gateway_sessions_are_named_by_their_agent(self, helpful, make_run, operator):
        agent = Agent.objects.create(name="support-bot", owner=operator)
        run = make_run(planner="gateway")
        GatewaySession.objects.create(run=run, agent=agent)
        score(helpful, run, 7)
        score(helpful, make_run(), 1)
        found = report(helpful, group="agent")
        assert {g.label: g.n for g in found.groups} == {"support-bot": 1, "no agent": 1}

    def test_only_the_most_frequent_groups_are_listed_and_the_rest_counted(self, helpful, make_run, monkeypatch):
        monkeypatch.setattr(insights, "MAX_GROUPS", 2)
        for n, planner in enumerate(["llm", "llm", "llm", "rules", "rules", "scripted"]):
            score(helpful, make_run(planner=planner), 1, author=str(n))
        found = report(helpful, group="planner")
        assert [g.key for g in found.groups] == ["llm", "rules"] and found.more_groups == 1


class TestTheApi:
    def test_a_viewer_reads_the_report(self, api_for, viewer, helpful, make_run):
        score(helpful, make_run(planner="llm"), 4)
        response = api_for(viewer).get(URL, {"config": "helpful", "group": "planner", "window": "24h"})
        assert response.status_code == 200, response.content
        body = response.json()
        assert body["config"]["name"] == "helpful" and body["window"] == "24h" and len(body["bins"]) == 10
        assert body["overall"]["n"] == 1 and body["overall"]["mean"] == 4.0
        assert body["groups"][0]["key"] == "llm" and len(body["groups"][0]["trend"]) == len(body["bucket_starts"])

    @pytest.mark.parametrize("query, field", [
        ({}, "config"),
        ({"config": "nope"}, "config"),
        ({"config": "x" * 5000}, "config"),
        ({"config": "helpful", "group": "weather"}, "group"),
        ({"config": "helpful", "window": "1y"}, "window"),
        ({"config": "helpful", "group": "label"}, "label_key"),
        ({"config": "helpful", "group": "label", "label_key": "Not A Key!"}, "label_key"),
        ({"config": "helpful", "unknown": "1"}, "unknown"),
    ])
    def test_bad_queries_are_a_400_naming_the_field(self, api_for, viewer, helpful, query, field):
        response = api_for(viewer).get(URL, query)
        assert response.status_code == 400, response.content
        assert field in response.content.decode()

    def test_without_a_role_in_the_project_nothing_is_answered(self, api_for, helpful):
        from django.contrib.auth.models import User

        stranger = User.objects.create_user("stranger", password="x")
        assert api_for(stranger).get(URL, {"config": "helpful"}).status_code == 403


class TestThePage:
    def test_it_shows_the_distribution_the_trend_and_a_row_per_group(self, client_for, viewer, helpful, make_run):
        score(helpful, make_run(planner="llm"), 4)
        score(helpful, make_run(planner="rules"), 8)
        page = client_for(viewer).get("/review/scores/", {"config": "helpful", "group": "planner"})
        assert page.status_code == 200
        text = page.content.decode()
        assert "Distribution" in text and "Mean over time" in text and "By planner" in text
        assert ">llm<" in text and ">rules<" in text and "6.000" in text

    def test_it_opens_on_the_first_config_and_answers_htmx_with_its_body(self, client_for, viewer):
        page = client_for(viewer).get("/review/scores/", HTTP_HX_REQUEST="true")
        assert page.status_code == 200 and 'id="insights-body"' in page.content.decode()
        assert "<html" not in page.content.decode()

    @pytest.mark.parametrize("query", [{"group": "weather"}, {"config": "nope"}, {"group": "label"},
                                       {"window": "x" * 3000}])
    def test_a_bad_link_is_a_400_that_says_why(self, client_for, viewer, query):
        assert client_for(viewer).get("/review/scores/", query).status_code == 400

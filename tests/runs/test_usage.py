"""The usage rollup: written when a run finishes, equal to a direct count for every grouping and window,
and equal to a rebuild."""
from __future__ import annotations

import itertools
from collections import defaultdict
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.dashboard import periods, usage
from runs.models import Run, RunLabel, UsageCapabilityRollup, UsageLabelRollup, UsageRollup

pytestmark = pytest.mark.django_db


@pytest.fixture
def finish(db):
    """Finish a run as runs.services.run_finish does for its usage: the row, then the rollup."""
    def done(run, *, finished_at, status="completed", stop_reason="completed"):
        Run.objects.filter(pk=run.pk).update(status=status, stop_reason=stop_reason, finished_at=finished_at)
        usage.record_run_finished(run_id=run.pk)
        run.refresh_from_db()
        return run
    return done


@pytest.fixture
def usage_runs(make_run, make_revision, make_step, make_attempt, finish, operator, django_user_model):
    """Runs of two owners, two models and none, labels, an agent, several capabilities, over 40 days;
    some still live, one an evaluation's."""
    from evaluation.models import Evaluation, EvaluationSuite
    from gateway.models import Agent, GatewaySession

    other = django_user_model.objects.create_user("usage-other", password="x")
    agent = Agent.objects.create(name="support-bot", owner=operator)
    now = timezone.now()
    ages = [timedelta(minutes=m) for m in (2, 25, 61, 130, 600, 1500, 3000, 9000, 20000, 40000, 57000)]
    models = ["gpt-4o", "llama3", None]
    capabilities = ["search_documents", "create_ticket", "get_time"]
    runs = []
    for n, age in enumerate(itertools.chain(ages, ages[:5])):
        model = models[n % 3]
        planner = "llm" if model else ("gateway" if n % 5 == 0 else "rules")
        config = {"endpoint": "local", "model": model} if model else {}
        run = make_run(status="running", owner=other if n % 2 else operator, planner=planner,
                       planner_config=config, tokens=100 * (n + 1) + 7, cost=0.013 * (n + 1), tool_calls=n % 4,
                       created_at=now - age - timedelta(minutes=3))
        labels = {"team": ["payments", "search"][n % 2]} if n % 3 else {}
        if n % 4 == 0:
            labels["env"] = "prod"
        Run.objects.filter(pk=run.pk).update(labels=labels)
        RunLabel.objects.bulk_create([RunLabel(run=run, key=k, value=v) for k, v in labels.items()])
        if planner == "gateway":
            GatewaySession.objects.create(run=run, agent=agent)
        revision = make_revision(run)
        for k in range(n % 4):
            step = make_step(revision, index=k, capability=capabilities[(n + k) % 3])
            make_attempt(step, started_at=now - age - timedelta(minutes=2))
        if n % 6 != 5:   # the rest stay live
            finish(run, finished_at=now - age)
        runs.append(run)
    evaluation = Evaluation.objects.create(suite=EvaluationSuite.objects.create(name="s", tasks=[]),
                                           started_by=operator)
    experiment = make_run(status="running", evaluation=evaluation, tokens=99_999, cost=99.0)
    finish(experiment, finished_at=now - timedelta(minutes=30))
    return now


def _expected(group: str, start, now, label_key: str = "") -> dict:
    """A plain count over the tables: {group value: (runs, tokens, cost)}."""
    from gateway.models import GatewaySession

    agents = dict(GatewaySession.objects.values_list("run_id", "agent_id"))
    counted: dict = defaultdict(lambda: [0, 0.0, 0.0])
    runs = Run.objects.filter(evaluation__isnull=True, status__in=["completed", "stopped", "cancelled"],
                              finished_at__gte=start, finished_at__lte=now)
    for run in runs:
        if group == "model":
            keys = [(run.planner_config.get("model") or "") if run.planner == "llm" else ""]
        elif group == "owner":
            keys = [str(run.owner_id)]
        elif group == "agent":
            keys = [str(agents.get(run.pk, 0))]
        elif group == "label":
            keys = ([f"{label_key}={run.labels[label_key]}" if label_key in run.labels else ""] if label_key
                    else [f"{k}={v}" for k, v in run.labels.items()])
        else:
            calls = list(run.attempts.values_list("capability_name", flat=True))
            if not calls:
                keys = [""]
            else:
                for name in set(calls):
                    share = calls.count(name) / len(calls)
                    cell = counted[name]
                    cell[0] += 1
                    cell[1] += run.tokens * share
                    cell[2] += run.cost * share
                continue
        for key in keys:
            cell = counted[key]
            cell[0] += 1
            cell[1] += run.tokens
            cell[2] += run.cost
    return {k: (v[0], round(v[1], 6), round(v[2], 9)) for k, v in counted.items()}


@pytest.mark.parametrize("window_key", list(usage.WINDOWS))
@pytest.mark.parametrize("group", ["model", "owner", "agent", "capability", "label", "label:team"])
def test_the_report_equals_a_direct_count_over_the_tables(usage_runs, window_key, group):
    now = usage_runs
    group, _, label_key = group.partition(":")
    report = usage.usage_report(window_key=window_key, group=group, label_key=label_key, now=now)
    start = periods.window_bounds(usage.WINDOWS[window_key], now)[0]
    expected = _expected(group, start, now, label_key)
    got = {r.key if not (label_key and r.key == "") else "": (r.runs, round(r.tokens, 6), round(r.cost, 9))
           for r in report.rows}
    if label_key:   # the "not set" row is keyed by the key alone
        got = {("" if k in ("", label_key) else k): v for k, v in got.items()}
    assert got == expected
    assert expected, "the window holds runs"
    # Additive groupings add up to the window's totals; every label at once may count a run twice.
    direct = _expected("model", start, now)
    assert report.totals.runs == sum(v[0] for v in direct.values())
    assert round(report.totals.tokens, 6) == round(sum(v[1] for v in direct.values()), 6)
    assert sum(report.totals.tokens_by_bucket) == pytest.approx(report.totals.tokens)
    if group != "capability" and not report.overlapping:
        assert sum(r.runs for r in report.rows) == report.totals.runs
    if not report.overlapping:   # tokens add up for capabilities too (shared in proportion to calls)
        assert sum(r.tokens for r in report.rows) == pytest.approx(report.totals.tokens)


def test_live_runs_are_shown_apart(usage_runs):
    report = usage.usage_report(window_key="24h", group="model", now=usage_runs)
    live = Run.objects.filter(evaluation__isnull=True, status="running")
    assert report.live["runs"] == live.count() > 0
    assert report.live["tokens"] == sum(r.tokens for r in live)


def _snapshot():
    return (sorted(UsageRollup.objects.values_list("hour", "model", "owner_id", "agent_id", "runs", "tokens",
                                                    "tool_calls")),
            sorted((h, m, o, a, round(c, 9)) for h, m, o, a, c in
                   UsageRollup.objects.values_list("hour", "model", "owner_id", "agent_id", "cost")),
            sorted(UsageLabelRollup.objects.values_list("hour", "key", "value", "runs", "tokens", "tool_calls")),
            sorted((h, c, n, r, round(t, 6), round(x, 9)) for h, c, n, r, t, x in
                   UsageCapabilityRollup.objects.values_list("hour", "capability_name", "calls", "runs", "tokens",
                                                             "cost")))


def test_a_rebuild_equals_recording_as_runs_finish(usage_runs):
    incremental = _snapshot()
    assert all(incremental)
    usage.rebuild()
    assert _snapshot() == incremental


def test_the_rebuild_command_recounts_usage_too(usage_runs):
    from io import StringIO

    from django.core.management import call_command

    incremental = _snapshot()
    UsageRollup.objects.all().delete()
    out = StringIO()
    call_command("rebuild_rollup", stdout=out)
    assert _snapshot() == incremental and "label rows" in out.getvalue()


def test_a_run_is_counted_once_when_services_finish_it(make_run, operator):
    from runs.services import run_cancel

    run = make_run(status="queued", tokens=321, cost=0.5, planner="llm",
                   planner_config={"endpoint": "local", "model": "gpt-4o"})
    assert not UsageRollup.objects.exists()
    run_cancel(run_id=run.pk, user=operator)
    row = UsageRollup.objects.get()
    assert (row.model, row.owner_id, row.agent_id, row.runs, row.tokens, row.cost) == (
        "gpt-4o", operator.pk, 0, 1, 321, 0.5)
    assert UsageCapabilityRollup.objects.get().capability_name == ""


def test_the_burn_window_reads_the_rollup(usage_runs, operator):
    now = usage_runs
    spend = usage.window_spend(hours=24, now=now, owner_id=operator.pk)
    runs = Run.objects.filter(evaluation__isnull=True, owner=operator, finished_at__isnull=False,
                              finished_at__gte=(now - timedelta(hours=23)).replace(minute=0, second=0, microsecond=0))
    assert spend["tokens"] == sum(r.tokens for r in runs) > 0
    by_label = usage.window_spend(hours=24 * 30, now=now, label=("team", "payments"))
    assert by_label["runs"] == RunLabel.objects.filter(
        key="team", value="payments", run__finished_at__isnull=False, run__evaluation__isnull=True,
        run__finished_at__gte=(now - timedelta(hours=24 * 30 - 1)).replace(minute=0, second=0, microsecond=0)).count()


class TestPage:
    def test_it_shows_the_table_the_chart_and_the_totals(self, usage_runs, client_for, viewer):
        response = client_for(viewer).get("/usage/?window=7d&group=model&measure=cost")
        assert response.status_code == 200
        body = response.content.decode()
        assert "gpt-4o" in body and "llama3" in body and "no model (not an LLM planner)" in body
        assert "<svg" in body and "Cost of finished runs per interval by model" in body
        assert 'aria-current="page"' in body and ">Usage</a>" in body

    def test_label_groups_say_when_a_run_counts_twice(self, usage_runs, client_for, viewer):
        every = client_for(viewer).get("/usage/?window=30d&group=label").content.decode()
        assert "team=payments" in every and "env=prod" in every and "counts under each of its labels" in every
        by_team = client_for(viewer).get("/usage/?window=30d&group=label&label_key=team").content.decode()
        assert "team not set" in by_team and "env=prod" not in by_team

    @pytest.mark.parametrize("query, says", [
        ("window=3y", "Unknown time window “3y”"), ("group=planet", "Unknown grouping “planet”"),
        ("measure=joules", "Unknown measure “joules”"), ("group=label&label_key=Bad Key", "is not a label key"),
        ("group=model&label_key=team", "label_key goes with group=label only")])
    def test_bad_input_is_a_400_page_that_says_what_is_wrong(self, client_for, viewer, query, says):
        response = client_for(viewer).get(f"/usage/?{query}")
        assert response.status_code == 400
        body = response.content.decode()
        assert "<title>Bad request" in body and "Not allowed" not in body and says in body

    def test_the_csv_holds_the_rows_and_the_total(self, usage_runs, client_for, viewer):
        response = client_for(viewer).get("/usage/usage.csv?window=30d&group=owner")
        assert response.status_code == 200 and "attachment" in response["Content-Disposition"]
        lines = response.content.decode().splitlines()
        assert lines[0] == "owner,runs,tokens,cost,tool_calls" and lines[-1].startswith("total,")
        assert any(line.startswith("otto,") for line in lines) and any(line.startswith("usage-other,") for line in lines)

    def test_it_needs_the_dashboards_permission(self, client, django_user_model):
        nobody = django_user_model.objects.create_user("nobody", password="x")
        client.force_login(nobody)
        assert client.get("/usage/").status_code == 403
        assert client.get("/api/usage/").status_code == 403


class TestApi:
    def test_it_returns_the_report(self, usage_runs, api_for, viewer):
        response = api_for(viewer).get("/api/usage/?window=30d&group=capability")
        assert response.status_code == 200, response.content
        data = response.json()
        assert data["group"] == "capability" and not data["overlapping"]
        assert {r["key"] for r in data["rows"]} >= {"search_documents", "create_ticket", "get_time", ""}
        assert sum(r["tokens"] for r in data["rows"]) == pytest.approx(data["totals"]["tokens"])
        assert len(data["bucket_starts"]) == len(data["totals"]["tokens_by_bucket"]) == 30

    @pytest.mark.parametrize("query, field", [("window=1y", "window"), ("group=planet", "group"),
                                              ("bogus=1", "bogus"), ("group=label&label_key=Bad%20Key", "label_key"),
                                              ("group=owner&label_key=team", "label_key")])
    def test_bad_input_is_a_400_naming_the_field(self, api_for, viewer, query, field):
        response = api_for(viewer).get(f"/api/usage/?{query}")
        assert response.status_code == 400
        assert field in response.content.decode()


def test_the_migration_fills_the_rollup_from_runs_finished_before_it(usage_runs):
    import importlib

    from django.apps import apps

    incremental = _snapshot()
    for model in (UsageRollup, UsageLabelRollup, UsageCapabilityRollup):
        model.objects.all().delete()
    importlib.import_module("runs.migrations.0021_usage_rollup").fill_usage(apps, None)
    assert _snapshot() == incremental

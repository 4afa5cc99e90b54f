"""Stall kinds and plan rejections recorded on the run, shown on the trace page and in the
API; budget usage computed once for both."""
from __future__ import annotations

import pytest

from runs import services
from runs.dashboard.budget_usage import run_budget_usage
from runs.models import Run
from runs.selectors import budget_gauges
from runs.worker import engine

NOTHING = {"capability": "search_documents", "arguments": {"q": "zzzz-nothing"}}
FOUND = {"capability": "search_documents", "path": "documents.0.id", "exists": True}


@pytest.fixture
def demo_capabilities(db, manual_advance):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()


def run_to_end(owner, plans, **budgets):
    run = services.run_start(owner=owner, goal="Find the travel policy", completion=FOUND,
                             budgets={"deadline_s": 60, **budgets}, planner="scripted",
                             planner_config={"plans": plans})
    engine.run_advance(run_id=run.pk, worker="test-worker")
    run.refresh_from_db()
    return run


@pytest.mark.django_db(transaction=True)
class TestStopKinds:
    def test_a_repetition_records_repeated_without_progress(self, operator, client_for, api_for, demo_capabilities):
        run = run_to_end(operator, [[NOTHING], [NOTHING]])
        assert (run.stop_reason, run.stall_kind) == ("stalled", "repeated_without_progress")
        assert run.stop_detail.startswith("repeated_without_progress: step s1: search_documents")
        page = client_for(operator).get(f"/runs/{run.pk}/").content.decode()
        assert "the same action gave the same result" in page
        assert 'data-testid="stall-kind">repeated_without_progress<' in page
        data = api_for(operator).get(f"/api/runs/{run.pk}/").json()
        assert data["stall_kind"] == "repeated_without_progress"

    def test_a_planner_with_nothing_more_records_planner_exhausted(self, operator, client_for, api_for,
                                                                   demo_capabilities):
        run = run_to_end(operator, [[NOTHING]])
        assert (run.stop_reason, run.stall_kind) == ("stalled", "planner_exhausted")
        assert run.stop_detail.startswith("planner_exhausted: the planner has no further plan")
        page = client_for(operator).get(f"/runs/{run.pk}/").content.decode()
        assert "the planner had nothing more to try" in page
        assert api_for(operator).get(f"/api/runs/{run.pk}/").json()["stall_kind"] == "planner_exhausted"

    def test_a_first_plan_rejected_without_correction_is_plan_rejected(self, operator, api_for, demo_capabilities):
        run = run_to_end(operator, [[{"capability": "no_such_capability", "arguments": {}}]])
        assert (run.stop_reason, run.stall_kind) == ("plan_rejected", "")
        assert "no correction" in run.stop_detail
        assert api_for(operator).get(f"/api/runs/{run.pk}/").json()["stall_kind"] == ""

    def test_the_database_refuses_a_stall_kind_on_a_run_that_did_not_stall(self, make_run):
        from django.db import IntegrityError, transaction

        run = make_run(status="completed")
        with pytest.raises(IntegrityError), transaction.atomic():
            Run.objects.filter(pk=run.pk).update(stall_kind="planner_exhausted")


@pytest.mark.django_db(transaction=True)
class TestBudgetUsage:
    def test_the_api_and_the_page_report_the_same_rows(self, operator, api_for, demo_capabilities):
        run = run_to_end(operator, [[NOTHING], [{"capability": "search_documents", "arguments": {"q": "travel"}}]],
                         max_calls_per_capability={"search_documents": 5}, max_side_effects_per_minute=3)
        assert run.stop_reason == "completed"
        data = api_for(operator).get(f"/api/runs/{run.pk}/").json()
        rows = {(r["name"], r.get("capability")): r for r in data["budget_usage"]}
        assert rows[("capability_calls", "search_documents")]["used"] == 2
        assert rows[("capability_calls", "search_documents")]["limit"] == 5
        assert rows[("side_effect_rate", None)] == {"name": "side_effect_rate", "used": 0, "limit": 3,
                                                    "fraction": 0.0, "exhausted": False}
        # Revisions: one replan after the first plan, in the API field, its row and the gauge alike.
        assert data["revisions"] == 1 and data["plans"] == 2
        assert rows[("revisions", None)]["used"] == 1
        gauges = {g.label: g for g in budget_gauges(run=run)}
        assert gauges["Calls to search_documents"].used == 2
        assert [g.used for g in budget_gauges(run=run) if g.name == "revisions"] == [1]
        assert data["budget_usage"] == run_budget_usage(Run.objects.get(pk=run.pk))

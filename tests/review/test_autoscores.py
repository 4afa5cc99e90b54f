"""The runtime's scores: written when a real run finishes (through the engine's own finish), whichever way it stops."""
from __future__ import annotations

import pytest
from django.utils import timezone

from review import autoscores
from review.models import Score, ScoreConfig
from runs import services
from runs.models import Run
from runs.worker import engine


@pytest.fixture
def demo_capabilities(db, manual_advance):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()


def _start(owner, plans, completion, **budgets):
    return services.run_start(owner=owner, goal="Find the travel policy", completion=completion,
                              budgets={"deadline_s": 60, **budgets}, planner="scripted",
                              planner_config={"plans": plans})


def _scores(run) -> dict:
    return {s.config.name: (s.number if s.config.kind != "categorical" else s.category)
            for s in Score.objects.filter(run=run, source="runtime").select_related("config")}


@pytest.mark.django_db(transaction=True)
class TestWhenARunFinishes:
    def test_a_completed_run_gets_its_scores(self, operator, demo_capabilities):
        run = _start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}}]],
                     {"capability": "search_documents", "path": "documents.0.id", "exists": True})
        engine.run_advance(run_id=run.pk, worker="test-worker")
        run.refresh_from_db()
        assert run.stop_reason == "completed"
        assert _scores(run) == {"completion_verified": 1.0, "stalled": 0.0, "budget_stop": "none",
                                "side_effects_committed": 0.0, "cost": run.cost}
        assert set(Score.objects.filter(run=run).values_list("author_key", flat=True)) == {"runtime"}

    def test_a_budget_stop_names_its_budget(self, operator, demo_capabilities):
        run = _start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}}],
                                [{"capability": "search_documents", "arguments": {"q": "travel policy"}}]],
                     {"capability": "search_documents", "path": "documents.0.id", "equals": "POL-0"},
                     max_tool_calls=1)
        engine.run_advance(run_id=run.pk, worker="test-worker")
        run.refresh_from_db()
        assert run.stop_reason == "budget_exhausted:tool_calls"
        scores = _scores(run)
        assert scores["completion_verified"] == 0.0 and scores["budget_stop"] == "tool_calls"

    def test_a_cancelled_run_gets_its_scores_and_a_disabled_config_is_left_out(self, operator, demo_capabilities):
        autoscores.builtin_configs()  # a transactional test starts from an emptied database
        ScoreConfig.objects.filter(name="cost").update(enabled=False)
        run = _start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}}]],
                     {"capability": "search_documents", "path": "documents.0.id", "exists": True})
        services.run_cancel(run_id=run.pk, user=operator)
        run.refresh_from_db()
        assert run.status == "cancelled"
        scores = _scores(run)
        assert "cost" not in scores and scores["completion_verified"] == 0.0 and scores["stalled"] == 0.0


@pytest.mark.django_db
class TestWritingThem:
    def test_a_second_delivery_of_the_signal_writes_nothing_new(self, operator):
        run = Run.objects.create(goal="g", completion={}, budgets={}, planner="scripted", owner=operator,
                                 status="stopped", stop_reason="budget_exhausted:tool_calls", trace_id="t" * 32,
                                 finished_at=timezone.now(), side_effects_committed=2, cost=0.25)
        assert autoscores.run_scores_write(run_id=run.pk) == 5
        assert autoscores.run_scores_write(run_id=run.pk) == 5
        assert Score.objects.filter(run=run).count() == 5
        assert _scores(run) == {"completion_verified": 0.0, "stalled": 0.0, "budget_stop": "tool_calls",
                                "side_effects_committed": 2.0, "cost": 0.25}

    def test_a_run_still_going_gets_none(self, operator):
        run = Run.objects.create(goal="g", completion={}, budgets={}, planner="scripted", owner=operator,
                                 status="running", trace_id="u" * 32)
        assert autoscores.run_scores_write(run_id=run.pk) == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_run_finished_by_a_real_worker_gets_its_scores(celery_worker, operator, wait_until):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    autoscores.builtin_configs()
    run = _start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}}]],
                 {"capability": "search_documents", "path": "documents.0.id", "exists": True})
    wait_until(lambda: Score.objects.filter(run=run, source="runtime").count() == 5, timeout=60,
               message="the automatic scores")
    assert _scores(run)["completion_verified"] == 1.0

"""Planner-call records through the engine and the services: the answer's figures when they were
recorded, the ceiling otherwise, counted once whoever finishes the run."""
from __future__ import annotations

import pytest
from django.db import transaction
from django.utils import timezone

from runs import services
from runs.models import PlannerCall, Run
from runs.planners.llm import LLMPlanner, _Answer
from runs.worker import engine
from runs.worker.planner_intents import PlannerCallIntents

pytestmark = pytest.mark.django_db(transaction=True)

PLAN = '{"steps": [{"id": "s1", "capability": "search_documents", "arguments": {"q": "travel"}, ' \
       '"expected_outcome": "a policy"}]}'


class Crash(BaseException):
    """Stands for the worker dying: nothing of the pass in flight is kept."""


@pytest.fixture
def llm_run(settings, operator, manual_advance, monkeypatch):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    settings.AGENTOPS_LLM_ENDPOINTS = {"fake": {"base_url": "http://127.0.0.1:9/v1"}}
    monkeypatch.setattr(LLMPlanner, "_complete", lambda self, messages, remaining_s: _Answer(PLAN, 100, 50, 150))
    return services.run_start(owner=operator, goal="Find the travel policy", planner="llm",
                              planner_config={"endpoint": "fake", "model": "m", "max_tokens": 512,
                                              "price_per_1k_prompt_tokens": 0.01,
                                              "price_per_1k_completion_tokens": 0.03},
                              completion={"capability": "search_documents", "path": "documents.0.id",
                                          "exists": True}, budgets={"deadline_s": 60})


def test_a_worker_lost_after_the_answer_arrived_leaves_its_figures_and_they_are_counted_not_the_ceiling(
        llm_run, monkeypatch):
    answered = PlannerCallIntents.planner_call_answered

    def answered_then_die(self, intent, tokens, cost):
        answered(self, intent, tokens, cost)
        raise Crash()

    monkeypatch.setattr(PlannerCallIntents, "planner_call_answered", answered_then_die)
    with pytest.raises(Crash):
        engine.run_advance(run_id=llm_run.pk, worker="w1")
    (call,) = PlannerCall.objects.filter(run=llm_run)
    assert call.in_flight and call.answered_at and call.tokens == 150
    monkeypatch.setattr(PlannerCallIntents, "planner_call_answered", answered)
    engine.run_advance(run_id=llm_run.pk, worker="w2")
    run = Run.objects.get(pk=llm_run.pk)
    lost, second = PlannerCall.objects.filter(run=run).order_by("started_at")
    assert run.status == "completed" and run.tokens == 300 and run.tokens_estimated == 0
    assert (lost.lost, lost.estimated, lost.tokens) == (True, False, 150)
    assert (second.lost, second.in_flight, second.tokens) == (False, False, 150)


def test_a_run_finished_by_a_sweep_with_a_lost_planner_call_counts_it_at_its_ceiling(llm_run):
    PlannerCall.objects.create(run=llm_run, uid="lost1", revision=1, started_at=timezone.now(), max_tokens=2_000,
                               max_cost=0.04, worker="w1", lease_token=1)
    with transaction.atomic():
        services.run_finish(run=Run.objects.get(pk=llm_run.pk), status="stopped",
                            stop_reason="budget_exhausted:deadline", detail="The deadline passed.")
    run = Run.objects.get(pk=llm_run.pk)
    call = PlannerCall.objects.get(uid="lost1")
    assert (run.tokens, run.tokens_estimated, run.cost_estimated) == (2_000, 2_000, pytest.approx(0.04))
    assert (call.in_flight, call.lost, call.estimated, call.tokens) == (False, True, True, 2_000)
    assert run.state["usage"]["iterations"] == 1


def test_the_trace_download_and_the_api_say_which_tokens_are_estimated(llm_run, api_for, operator):
    PlannerCall.objects.create(run=llm_run, uid="lost1", revision=1, started_at=timezone.now(), max_tokens=2_000,
                               max_cost=0.04)
    engine.run_advance(run_id=llm_run.pk, worker="w2")
    answer = api_for(operator).get(f"/api/runs/{llm_run.pk}/").json()
    assert answer["status"] == "completed" and answer["tokens"] == 2_150 and answer["tokens_estimated"] == 2_000
    assert {row["name"]: row.get("estimated") for row in answer["budget_usage"]}["tokens"] == 2_000


def test_a_planner_call_whose_intent_was_stored_though_its_commit_failed_is_never_counted(llm_run, monkeypatch):
    """The worker is told the call's row failed to commit (it was stored: the acknowledgement was lost), so it
    never asks the model; it withdraws the row, and the run is not charged the call's ceiling for it."""
    from django.db import OperationalError

    stored = PlannerCallIntents._begin_planner_call

    def stored_then_failed(self, intent):
        stored(self, intent)
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(PlannerCallIntents, "_begin_planner_call", stored_then_failed)
    with pytest.raises(OperationalError):
        engine.run_advance(run_id=llm_run.pk, worker="w1")
    assert not PlannerCall.objects.filter(run=llm_run).exists()
    monkeypatch.setattr(PlannerCallIntents, "_begin_planner_call", stored)
    Run.objects.filter(pk=llm_run.pk).update(lease_expires_at=timezone.now())
    engine.run_advance(run_id=llm_run.pk, worker="w2")
    run = Run.objects.get(pk=llm_run.pk)
    (call,) = PlannerCall.objects.filter(run=run)
    assert run.status == "completed" and run.tokens == 150 and run.tokens_estimated == 0
    assert (call.lost, call.in_flight, call.tokens) == (False, False, 150)

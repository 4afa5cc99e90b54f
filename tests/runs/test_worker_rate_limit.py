"""The registry-wide rate limit with a real Celery worker: two concurrent runs, one slot."""
import pytest
from django.utils import timezone

from capabilities.models import Capability, CapabilityVersion
from runs import services
from runs.models import Attempt, Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FOUND = {"capability": "search_documents", "path": "documents.0.id", "exists": True}


@pytest.fixture
def limited_search(db):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()

    def limit(calls, period_s):
        CapabilityVersion.objects.filter(capability__name="search_documents").update(
            rate_limit_calls=calls, rate_limit_period_s=period_s)
        # Edited in place, so the registry's version is moved as capabilities.policy moves it: workers
        # keep the specs they read at one version.
        Capability.objects.filter(name="search_documents").update(updated_at=timezone.now())
    return limit


def finished(*run_ids):
    return all(s in ("completed", "stopped", "cancelled")
               for s in Run.objects.filter(pk__in=run_ids).values_list("status", flat=True))


def start(owner, plan, deadline_s):
    return services.run_start(owner=owner, goal="Find the travel policy", planner="scripted",
                              planner_config={"plans": [plan]}, completion=FOUND, budgets={"deadline_s": deadline_s})


def test_two_concurrent_runs_share_one_slot(celery_worker, limited_search, operator, wait_until):
    limited_search(1, 60)
    plan = [{"capability": "search_documents", "arguments": {"q": "travel"}}]
    first, second = start(operator, plan, 8), start(operator, plan, 8)
    wait_until(lambda: finished(first.pk, second.pk), timeout=60, message="both runs to finish")
    runs = {r.pk: r for r in Run.objects.filter(pk__in=[first.pk, second.pk])}
    # Exactly one call reached the capability; the other run waited and could not be
    # admitted before its deadline, without a single tool call counted.
    assert Attempt.objects.filter(run__in=runs.values(), capability_name="search_documents").count() == 1
    outcomes = sorted((r.stop_reason, r.tool_calls) for r in runs.values())
    assert outcomes == [("budget_exhausted:deadline", 0), ("completed", 1)]
    refused = next(r for r in runs.values() if r.stop_reason != "completed")
    assert "would end after the deadline" in refused.stop_detail


def test_a_refused_step_waits_and_is_admitted_without_counting_refusals(celery_worker, limited_search, operator,
                                                                        wait_until):
    limited_search(1, 3)
    plan = [{"capability": "search_documents", "arguments": {"q": "zzzz-nothing-matches"}},
            {"capability": "search_documents", "arguments": {"q": "travel"}}]
    run = start(operator, plan, 60)
    wait_until(lambda: finished(run.pk), timeout=60, message="the run to finish")
    run.refresh_from_db()
    assert run.stop_reason == "completed"
    assert (run.tool_calls, run.retries) == (2, 0)
    first, second = Attempt.objects.filter(run=run).order_by("started_at")
    # The second call waited for the window: admitted about 3 s after the first.
    assert (second.started_at - first.started_at).total_seconds() >= 2.9

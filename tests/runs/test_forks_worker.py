"""Forks and resumes run to their end on a real Celery worker, and never repeat a side effect before the fork point.

The side effects are counted outside the product: a loopback HTTP service appends each write it
receives to its ledger. A write can also land after the caller's timeout (the outcome is then
unknown to the run, which stops terminal_failure:outcome_unknown) or be lost (it never lands):
what a person then records decides what the resumed run does.

Runs on whichever stack the environment selects (SQLite + embedded broker, or DATABASE_URL /
CELERY_BROKER_URL for PostgreSQL + Redis).
"""
from __future__ import annotations

from collections import Counter

import pytest

from capabilities.policy import capability_create
from runs import forks, services
from runs.models import Attempt, Run
from runs.trace import reconciliation

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TIMEOUT_S = 1.0


@pytest.fixture
def record_item(settings, registry_admin, ledger_service):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    ledger_service.late_s = TIMEOUT_S * 2   # a faulty write answers after the caller gave up
    url = f"http://127.0.0.1:{ledger_service.server_address[1]}/items"
    # Not idempotent, no status lookup: an unknown outcome stops the run for a person to reconcile.
    capability_create(user=registry_admin, name="record_item", kind="http", config={"url": url, "method": "POST"},
                      policy={"side_effect": "write", "requires_approval": False, "retry_max_attempts": 1,
                              "timeout_s": TIMEOUT_S, "idempotent": False,
                              "schema": {"type": "object", "properties": {"n": {"type": "integer"}},
                                         "required": ["n"]}})
    return ledger_service


def plan(*numbers):
    return [{"id": f"s{n}", "capability": "record_item", "arguments": {"n": n}} for n in numbers]


def start(owner, plans, last):
    return services.run_start(owner=owner, goal="Record the items", planner="scripted",
                              planner_config={"plans": plans}, budgets={"deadline_s": 60},
                              completion={"capability": "record_item", "path": "n", "equals": last})


def finished(run, wait_until):
    def done():
        current = Run.objects.get(pk=run.pk)
        return current if current.is_finished else None

    return wait_until(done, timeout=60, message=f"run {run.pk} to finish")


def test_a_fork_runs_to_its_end_and_never_repeats_a_side_effect_before_the_fork_point(
        celery_worker, operator, record_item, wait_until, client_for):
    source = finished(start(operator, [plan(0, 1, 2)], last=3), wait_until)   # n=3 never comes: stalled
    assert source.stop_reason == "stalled", source.stop_detail
    assert record_item.ledger == [0, 1, 2]

    # Before call 3: calls 1 and 2 are inherited; the fork's planner proposes the whole list again.
    fork = finished(forks.run_fork(run_id=source.pk, user=operator, at=3,
                                   planner_config={"plans": [plan(0, 1, 2, 3)]}), wait_until)
    assert fork.status == "completed", (fork.stop_reason, fork.stop_detail)
    assert Counter(record_item.ledger) == {0: 1, 1: 1, 2: 2, 3: 1}   # n=2 was after the fork point
    assert list(Attempt.objects.filter(run=fork).order_by("started_at").values_list("output__n", flat=True)) == [2, 3]
    assert fork.side_effects_committed == 2
    trace = client_for(operator).get(f"/runs/{fork.pk}/").content.decode()
    assert trace.count('data-testid="settled-before-fork"') == 2   # s0 and s1: done without a call

    # Resume the source after its end: every call inherited, only n=3 is new.
    resumed = finished(forks.run_fork(run_id=source.pk, user=operator,
                                      planner_config={"plans": [plan(0, 1, 2, 3)]}), wait_until)
    assert resumed.status == "completed", (resumed.stop_reason, resumed.stop_detail)
    assert Counter(record_item.ledger) == {0: 1, 1: 1, 2: 2, 3: 2}
    assert Attempt.objects.filter(run=resumed).count() == 1

    # A fork of the resume: the side effects of both runs before it stay done; only n=4 is new.
    again = finished(forks.run_fork(run_id=resumed.pk, user=operator,
                                    planner_config={"plans": [plan(0, 1, 2, 3, 4)]}), wait_until)
    assert Counter(record_item.ledger) == {0: 1, 1: 1, 2: 2, 3: 2, 4: 1}
    assert list(Attempt.objects.filter(run=again).values_list("output__n", flat=True)) == [4]


@pytest.mark.parametrize("fault, committed", [("late", True), ("lost", False)])
def test_a_person_reconciles_an_unknown_outcome_and_the_resumed_run_acts_on_the_finding(
        celery_worker, operator, record_item, wait_until, fault, committed):
    record_item.faults[1] = fault
    source = finished(start(operator, [plan(0, 1, 2)], last=2), wait_until)
    assert source.stop_reason == reconciliation.OUTCOME_UNKNOWN, source.stop_detail
    landed = [0, 1] if committed else [0]
    wait_until(lambda: record_item.ledger == landed, timeout=10, message="the late write to land")

    with pytest.raises(Exception, match="reconcile"):   # nothing to resume from until someone looks
        forks.run_fork(run_id=source.pk, user=operator)
    reconciliation.run_reconcile(run_id=source.pk, user=operator, committed=committed,
                                 evidence="item 1 is in the ledger" if committed else "no item 1 in the ledger")
    resumed = finished(forks.run_fork(run_id=source.pk, user=operator), wait_until)

    assert resumed.status == "completed", (resumed.stop_reason, resumed.stop_detail)
    # Committed: never sent again. Not committed: done again, once.
    assert Counter(record_item.ledger) == {0: 1, 1: 1, 2: 1}
    sent = list(Attempt.objects.filter(run=resumed).order_by("started_at").values_list("output__n", flat=True))
    assert sent == ([2] if committed else [1, 2])

"""Probes, a run's pages: a fork point or an attempt id that is no number or id is refused or not found,
never a 500, and starts no run."""
from __future__ import annotations

import pytest

from runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished_run(operator):
    from django.utils import timezone

    now = timezone.now()
    return Run.objects.create(goal="g", completion={"capability": "x", "path": "id", "exists": True},
                              budgets={"deadline_s": 600}, planner="scripted", owner=operator, status="completed",
                              stop_reason="completed", trace_id="f" * 32, started_at=now, finished_at=now)


@pytest.mark.parametrize("at", ["²", "9" * 5000, "99999999999999999999", "-1", "\x00", "1.5", "0"])
def test_an_odd_fork_point_starts_no_run(client_for, operator, finished_run, at):
    """Before: "²" and 5,000 digits passed isdigit() and int() raised: a 500."""
    response = client_for(operator).post(f"/runs/{finished_run.pk}/fork/", {"at": at})
    assert response.status_code in (302, 400), (response.status_code, response.content[:300])
    assert Run.objects.count() == 1


@pytest.mark.parametrize("uid", ["a%00", "x" * 5000, "%ED%A0%80", "²"])
def test_an_odd_attempt_id_is_not_found(client_for, operator, finished_run, uid):
    client = client_for(operator)
    for path in (f"/runs/{finished_run.pk}/attempts/{uid}/", f"/runs/{finished_run.pk}/attempts/{uid}/output.json"):
        assert client.get(path).status_code == 404, path

"""Ids of another project's objects sent in a request's body or query, with an API token of one's own project.

tests/project/test_project_isolation.py puts the other project's ids in every route's path; these put them
where a route takes ids besides: the runs a suite is made from, the two runs compared, and, with a token,
a decision, a fork and a run's export. Each is answered as for an id that does not exist (404, naming
nothing of the other project), and changes nothing there.
"""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from capabilities.kinds.python.sync import python_capabilities_sync
from core.project_access import grant_role
from core.projects import project_scope
from core.tokens import token_create
from evaluation.models import EvaluationSuite
from runs import services
from runs.models import Approval, Run
from runs.worker import engine
from tests.conftest import zebra_member

pytestmark = pytest.mark.django_db

MARKER = "okapi"
FOUND = {"capability": "search_documents", "path": "documents.0.id", "exists": True}
SEARCH = [[{"capability": "search_documents", "arguments": {"q": "travel"}}]]


def _started(owner, goal: str, **kw) -> Run:
    return services.run_start(owner=owner, goal=goal, planner="scripted", planner_config={"plans": SEARCH},
                              completion=FOUND, **kw)


def _finished(owner, goal: str) -> Run:
    run = _started(owner, goal)
    for _ in range(20):
        engine.run_advance(run_id=run.pk, worker="probe")
        run.refresh_from_db()
        if run.is_finished:
            return run
    raise AssertionError("the run did not finish")


@pytest.fixture
def two(roles):
    """Zebra's finished run and run awaiting its plan's approval; ours, and a token of ours holding every role."""
    zebra, bert = zebra_member("operator")
    with project_scope(zebra):
        python_capabilities_sync()
        theirs = _finished(bert, f"{MARKER} finished")
        waiting = _started(bert, f"{MARKER} waits", require_plan_approval=True)
        engine.run_advance(run_id=waiting.pk, worker="probe")
        approval = Approval.objects.get(run=waiting)
    python_capabilities_sync()
    otto = User.objects.create_user("otto", password="pw-otto")
    for role in ("operator", "lead operator", "reviewer"):
        grant_role(otto, role)
    otto = User.objects.get(pk=otto.pk)
    mine = _finished(otto, "ours finished")
    _token, key = token_create(user=otto, name="ours")
    return type("Two", (), {"zebra": zebra, "theirs": theirs, "waiting": waiting, "approval": approval,
                            "mine": mine, "api": APIClient(HTTP_AUTHORIZATION=f"Token {key}")})


def _refused(response) -> None:
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert response.status_code == 404, (response.status_code, body[:300])
    assert MARKER.encode() not in body.lower()


def test_a_suite_is_never_made_from_another_projects_run(two):
    _refused(two.api.post("/api/evaluation-suites/add-runs/", {"suite": "ours", "create": True,
                                                               "runs": [two.mine.pk, two.theirs.pk]}, format="json"))
    with project_scope(None):
        assert not EvaluationSuite.objects.filter(name="ours").exists()


def test_another_projects_run_is_never_compared(two):
    _refused(two.api.get(f"/api/runs/compare/?a={two.mine.pk}&b={two.theirs.pk}"))
    _refused(two.api.get(f"/api/runs/compare/?a={two.theirs.pk}&b={two.mine.pk}"))


def test_a_token_never_decides_forks_or_exports_across(two):
    _refused(two.api.post(f"/api/approvals/{two.approval.pk}/decide/",
                          {"decision": "approve", "expected_hash": two.approval.plan_hash}, format="json"))
    _refused(two.api.post(f"/api/runs/{two.theirs.pk}/fork/", {}, format="json"))
    _refused(two.api.get(f"/api/runs/{two.theirs.pk}/attempts/"))
    with project_scope(None):
        assert Approval.objects.get(pk=two.approval.pk).state == "pending"
        assert Run.objects.filter(project=two.zebra).count() == 2

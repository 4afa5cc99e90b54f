"""Try it across projects: the worker's half runs in the tried capability's project.

Try it sends its call to a Celery worker (capabilities.try_it), which takes it outside any request and so
outside any project's scope. Two projects may both have a `search_documents`, each with its own rate limit
(its own RateLimitWindow row): a try in one project must take a slot of its own project's limit, never the
other's, and must not fail for want of a project. The task is called here as a worker calls it: in no scope.
"""
from __future__ import annotations

import pytest

from capabilities import policy
from capabilities.kinds.python.sync import python_capabilities_sync
from capabilities.models import Capability, RateLimitWindow
from capabilities.ratelimit import admit
from capabilities.tasks import try_capability
from core.projects import project_scope
from tests.conftest import zebra_member

pytestmark = pytest.mark.django_db

LIMIT = {"rate_limit_calls": 1, "rate_limit_period_s": 3600}


def _limited(user) -> Capability:
    python_capabilities_sync()
    search = Capability.objects.get(name="search_documents")
    policy.capability_update(user=user, capability_id=search.pk, policy=LIMIT)
    return Capability.objects.select_related("current_version").get(pk=search.pk)


def _try_in_a_worker(capability: Capability, user) -> dict:
    """The task's body as a worker runs it: no request, no project in scope."""
    with project_scope(None):
        return try_capability(version_id=capability.current_version_id, arguments={"q": "travel"},
                              idempotency_key=None, trace_id="0" * 32, span_id="0" * 16, actor_id=user.pk)


@pytest.fixture
def two_limited(registry_admin):
    other, bert = zebra_member("registry admin")
    mine = _limited(registry_admin)
    with project_scope(other):
        theirs = _limited(bert)
    return other, (mine, registry_admin), (theirs, bert)


def test_a_try_in_a_worker_is_admitted_under_its_own_project_s_rate_limit(two_limited):
    _other, (mine, me), _theirs = two_limited
    assert _try_in_a_worker(mine, me)["status"] == "ok"
    assert _try_in_a_worker(mine, me)["error_code"] == "rate_limited"
    with project_scope(None):
        windows = list(RateLimitWindow.objects.filter(capability_name="search_documents")
                       .values_list("project_id", "admitted"))
    assert [(project, len(admitted)) for project, admitted in windows] == [(mine.project_id, 1)]


def test_another_project_s_full_window_of_the_same_name_neither_refuses_nor_counts_a_try(two_limited):
    other, (mine, me), (theirs, _bert) = two_limited
    with project_scope(other):   # the other project's only slot of the hour is taken (by one of its runs)
        assert admit(theirs.current_version.to_spec()) is None
    assert _try_in_a_worker(mine, me)["status"] == "ok"
    with project_scope(None):
        windows = {(w.project_id, len(w.admitted)) for w in RateLimitWindow.objects.filter(
            capability_name="search_documents")}
    assert windows == {(mine.project_id, 1), (other.pk, 1)}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_on_a_real_worker_a_try_takes_its_own_project_s_slot(celery_worker, registry_admin, api_for):
    """Through the API and a worker process: the other project's full window neither refuses the try
    nor is counted by it, and the second try in the hour is refused by this project's own limit."""
    other, bert = zebra_member("registry admin")
    mine = _limited(registry_admin)
    with project_scope(other):
        theirs = _limited(bert)
        assert admit(theirs.current_version.to_spec()) is None   # the other project's one slot, taken
    api = api_for(registry_admin)
    tried = [api.post(f"/api/capabilities/{mine.name}/try/", {"arguments": {"q": "travel"}}, format="json")
             for _ in range(2)]
    assert [t.status_code for t in tried] == [200, 200], tried[0].content
    assert [t.json()["status"] for t in tried] == ["ok", "retryable"]
    assert tried[1].json()["error_code"] == "rate_limited"
    with project_scope(None):
        windows = {(w.project_id, len(w.admitted)) for w in RateLimitWindow.objects.filter(
            capability_name="search_documents")}
    assert windows == {(mine.project_id, 1), (other.pk, 1)}

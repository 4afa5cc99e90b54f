"""Two projects, one capability name, one real Celery worker process advancing both projects' runs.

Capability names are unique within a project only. A worker keeps the registry's specs at its
latest version for every run it advances (runs.worker.adapters.SharedSpecs); kept per version alone,
the first project to read a name handed its spec to the other's runs: the other's approval skipped,
its call sent to the first project's endpoint. Effects are counted by the HTTP service on loopback
(tests/conftest.py's ledger_service).
Runs on whichever stack the environment selects.
"""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from capabilities.policy import capability_create
from core.models import Project
from core.project_access import grant_role
from core.projects import project_scope
from runs import services
from runs.models import Approval, Attempt, Run
from tests.binding import bound_hash

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _register(admin, ledger, path: str, *, approval: bool) -> None:
    capability_create(user=admin, name="issue_refund", kind="http",
                      config={"url": f"http://127.0.0.1:{ledger.server_address[1]}{path}", "method": "POST"},
                      policy={"side_effect": "write", "requires_approval": approval, "retry_max_attempts": 1,
                              "timeout_s": 10, "schema": {"type": "object", "properties": {"n": {"type": "string"}},
                                                          "required": ["n"]}})


def _start(owner, order: str):
    return services.run_start(owner=owner, goal=f"Refund order {order}", planner="scripted",
                              planner_config={"plans": [[{"capability": "issue_refund",
                                                          "arguments": {"n": order}}]]},
                              budgets={"deadline_s": 90},
                              completion={"capability": "issue_refund", "path": "n", "equals": order})


def test_a_worker_gives_each_project_s_run_its_own_capability_of_a_shared_name(
        celery_worker, settings, registry_admin, operator, ledger_service, wait_until):
    ledger = ledger_service   # the effects, counted outside the product
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    other = Project.objects.create(slug="payments", name="Payments team")
    for role in ("registry admin", "operator", "lead operator"):
        grant_role(registry_admin, role, other)
    rita = User.objects.get(pk=registry_admin.pk)
    _register(rita, ledger, "/default", approval=False)
    with project_scope(other):
        _register(rita, ledger, "/payments", approval=True)   # the registry's version is final from here

    first = _start(operator, "A-1")   # the default project's, read first by the worker
    wait_until(lambda: Run.objects.get(pk=first.pk).status == "completed", timeout=60, message="the first run")
    with project_scope(other):
        second = _start(rita, "B-2")   # the payments project's: read below past the test's default scope
    waiting = wait_until(lambda: Run._base_manager.filter(pk=second.pk, status__in=["awaiting_approval", "completed",
                                                                                 "stopped"]).first(),
                         timeout=60, message="the payments run to ask for its approval (or to finish)")
    assert ledger.requests == [("/default", "A-1")]   # nothing sent for the payments run before its approval
    assert waiting.status == "awaiting_approval"
    approval = Approval._base_manager.get(run_id=second.pk, state="pending")

    with project_scope(other):
        services.approval_decide(approval_id=approval.pk, user=rita, approve=True, channel="api",
                                 expected_hash=bound_hash(approval.pk))
    wait_until(lambda: Run._base_manager.get(pk=second.pk).is_finished, timeout=60,
               message="the payments run to finish")
    assert Run._base_manager.get(pk=second.pk).status == "completed"
    assert ledger.requests == [("/default", "A-1"), ("/payments", "B-2")]
    assert Attempt._base_manager.filter(run_id__in=[first.pk, second.pk], status="ok").count() == 2

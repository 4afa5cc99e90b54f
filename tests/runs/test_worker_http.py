"""HTTP capabilities where runs execute: a real Celery worker calls a real HTTP service on loopback.

Reads keep their connection alive across steps (and runs); writes open and close their own.
Runs on whichever stack the environment selects (SQLite + embedded broker, or DATABASE_URL /
CELERY_BROKER_URL for PostgreSQL + Redis).
"""
from __future__ import annotations

import pytest

from capabilities.policy import capability_create
from runs import services
from runs.models import Attempt, Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def service(counting_http_service):
    return counting_http_service


def register(admin, service, name, *, method, side_effect):
    url = f"http://127.0.0.1:{service.server_address[1]}/items"
    capability_create(user=admin, name=name, kind="http", config={"url": url, "method": method},
                      policy={"side_effect": side_effect, "requires_approval": False, "retry_max_attempts": 1,
                              "timeout_s": 10, "idempotent": side_effect == "none",
                              "schema": {"type": "object", "properties": {"n": {"type": "integer"}},
                                         "required": ["n"]}})


def run_steps(owner, capability, count, wait_until):
    steps = [{"id": f"s{i}", "capability": capability, "arguments": {"n": i},
              **({"depends_on": [f"s{i - 1}"]} if i else {})} for i in range(count)]
    run = services.run_start(owner=owner, goal="Call the service", planner="scripted",
                             planner_config={"plans": [steps]}, budgets={"deadline_s": 90},
                             completion={"capability": capability, "path": "n", "equals": count - 1})

    def finished():
        current = Run.objects.get(pk=run.pk)
        return current if current.status in ("completed", "stopped", "cancelled") else None

    return wait_until(finished, timeout=90, message=f"run {run.pk} to finish")


def test_reads_reuse_one_connection_and_writes_never_do_on_a_real_worker(
        celery_worker, settings, registry_admin, operator, service, wait_until):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    register(registry_admin, service, "lookup_item", method="GET", side_effect="none")
    register(registry_admin, service, "record_item", method="POST", side_effect="write")

    run = run_steps(operator, "lookup_item", 4, wait_until)
    outputs = [a.output for a in Attempt.objects.filter(run=run).order_by("started_at")]
    assert run.status == "completed", (run.stop_reason, run.stop_detail)
    assert [o["n"] for o in outputs] == [0, 1, 2, 3]
    assert {o["asked"] for o in outputs} == {"keep-alive"}
    assert len({o["connection"] for o in outputs}) == 1  # four calls, one TCP connection
    assert len(service.connections) == 1

    written = run_steps(operator, "record_item", 3, wait_until)
    outputs = [a.output for a in Attempt.objects.filter(run=written).order_by("started_at")]
    assert written.status == "completed", (written.stop_reason, written.stop_detail)
    assert {o["asked"] for o in outputs} == {"close"}
    assert len({o["connection"] for o in outputs}) == 3  # a connection of its own for each write
    assert len(service.connections) == 4

"""A client retries the request that starts a run, some retries at once: one run, one effect.

The run is advanced by a real Celery worker; its capability is a non-idempotent write to a loopback
HTTP service whose ledger counts the effects outside the product. Runs on whichever stack the
environment selects (SQLite + embedded broker, or DATABASE_URL / CELERY_BROKER_URL).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from rest_framework.test import APIClient

from capabilities.policy import capability_create
from core.tokens import token_create
from runs.models import Run, RunRequestKey

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BODY = {"goal": "Refund order 17", "planner": "scripted",
        "planner_config": {"plans": [[{"capability": "refund_order", "arguments": {"n": "17"}}]]},
        "budgets": {"deadline_s": 60},
        "completion": {"capability": "refund_order", "path": "n", "equals": "17"}}


def test_retries_of_a_start_with_one_key_make_one_run_and_one_effect(
        celery_worker, settings, registry_admin, operator, ledger_service, wait_until):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    capability_create(user=registry_admin, name="refund_order", kind="http",
                      config={"url": f"http://127.0.0.1:{ledger_service.server_address[1]}/refunds", "method": "POST"},
                      policy={"side_effect": "write", "requires_approval": False, "retry_max_attempts": 1,
                              "timeout_s": 10, "idempotent": False,
                              "schema": {"type": "object", "properties": {"n": {"type": "string"}}, "required": ["n"]}})
    _, key = token_create(user=operator, name="billing job")

    def send(_):
        try:
            api = APIClient()
            api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
            response = api.post("/api/runs/start/", BODY, format="json", HTTP_IDEMPOTENCY_KEY="refund-17")
            return response.status_code, response.json()["id"], response.get("Idempotent-Replayed")
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:   # a client whose first answers were lost, retrying at once
        answers = list(pool.map(send, range(6)))
    assert {status for status, _, _ in answers} == {201}
    assert len({run_id for _, run_id, _ in answers}) == 1
    assert [replayed for _, _, replayed in answers].count(None) == 1   # one request started it
    run_id = answers[0][1]

    run = wait_until(lambda: Run.objects.filter(pk=run_id, status="completed").first(), timeout=60,
                     message="the run to complete")
    assert send(0) == (201, run.pk, "true")   # a retry long after: still the same run, nothing sent again
    assert Run.objects.count() == 1 and RunRequestKey.objects.count() == 1
    assert ledger_service.requests == [("/refunds", "17")]

"""Leak probes, HTTP capabilities: a secret header's value never reaches an attempt, a page, the API, the trace
download or a planner's prompt, even when the webhook answers 200 quoting the request it received."""
from __future__ import annotations

import json
import secrets

import pytest

from capabilities import policy

from .conftest import Recorder, chat_completion

CANARY = f"S3CRET-canary-{secrets.token_hex(6)}"


@pytest.mark.django_db
def test_it_redacts_a_secret_header_echoed_by_a_successful_call(
        settings, monkeypatch, recorder, operator, registry_admin, manual_advance, client_for, api_for, caplog):
    """httpbin's /anything, a debugging proxy: a 200 whose body is the request, our secret header included."""
    from runs import services
    from runs.models import Attempt, Run
    from runs.worker import engine

    llm = Recorder()
    try:
        monkeypatch.setenv("PROBE_UPSTREAM_TOKEN", CANARY)
        settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
        settings.AGENTOPS_LLM_ENDPOINTS = {"fake": {"base_url": f"{llm.url}/v1"}}
        policy.capability_create(user=registry_admin, name="echo", kind="http", config={
            "url": f"{recorder.url}/anything", "secret_headers": {"X-Upstream-Token": "PROBE_UPSTREAM_TOKEN"}},
            policy={"retry_max_attempts": 1, "schema": {"type": "object"}})
        plan = {"steps": [{"id": "s1", "capability": "echo", "arguments": {"q": "x"}, "expected_outcome": "ok"}]}
        llm.responses = [chat_completion(json.dumps(plan)), chat_completion('{"no_further_plan": true}')]
        run = services.run_start(owner=operator, goal="probe", planner="llm",
                                 planner_config={"endpoint": "fake", "model": "m"},
                                 completion={"capability": "echo", "path": "never.there", "exists": True},
                                 budgets={"deadline_s": 60})
        engine.run_advance(run_id=run.pk, worker="t")
        run = Run.objects.get(pk=run.pk)
        assert recorder.requests[0]["headers"].get("X-Upstream-Token") == CANARY   # it was really sent
        attempt = Attempt.objects.get(run=run)
        assert attempt.status == "ok"
        assert CANARY not in json.dumps({"message": attempt.error_message, "output": attempt.output})
        assert len(llm.requests) == 2 and CANARY not in llm.requests[1]["body"]
        shown = [client_for(operator).get(f"/runs/{run.pk}/").content,
                 b"".join(client_for(operator).get(f"/runs/{run.pk}/trace.json").streaming_content),
                 client_for(operator).get(f"/runs/{run.pk}/scenario.json").content,
                 api_for(operator).get(f"/api/runs/{run.pk}/attempts/").content,
                 api_for(operator).get("/api/calls/").content]
        for body in shown:
            assert CANARY.encode() not in body
        assert CANARY not in caplog.text
    finally:
        llm.close()

"""Secrets never appear in messages: registration refuses them in clear, every error text is redacted."""
from __future__ import annotations

import json

import pytest

from capabilities import policy
from capabilities.executors.base import FileOutputStore
from capabilities.executors.secrets import REDACTED, Redactor, is_credential_header
from capabilities.kinds.http.executor import HttpExecutor
from capabilities.netguard import NetGuard
from runs.runtime.capability import CapabilitySpec, Kind
from runs.runtime.observation import ErrorCode

from .conftest import chat_completion

SECRET = "tok-SECRET-7f3a9c"


class TestRedactor:
    def test_it_removes_the_value_in_its_common_encodings(self):
        redact = Redactor([SECRET, "multi\nline-secret-value"])
        text = (f"bad header b'{SECRET}' / {json.dumps(SECRET)} / tok-SECRET-7f3a9c / %s / line-secret-value"
                % "tok-SECRET-7f3a9c".replace("-", "%2D"))
        cleaned = redact(text)
        assert SECRET not in cleaned and "line-secret-value" not in cleaned and REDACTED in cleaned

    def test_short_values_are_left_alone(self):
        assert Redactor(["ab"])("about") == "about"

    @pytest.mark.parametrize("name", ["Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "Api-Key",
                                      "X-Auth-Token", "Private-Token", "X-Vault-Token", "My-Service-Key",
                                      "X-Client-Secret", "X-Session-Id", "Metadata-Flavor", "x_access_token"])
    def test_credential_header_names(self, name):
        assert is_credential_header(name)

    @pytest.mark.parametrize("name", ["Accept", "Content-Type", "X-Request-Id", "Idempotency-Key", "User-Agent"])
    def test_ordinary_header_names(self, name):
        assert not is_credential_header(name)


@pytest.mark.django_db
class TestRegistration:
    @pytest.fixture(autouse=True)
    def allowlist(self, settings):
        settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["api.example.com"]

    @pytest.mark.parametrize("header", ["X-Auth-Token", "Private-Token", "X-Api-Key", "Cookie", "Billing-Key"])
    def test_a_credential_header_in_clear_is_refused(self, api_for, registry_admin, header):
        response = api_for(registry_admin).post("/api/capabilities/", {
            "name": "probe", "kind": "http", "config": {"url": "https://api.example.com/x",
                                                        "headers": {header: "value-in-clear"}}}, format="json")
        assert response.status_code == 400
        assert "secret headers" in " ".join(response.json()["error"]["fields"]["config.headers"])

    @pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "a\nb", "a\rb"])
    def test_a_header_value_with_a_line_break_is_refused(self, api_for, registry_admin, value):
        response = api_for(registry_admin).post("/api/capabilities/", {
            "name": "probe", "kind": "http", "config": {"url": "https://api.example.com/x",
                                                        "headers": {"X-Team": value}}}, format="json")
        assert response.status_code == 400 and "line break" in json.dumps(response.json())


def test_a_secret_with_a_line_break_is_refused_at_call_time_naming_only_the_variable(tmp_path):
    executor = HttpExecutor(guard=NetGuard(["127.0.0.1"]), environ={"TOKEN_VAR": f"{SECRET}\nX-Evil: 1"},
                            output_store=FileOutputStore(tmp_path))
    spec = CapabilitySpec(name="probe", kind=Kind.HTTP, config={"url": "http://127.0.0.1:9/",
                                                                "secret_headers": {"X-Upstream-Token": "TOKEN_VAR"}})
    observation = executor.execute(spec, {})
    assert observation.error_code == ErrorCode.PERMISSION_DENIED
    assert "TOKEN_VAR" in observation.error_message and SECRET not in observation.error_message


@pytest.mark.django_db
def test_an_echoed_secret_is_redacted_from_the_attempt_and_from_the_next_prompt(
        settings, monkeypatch, recorder, operator, registry_admin, manual_advance):
    """A webhook answers 500 quoting our request headers; the LLM planner replans from that attempt."""
    from runs import engine, services
    from runs.models import Attempt, Run

    from .conftest import Recorder

    llm = Recorder()
    try:
        monkeypatch.setenv("UPSTREAM_TOKEN", SECRET)
        settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
        settings.AGENTOPS_LLM_ENDPOINTS = {"fake": {"base_url": f"{llm.url}/v1"}}
        policy.capability_create(user=registry_admin, name="probe", kind="http", config={
            "url": f"{recorder.url}/probe", "method": "POST", "secret_headers": {"X-Upstream-Token": "UPSTREAM_TOKEN"}},
            policy={"retry_max_attempts": 1, "schema": {"type": "object"}})
        # The webhook answers 500 quoting the headers it received (a common debugging aid upstream).
        original = recorder.server.RequestHandlerClass._handle

        def handle(self):
            recorder.responses.append({"status": 500, "json": {"you_sent": dict(self.headers.items())}})
            return original(self)

        monkeypatch.setattr(recorder.server.RequestHandlerClass, "do_POST", handle)
        plan = {"steps": [{"id": "s1", "capability": "probe", "arguments": {}, "expected_outcome": "ok"}]}
        llm.responses = [chat_completion(json.dumps(plan)), chat_completion('{"no_further_plan": true}')]
        run = services.run_start(owner=operator, goal="probe", planner="llm",
                                 planner_config={"endpoint": "fake", "model": "m"},
                                 completion={"capability": "probe", "path": "ok", "exists": True},
                                 budgets={"deadline_s": 60})
        engine.run_advance(run_id=run.pk, worker="t")
        run = Run.objects.get(pk=run.pk)
        assert run.status != "queued" and run.stop_reason != "internal_error"
        attempt = Attempt.objects.get(run=run)
        assert attempt.error_code == "server_error"
        assert SECRET in recorder.requests[0]["headers"].get("X-Upstream-Token", "")   # it was really sent
        stored = json.dumps({"message": attempt.error_message, "output": attempt.output})
        assert SECRET not in stored and REDACTED in stored
        assert len(llm.requests) == 2
        assert SECRET not in llm.requests[1]["body"] and REDACTED in llm.requests[1]["body"]
    finally:
        llm.close()


@pytest.mark.django_db
@pytest.mark.parametrize("usage", ['{"prompt_tokens": 1e300, "completion_tokens": 5}',
                                   '{"prompt_tokens": Infinity, "completion_tokens": -Infinity}',
                                   '{"prompt_tokens": NaN, "total_tokens": -5}',
                                   '{"prompt_tokens": "12", "completion_tokens": [1], "total_tokens": {"a": 1}}',
                                   '{"prompt_tokens": 1e400}'])
def test_absurd_usage_numbers_are_clamped_never_a_crash(settings, recorder, operator, manual_advance, usage):
    from capabilities.sync import python_capabilities_sync
    from runs import engine, services
    from runs.models import Run

    python_capabilities_sync()
    settings.AGENTOPS_LLM_ENDPOINTS = {"fake": {"base_url": f"{recorder.url}/v1"}}
    content = json.dumps(json.dumps({"steps": [{"id": "s1", "capability": "search_documents",
                                                "arguments": {"q": "travel"}, "expected_outcome": "a policy"}]}))
    recorder.responses = [{"status": 200, "raw": '{"choices": [{"message": {"content": ' + content + '}}], "usage": '
                                                 + usage + '}'}]
    run = services.run_start(owner=operator, goal="g", planner="llm", planner_config={"endpoint": "fake", "model": "m"},
                             completion={"capability": "search_documents", "path": "documents.0.id", "exists": True},
                             budgets={"deadline_s": 60})
    engine.run_advance(run_id=run.pk, worker="t")
    run = Run.objects.get(pk=run.pk)
    assert run.status in ("completed", "stopped") and run.stop_reason != "internal_error", run.stop_detail
    assert 0 <= run.tokens <= 200_000_000 and run.cost >= 0
    assert len(recorder.requests) == 1   # not called again by a crashed, re-queued task

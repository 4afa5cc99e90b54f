"""The LLM planner: a run names an endpoint the server configured; nothing else reaches the network."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_a_run_cannot_start_an_llm_planner_without_configured_endpoints(api_for, operator, settings):
    settings.AGENTOPS_LLM_ENDPOINTS = {}
    response = api_for(operator).post("/api/runs/start/", {
        "goal": "g", "completion": {"capability": "search_documents", "path": "documents", "not_empty": True},
        "planner": "llm", "planner_config": {"endpoint": "openai", "model": "m"}}, format="json")
    assert response.status_code == 400
    assert "AGENTOPS_LLM_ENDPOINTS" in str(response.json()["error"]["fields"]["planner_config.endpoint"])


@pytest.mark.parametrize("config", [
    {"base_url": "http://169.254.169.254/v1", "model": "m"},
    {"endpoint": "openai", "model": "m", "api_key_env": "OPENAI_API_KEY"},
    {"endpoint": "openai", "model": "m", "extra_headers": {"Metadata-Flavor": "Google"}},
])
def test_a_run_cannot_bring_its_own_url_key_or_headers(api_for, operator, settings, config):
    settings.AGENTOPS_LLM_ENDPOINTS = {"openai": {"base_url": "https://api.openai.com/v1"}}
    response = api_for(operator).post("/api/runs/start/", {
        "goal": "g", "completion": {"capability": "search_documents", "path": "documents", "not_empty": True},
        "planner": "llm", "planner_config": config}, format="json")
    assert response.status_code == 400 and "planner_config" in response.json()["error"]["fields"]


def test_an_endpoint_removed_mid_run_stops_the_run_with_the_reason(settings, operator, manual_advance, recorder):
    from capabilities.kinds.python.sync import python_capabilities_sync
    from runs import services
    from runs.models import Run
    from runs.worker import engine

    python_capabilities_sync()
    settings.AGENTOPS_LLM_ENDPOINTS = {"gone": {"base_url": f"{recorder.url}/v1"}}
    run = services.run_start(owner=operator, goal="g", planner="llm", planner_config={"endpoint": "gone", "model": "m"},
                             completion={"capability": "search_documents", "path": "documents.0.id", "exists": True},
                             budgets={"deadline_s": 60})
    settings.AGENTOPS_LLM_ENDPOINTS = {}
    engine.run_advance(run_id=run.pk, worker="t")
    run = Run.objects.get(pk=run.pk)
    assert (run.status, run.stop_reason) == ("stopped", "plan_rejected")
    assert "not configured" in run.stop_detail and recorder.requests == []


def test_a_deeply_nested_model_answer_is_a_rejected_plan_not_a_crash():
    from runs.planners.llm import proposal_from_answer

    deep = "[" * 100_000 + "]" * 100_000
    proposal = proposal_from_answer('{"steps": ' + deep + "}", tokens=5, cost=0.0)
    assert proposal.errors[0].code == "malformed_plan" and proposal.tokens == 5


def test_nul_characters_and_lone_surrogates_in_a_model_answer_are_kept_as_the_replacement_character():
    """PostgreSQL keeps no NUL in text or JSON, no driver encodes a lone surrogate: the answer stays storable."""
    from runs.planners.llm import proposal_from_answer

    answer = ('{"steps": [{"id": "s1", "capability": "search_documents", "arguments": {"query": "a\\u0000b\\ud800"}}], '
              '"reason": "r\x00"}')
    proposal = proposal_from_answer(answer, tokens=5, cost=0.0)
    assert not proposal.errors
    assert proposal.plan["steps"][0]["arguments"] == {"query": "a\ufffdb\ufffd"}
    assert proposal.reason == "r\ufffd" and "\x00" not in proposal.raw_output


def test_numbers_json_cannot_write_in_a_model_answer_are_kept_as_their_names():
    """PostgreSQL's JSON has no NaN or Infinity (Python's json reads them, and 1e400 as Infinity)."""
    from runs.planners.llm import proposal_from_answer

    answer = '{"steps": [{"id": "s1", "capability": "search_documents", "arguments": {"k": NaN, "n": [1e400]}}]}'
    proposal = proposal_from_answer(answer, tokens=5, cost=0.0)
    assert proposal.plan["steps"][0]["arguments"] == {"k": "NaN", "n": ["Infinity"]}


def test_deeply_nested_arguments_are_refused_by_the_executor(tmp_path):
    from capabilities.executors.base import FileOutputStore
    from capabilities.kinds.python.executor import PythonExecutor
    from runtime.capability import CapabilitySpec, Kind

    arguments = current = {}
    for _ in range(5_000):
        current["x"] = current = {}
    observation = PythonExecutor(output_store=FileOutputStore(tmp_path)).execute(
        CapabilitySpec(name="f", kind=Kind.PYTHON, config={"function": "m:f"}), arguments)
    assert observation.error_code.value == "invalid_arguments" and "nested too deeply" in observation.error_message

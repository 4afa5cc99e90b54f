"""Requests go to the address the guard checked, for every request an SDK makes (DNS rebinding)."""
from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from capabilities.executors.base import FileOutputStore
from capabilities.kinds.mcp.executor import McpExecutor
from capabilities.netguard import NetGuard
from runs.planners.llm import LLMConfig, LLMPlanner
from runtime.capability import CapabilitySpec, Kind
from runtime.observation import ErrorCode, Status
from runtime.planning import PlanningRequest

from .conftest import chat_completion


def request():
    return PlanningRequest(run_id="r", goal="g", completion=None, capabilities=(), history=(), previous_plan=(),
                           revision=1, remaining_s=30.0)


def test_the_llm_planner_connects_to_the_checked_address_with_the_endpoint_host(recorder):
    # The name exists only in the guard's resolver: reaching the server proves the request was pinned.
    recorder.responses = [chat_completion('{"no_further_plan": true, "reason": "done"}')]
    config = LLMConfig.from_endpoint(
        "internal", {"base_url": f"http://llm.internal.test:{recorder.port}/v1", "allow_private": True,
                     "api_key_env": "K", "headers": {"X-Team": "ops"}},
        {"model": "m"}, environ={"K": "sk-secret-value"}, resolver=lambda host, port: ["127.0.0.1"])
    proposal = LLMPlanner(config, sleep=lambda s: None).propose(request())
    assert proposal.no_further_plan
    sent = recorder.requests[0]
    assert sent["headers"]["Host"] == f"llm.internal.test:{recorder.port}"
    assert sent["headers"]["Authorization"] == "Bearer sk-secret-value" and sent["headers"]["X-Team"] == "ops"


def test_an_llm_endpoint_that_rebinds_to_metadata_is_refused_and_never_answers(recorder):
    config = LLMConfig.from_endpoint("x", {"base_url": f"http://llm.internal.test:{recorder.port}/v1",
                                           "allow_private": True}, {"model": "m"}, environ={},
                                     resolver=lambda host, port: ["169.254.169.254"])
    proposal = LLMPlanner(config, sleep=lambda s: None).propose(request())
    assert "cloud metadata/credential range" in proposal.errors[0].message
    assert recorder.requests == []


def test_an_llm_error_answer_is_not_quoted(recorder):
    recorder.responses = [{"status": 404, "json": {"secret_internal_page": "root:x:0:0"}}]
    config = LLMConfig.from_endpoint("x", {"base_url": f"{recorder.url}/v1"}, {"model": "m", "max_retries": 0},
                                     environ={})
    message = LLMPlanner(config, sleep=lambda s: None).propose(request()).errors[0].message
    assert "404" in message and "root:x" not in message and "secret_internal_page" not in message


@pytest.mark.slow
def test_every_mcp_http_request_goes_through_the_guard(http_mcp_server, tmp_path):
    mcp_http_port = urlsplit(http_mcp_server).port
    """The first answer passes the up-front check; the SDK's own requests then meet a rebinding DNS."""
    answers = iter(["127.0.0.1"])

    def rebinding(host, port):
        return [next(answers, "169.254.169.254")]

    guard = NetGuard(["localhost"], allow_private=True, resolver=rebinding)
    executor = McpExecutor(guard=guard, output_store=FileOutputStore(tmp_path), environ={})
    spec = CapabilitySpec(name="add", kind=Kind.MCP, timeout_s=10,
                          config={"transport": "http", "url": f"http://localhost:{mcp_http_port}/mcp", "tool": "add"})
    observation = executor.execute(spec, {"a": 1, "b": 2})
    # Without the pinned transport the SDK would have resolved localhost itself and succeeded.
    assert observation.status != Status.OK
    assert observation.error_code == ErrorCode.CONNECTION_ERROR and "credential range" in observation.error_message

    steady = NetGuard(["localhost"], allow_private=True, resolver=lambda host, port: ["127.0.0.1"])
    executor = McpExecutor(guard=steady, output_store=FileOutputStore(tmp_path), environ={})
    assert executor.execute(spec, {"a": 1, "b": 2}).output == {"result": 3}


def test_the_client_for_new_egress_uses_the_same_guard(recorder, settings):
    from capabilities.egress import guarded_client
    from capabilities.netguard import URLRefused

    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    with guarded_client() as client:
        assert client.get(f"{recorder.url}/hook").status_code == 200
        with pytest.raises(URLRefused):
            client.get("http://169.254.169.254/latest/")

"""An OpenAI Agents SDK agent through the gateway: MCPServerStreamableHttp against a real uvicorn,
a real Celery worker, and a fake chat-completions model on loopback that scripts the tool calls."""
from __future__ import annotations

import json

import pytest
from sdk_agent import ScriptedModel, run_agent  # noqa: E402 - tests/gateway is on sys.path (its conftest)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def gateway_runs():
    from runs.models import Run

    return list(Run.objects.filter(planner="gateway").order_by("id"))


def test_an_agents_sdk_agent_completes_a_task_through_the_gateway(gateway_stack, agent_token, wait_until):
    from runs.models import Attempt

    _, token = agent_token(name="sdk", completion={"capability": "gw_echo", "path": "echo", "equals": "hello"})
    model = ScriptedModel([("call", "gw_echo", {"text": "hello"}),
                           ("say", lambda outputs: f"The tool said: {outputs[-1]}")])
    try:
        result = run_agent(gateway_stack.mcp, token, model, "Echo hello.")
    finally:
        model.close()
    assert "gw_echo" in {t["function"]["name"] for t in model.requests[0]["tools"]}
    assert json.loads(result.final_output.removeprefix("The tool said: ")) == {"echo": "hello"}
    (run,) = gateway_runs()
    assert run.labels["agent"] == "sdk" and run.labels["mcp_client"]
    wait_until(lambda: (run.refresh_from_db() or run.status) == "completed", timeout=30, message="run completed")
    assert run.stop_reason == "completed"
    assert list(Attempt.objects.filter(run=run).values_list("capability_name", "status")) == [("gw_echo", "ok")]


def test_an_agents_sdk_agent_repeating_a_failing_call_is_stalled(gateway_stack, agent_token, wait_until):
    from runs.models import Attempt

    _, token = agent_token(name="sdk-stall")
    model = ScriptedModel([("call", "gw_flaky", {"q": "x"}), ("call", "gw_flaky", {"q": "x"}),
                           ("call", "gw_echo", {"text": "after"}),
                           ("say", lambda outputs: "\n".join(outputs))])
    try:
        result = run_agent(gateway_stack.mcp, token, model, "Look x up.")
    finally:
        model.close()
    first, second, third = result.final_output.split("\n")
    assert json.loads(first)["error"]["error_code"] == "connection_error" and json.loads(first)["error"]["retryable"]
    assert json.loads(second)["run"]["stop_reason"] == "stalled"
    assert json.loads(third)["run"]["stop_reason"] == "stalled"
    (run,) = gateway_runs()
    run.refresh_from_db()
    assert run.stop_reason == "stalled"
    assert Attempt.objects.filter(run=run, capability_name="gw_echo").count() == 0


def test_an_agents_sdk_agent_that_hits_a_budget_is_told_and_the_run_stops(gateway_stack, agent_token):
    from runs.models import Attempt

    _, token = agent_token(name="sdk-budget", budgets={"max_tool_calls": 2})
    model = ScriptedModel([("call", "gw_echo", {"text": "one"}), ("call", "gw_echo", {"text": "two"}),
                           ("call", "gw_echo", {"text": "three"}), ("call", "gw_echo", {"text": "four"}),
                           ("say", lambda outputs: "\n".join(outputs))])
    try:
        result = run_agent(gateway_stack.mcp, token, model, "Echo four words.")
    finally:
        model.close()
    one, two, three, four = (json.loads(line) for line in result.final_output.split("\n"))
    assert one == {"echo": "one"}
    # The second call spent the last tool call, so the run stops (no further call could run): its
    # result may already say so, if the stop was recorded before it was read; every later call is
    # refused with the reason.
    assert two.get("result", two) == {"echo": "two"}
    assert two.get("run", {"stop_reason": "budget_exhausted:tool_calls"})["stop_reason"] == \
        "budget_exhausted:tool_calls"
    assert three["run"]["stop_reason"] == "budget_exhausted:tool_calls" and three["error"]["retryable"] is False
    assert four["run"]["stop_reason"] == "budget_exhausted:tool_calls"
    (run,) = gateway_runs()
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("stopped", "budget_exhausted:tool_calls")
    attempts = Attempt.objects.filter(run=run).select_related("step").order_by("id")
    assert [a.step.arguments["text"] for a in attempts] == ["one", "two"]

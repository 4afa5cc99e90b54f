"""A LangGraph agent through the gateway: langchain-mcp-adapters' streamable HTTP client, in an environment
of its own (.venv-langgraph: the adapters need mcp<2), against a real uvicorn and a real Celery worker."""
from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HERE = Path(__file__).resolve().parent
CLIENT_PYTHON = Path(os.environ.get("AGENTOPS_LANGGRAPH_PYTHON") or HERE.parents[1] / ".venv-langgraph/bin/python")


def require_client() -> None:
    if not CLIENT_PYTHON.exists():
        pytest.skip(f"the LangGraph client's environment is missing ({CLIENT_PYTHON}): "
                    "`python3 agentops/dev.py test` makes it from tests/gateway/langgraph-requirements.txt")


def run_langgraph_agent(url: str, token: str, script: list) -> dict:
    require_client()
    env = {"PATH": os.environ.get("PATH", ""), "AGENTOPS_MCP_TOKEN": token}  # the token never on the command line
    done = subprocess.run([str(CLIENT_PYTHON), str(HERE / "langgraph_client.py"), url, json.dumps(script)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def gateway_runs():
    from runs.models import Run

    return list(Run.objects.filter(planner="gateway").order_by("id"))


def test_a_langgraph_agent_completes_a_task_through_the_gateway_as_one_governed_run(gateway_stack, agent_token,
                                                                                    wait_until):
    from runs.models import Attempt

    _, token = agent_token(name="langgraph", completion={"capability": "gw_echo", "path": "echo", "equals": "hello"})
    out = run_langgraph_agent(gateway_stack.mcp, token, [["gw_echo", {"text": "hello"}]])
    assert out["tools"] == ["gw_approved", "gw_echo", "gw_flaky"]   # exactly the agent's capabilities
    (result,) = out["results"]
    assert result["status"] == "success" and result["structured"] == {"echo": "hello"}
    (run,) = gateway_runs()
    assert run.labels["agent"] == "langgraph" and run.labels["mcp_client"]
    wait_until(lambda: (run.refresh_from_db() or run.status) == "completed", timeout=30, message="run completed")
    assert run.stop_reason == "completed"
    assert list(Attempt.objects.filter(run=run).values_list("capability_name", "status")) == [("gw_echo", "ok")]


def test_a_langgraph_agent_repeating_a_failing_call_is_stalled_and_told_so(gateway_stack, agent_token):
    from runs.models import Attempt

    _, token = agent_token(name="langgraph-stall")
    out = run_langgraph_agent(gateway_stack.mcp, token, [["gw_flaky", {"q": "x"}], ["gw_flaky", {"q": "x"}],
                                                         ["gw_echo", {"text": "after"}]])
    # isError results reach the graph as error ToolMessages (the adapters' default), their text our JSON.
    assert [r["status"] for r in out["results"]] == ["error", "error", "error"]
    first, second, third = (json.loads(r["text"]) for r in out["results"])
    assert first["error"]["error_code"] == "connection_error" and first["error"]["retryable"] is True
    assert second["run"]["stop_reason"] == "stalled" and third["run"]["stop_reason"] == "stalled"
    assert third["error"]["retryable"] is False   # refused: the run stopped
    (run,) = gateway_runs()
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("stopped", "stalled")
    assert Attempt.objects.filter(run=run, capability_name="gw_echo").count() == 0



def test_a_langgraph_agent_gets_the_result_of_a_call_an_operator_approved_run_once(gateway_stack, agent_token,
                                                                                     second_operator, wait_until):
    from runs import services
    from runs.models import Approval, Attempt
    from tests.binding import bound_hash

    _, token = agent_token(name="langgraph-approval")
    box: dict = {}

    def run_agent():
        try:
            box["out"] = run_langgraph_agent(gateway_stack.mcp, token, [["gw_approved", {"note": "rotate the keys"}]])
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = exc

    require_client()
    agent = threading.Thread(target=run_agent, name="langgraph-agent")
    agent.start()
    try:
        wait_until(lambda: Approval.objects.filter(state="pending", capability_name="gw_approved").exists(),
                   timeout=60, message="the agent's approval request")
        approval = Approval.objects.get(capability_name="gw_approved")
        services.approval_decide(approval_id=approval.pk, user=second_operator, approve=True, channel="api",
                                 expected_hash=bound_hash(approval.pk))
    finally:
        agent.join(timeout=150)
    if "error" in box:
        raise box["error"]
    results = box["out"]["results"]
    # Held, then told "approval pending" (the stack holds 2 s) as often as it asked before the decision;
    # the call after it gets the approved write's result.
    assert all('"approval_pending"' in r["text"] for r in results[:-1])
    assert results[-1]["status"] == "success" and results[-1]["structured"] == {"written": "rotate the keys"}
    assert list(Attempt.objects.filter(run_id=approval.run_id).values_list("capability_name", "status")) == [
        ("gw_approved", "ok")]

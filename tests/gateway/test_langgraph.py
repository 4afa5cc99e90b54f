"""A LangGraph agent through the gateway: langchain-mcp-adapters' streamable HTTP client, in an environment
of its own (.venv-langgraph: the adapters need mcp<2), against a real uvicorn and a real Celery worker."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HERE = Path(__file__).resolve().parent
CLIENT_PYTHON = Path(os.environ.get("AGENTOPS_LANGGRAPH_PYTHON") or HERE.parents[1] / ".venv-langgraph/bin/python")


def run_langgraph_agent(url: str, token: str, script: list) -> dict:
    if not CLIENT_PYTHON.exists():
        pytest.skip(f"the LangGraph client's environment is missing ({CLIENT_PYTHON}): "
                    "`python3 agentops/dev.py test` makes it from tests/gateway/langgraph-requirements.txt")
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


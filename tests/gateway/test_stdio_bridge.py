"""The stdio bridge (gateway/stdio_bridge.py) started by the official mcp stdio client as a subprocess,
relaying to the gateway on a real uvicorn with a real worker."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from threaded import run_in_thread  # tests/gateway is on sys.path (its conftest)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]


def bridge(url: str, token: str) -> Client:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "AGENTOPS_MCP_TOKEN": token}
    return Client(StdioServerParameters(command=sys.executable, args=["-m", "gateway.stdio_bridge", "--url", url],
                                        env=env, cwd=str(ROOT)))


def test_a_stdio_client_lists_and_calls_tools_through_the_bridge_as_a_governed_run(gateway_stack, agent_token):
    from gateway.models import GatewaySession
    from runs.models import Attempt

    _, token = agent_token(name="stdio-agent")

    async def go():
        async with bridge(gateway_stack.mcp, token) as c:
            tools = await c.list_tools()
            ok = await c.call_tool("gw_echo", {"text": "over stdio"})
            refused = await c.call_tool("gw_echo", {"text": 5})
            return sorted(t.name for t in tools.tools), ok, refused

    names, ok, refused = run_in_thread(go, timeout=120)
    assert names == ["gw_approved", "gw_echo", "gw_flaky"]
    assert not ok.is_error and ok.structured_content == {"echo": "over stdio"}
    assert refused.is_error and refused.structured_content["error"]["error_code"] == "invalid_arguments"
    run_id = ok.meta["agentops/run_id"]
    session = GatewaySession.objects.get(run_id=run_id)
    assert session.agent.name == "stdio-agent"
    assert list(Attempt.objects.filter(run_id=run_id).values_list("capability_name", "status")) == [("gw_echo", "ok")]


def test_a_refused_token_reaches_the_stdio_client_as_an_error(gateway_stack, gw_capabilities):
    async def go():
        async with bridge(gateway_stack.mcp, "aog_not-a-token") as c:
            await c.list_tools()

    with pytest.raises(BaseExceptionGroup) as raised:   # the client's task group wraps the refusal
        run_in_thread(go, timeout=60)
    assert raised.group_contains(MCPError, match="^Invalid agent token.$")


def test_the_bridge_refuses_to_start_without_a_token():
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "gateway.stdio_bridge"], env=env, cwd=ROOT, capture_output=True, check=False,
                          text=True, timeout=60)
    assert done.returncode == 2 and "AGENTOPS_MCP_TOKEN" in done.stderr and done.stdout == ""

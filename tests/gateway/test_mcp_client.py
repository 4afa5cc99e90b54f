"""The official mcp client against the gateway: a real uvicorn server, a real Celery worker."""
from __future__ import annotations

import json
import uuid

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from threaded import run_in_thread  # noqa: E402 - tests/gateway is on sys.path (its conftest)

from tests.binding import bound_hash

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def client(url: str, token: str, **kw) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(url, http_client=http), client_info=types.Implementation(name="pytest", version="1.0"),
                  **kw)


def run(coro_fn, *args):
    return run_in_thread(coro_fn, *args)


def test_it_lists_the_agents_tools_and_calls_one_as_a_governed_run(gateway_stack, agent_token, api_for, operator):
    agent, token = agent_token()

    async def go():
        async with client(gateway_stack.mcp, token) as c:
            tools = await c.list_tools()
            result = await c.call_tool("gw_echo", {"text": "hi"})
            return sorted(t.name for t in tools.tools), result

    names, result = run(go)
    assert names == ["gw_approved", "gw_echo", "gw_flaky"]
    assert not result.is_error and result.structured_content == {"echo": "hi"}
    run_id = result.meta["agentops/run_id"]
    assert result.meta["agentops/attempt"] == 1
    body = api_for(operator).get(f"/api/runs/{run_id}/").json()
    assert body["planner"] == "gateway" and body["labels"]["agent"] == "tester"


def test_an_answer_holding_nul_characters_and_lone_surrogates_is_recorded_and_returned(gateway_stack, agent_token):
    """Through the real worker on either database: kept as U+FFFD, and NaN and infinities as their names
    (before, on PostgreSQL, every pass of the run failed to write and the call hung until the call wait
    ended)."""
    from capabilities.kinds.python.sync import python_capabilities_sync
    from runs.models import Attempt

    python_capabilities_sync(modules=("capabilities.demo.functions", "gw_capabilities", "nul_capabilities"))
    agent, token = agent_token(capabilities=("gw_echo", "gw_nul_output", "gw_nul_error", "gw_nonfinite_output"))

    async def go():
        async with client(gateway_stack.mcp, token) as c:
            return (await c.call_tool("gw_nul_output", {"text": "a"}), await c.call_tool("gw_nonfinite_output", {"x": 1}),
                    await c.call_tool("gw_nul_error", {"text": "x"}))

    output, nonfinite, error = run(go)
    kept = {"v": "a\ufffdb", "k\ufffd": 1, "lone": "\ufffd"}
    assert not output.is_error and output.structured_content == kept
    assert Attempt.objects.get(capability_name="gw_nul_output").output == kept
    named = {"x": 1, "nan": "NaN", "inf": ["Infinity", "-Infinity"]}   # NaN and infinities: not JSON
    assert not nonfinite.is_error and nonfinite.structured_content == named
    assert Attempt.objects.get(capability_name="gw_nonfinite_output").output == named
    # A ValueError is the function refusing its arguments: terminal, so the run stops with that reason.
    assert error.is_error and "bad\ufffdx\ufffd" in error.structured_content["error"]["message"]
    assert error.meta["agentops/stop_reason"] == "terminal_failure:invalid_arguments"


def test_a_repeated_failing_call_stalls_the_run_and_later_calls_are_refused(gateway_stack, agent_token):
    agent, token = agent_token()

    async def go():
        async with client(gateway_stack.mcp, token) as c:
            first = await c.call_tool("gw_flaky", {"q": "x"})
            second = await c.call_tool("gw_flaky", {"q": "x"})
            third = await c.call_tool("gw_echo", {"text": "after"})
            return first, second, third

    first, second, third = run(go)
    assert first.is_error and first.structured_content["error"]["error_code"] == "connection_error"
    assert first.structured_content["error"]["retryable"] is True
    assert second.is_error and second.meta["agentops/stop_reason"] == "stalled"
    assert third.is_error and third.meta["agentops/stop_reason"] == "stalled"


def test_a_budget_stops_the_run(gateway_stack, agent_token):
    agent, token = agent_token(budgets={"max_tool_calls": 2})

    async def go():
        async with client(gateway_stack.mcp, token) as c:
            return [await c.call_tool("gw_echo", {"text": str(i)}) for i in range(3)]

    results = run(go)
    assert not results[0].is_error and not results[1].is_error
    assert results[2].is_error and results[2].meta["agentops/stop_reason"] == "budget_exhausted:tool_calls"


def test_an_approval_held_call_is_picked_up_once_decided(gateway_stack, agent_token, second_operator):
    from runs import services
    from runs.models import Approval, Attempt

    agent, token = agent_token()

    async def go():
        async with client(gateway_stack.mcp, token) as c:
            pending = await c.call_tool("gw_approved", {"note": "n1"})
            approval_id = pending.meta["agentops/approval_id"]
            await anyio.to_thread.run_sync(lambda: services.approval_decide(
                approval_id=approval_id, user=second_operator, approve=True,
                channel="api", expected_hash=bound_hash(approval_id)))
            done = await c.call_tool("gw_approved", {"note": "n1"})
            return pending, done

    pending, done = run(go)
    assert pending.is_error and pending.structured_content["error"]["error_code"] == "approval_pending"
    assert Approval.objects.get(pk=pending.meta["agentops/approval_id"]).state == "approved"
    assert not done.is_error and done.structured_content == {"written": "n1"}
    assert Attempt.objects.filter(run_id=done.meta["agentops/run_id"], capability_name="gw_approved").count() == 1


def test_bad_input_gets_clear_errors(gateway_stack, agent_token):
    from mcp.shared.exceptions import MCPError

    agent, token = agent_token()
    _, other = agent_token(name="other")

    async def go():
        out = {}
        async with client(gateway_stack.mcp, token) as c:
            try:
                await c.call_tool("no_such_tool", {})
            except MCPError as e:
                out["unknown"] = e.error.code
            out["wrong_type"] = await c.call_tool("gw_echo", {"text": 5})
            out["oversized"] = await c.call_tool("gw_echo", {"text": "x" * 100_000})
            out["nul"] = await c.call_tool("gw_echo", {"text": "a\x00b"})
            out["ok"] = await c.call_tool("gw_echo", {"text": "still fine"})
        async with httpx2.AsyncClient() as http:
            out["no_token"] = (await http.post(gateway_stack.mcp, json={"jsonrpc": "2.0", "id": 1, "method": "x"})
                               ).status_code
            headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
            out["garbage"] = (await http.post(gateway_stack.mcp, content=b"{not json", headers=headers)).status_code
        return out

    out = run(go)
    assert out["unknown"] == -32602
    assert out["wrong_type"].is_error and out["wrong_type"].structured_content["error"]["error_code"] == \
        "invalid_arguments"
    assert out["oversized"].is_error
    assert out["nul"].structured_content["error"]["error_code"] == "invalid_arguments"
    assert not out["ok"].is_error
    assert out["no_token"] == 401
    assert out["garbage"] == 400


RAW_HEADERS = {"Accept": "application/json, text/event-stream"}
PROTOCOL = "2025-06-18"


async def raw_session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    """Initialize a session by hand (for a client that must drop a stream mid-call); its request headers."""
    init = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
    headers = {"Mcp-Session-Id": init.headers["mcp-session-id"], "Mcp-Protocol-Version": PROTOCOL}
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return headers


def sse_message(text: str, request_id: int) -> dict:
    """The JSON-RPC answer to request_id among a response's server-sent events."""
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            message = json.loads(line[5:])
            if message.get("id") == request_id:
                return message
    raise AssertionError(f"no answer to request {request_id} in {text!r}")


@pytest.mark.parametrize("reissued", ["while_it_runs", "after_it_concluded"])
def test_a_client_that_disconnects_mid_call_gets_the_result_by_the_same_call_run_once(
        gateway_stack, agent_token, api_for, operator, wait_until, reissued):
    from chaos_ledger import effects_by_item, read_ledger

    from runs.models import Attempt

    _, token = agent_token(capabilities=("gw_slow_write", "gw_echo"))
    item = f"gone-{uuid.uuid4().hex[:8]}"   # the ledger is shared by the session's workers
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "gw_slow_write", "arguments": {"item": item, "seconds": 3}}}
    writes = Attempt.objects.filter(capability_name="gw_slow_write")

    async def go():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}", **RAW_HEADERS}, timeout=90) as http:
            headers = await raw_session(http, gateway_stack.mcp)
            async with http.stream("POST", gateway_stack.mcp, json=call, headers=headers) as response:
                assert response.status_code == 200
                # The worker has begun the write (its intent is recorded): the client goes away now.
                await anyio.to_thread.run_sync(lambda: wait_until(writes.exists, timeout=60, message="the write"))
            if reissued == "after_it_concluded":
                await anyio.to_thread.run_sync(lambda: wait_until(
                    writes.filter(status="ok").exists, timeout=60, message="the write's outcome"))
            again = await http.post(gateway_stack.mcp, json={**call, "id": 3}, headers=headers)
            await http.delete(gateway_stack.mcp, headers=headers)   # the session ends, as a client ends it
            return sse_message(again.text, 3)

    answer = run(go)
    assert "error" not in answer, answer
    result = answer["result"]
    assert not result["isError"] and result["structuredContent"]["item"] == item
    # Run once: one attempt, one real effect (counted outside the product), the one whose receipt came back.
    (attempt,) = writes
    assert effects_by_item(gateway_stack.env["CHAOS_LEDGER"], "gw_slow_write").get(item) == 1
    (effect,) = [r for r in read_ledger(gateway_stack.env["CHAOS_LEDGER"])
                 if r.get("kind") == "effect" and r.get("item") == item]
    assert result["structuredContent"]["receipt"] == effect["receipt"]
    # The run's trace records the call, with the span the effect was made under.
    run_id = result["_meta"]["agentops/run_id"]
    assert result["_meta"]["agentops/attempt_id"] == attempt.uid
    traced = api_for(operator).get(f"/api/runs/{run_id}/attempts/").json()["results"]
    assert [(a["capability"], a["observation"]["status"], a["span_id"]) for a in traced] == [
        ("gw_slow_write", "ok", effect["span"])]


def test_a_registry_change_is_announced_to_a_connected_client_and_tools_list_reflects_it(
        gateway_stack, agent_token, registry_admin, operator, wait_until):
    from capabilities import policy
    from capabilities.models import Capability
    from core.models import Project
    from gateway import services
    from gateway.mcp_server import LIST_CHANGED_POLL_S

    agent, token = agent_token()
    announced: list = []

    async def on_message(message) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            announced.append(message)

    def changed_to(count: int, change) -> None:
        change()
        wait_until(lambda: len(announced) >= count, timeout=60, message=f"list_changed #{count}")

    async def go():
        async with client(gateway_stack.mcp, token, message_handler=on_message) as c:
            listed = [sorted(t.name for t in (await c.list_tools()).tools)]
            # A capability added for the agent.
            await anyio.to_thread.run_sync(changed_to, 1, lambda: services.agent_save(
                user=registry_admin, name=agent.name, owner=operator,
                capabilities=["gw_echo", "gw_flaky", "gw_approved", "gw_slow"]))
            listed.append(sorted(t.name for t in (await c.list_tools()).tools))
            # Another project's registry changes (a new project gets the code's capabilities): this
            # session's project did not, so it hears nothing (three polls pass).
            await anyio.sleep(2 * LIST_CHANGED_POLL_S)   # whatever the first change announced has arrived
            heard = len(announced)
            await anyio.to_thread.run_sync(lambda: Project.objects.create(slug="elsewhere", name="Elsewhere"))
            await anyio.sleep(3 * LIST_CHANGED_POLL_S)
            assert len(announced) == heard
            # A capability disabled in the registry.
            flaky = await anyio.to_thread.run_sync(lambda: Capability.objects.get(name="gw_flaky"))
            await anyio.to_thread.run_sync(changed_to, heard + 1, lambda: policy.capability_set_enabled(
                user=registry_admin, capability_id=flaky.pk, enabled=False))
            listed.append(sorted(t.name for t in (await c.list_tools()).tools))
            return listed

    first, added, disabled = run(go)
    assert first == ["gw_approved", "gw_echo", "gw_flaky"]
    assert added == ["gw_approved", "gw_echo", "gw_flaky", "gw_slow"]
    assert disabled == ["gw_approved", "gw_echo", "gw_slow"]


def test_an_approval_is_bound_to_the_exact_arguments(gateway_stack, agent_token, second_operator):
    from runs import services
    from runs.models import Approval, Attempt

    _, token = agent_token()
    executed = Attempt.objects.filter(capability_name="gw_approved")

    async def go():
        async with client(gateway_stack.mcp, token) as c:
            pending = await c.call_tool("gw_approved", {"note": "n1"})
            approval_id = pending.meta["agentops/approval_id"]
            await anyio.to_thread.run_sync(lambda: services.approval_decide(
                approval_id=approval_id, user=second_operator, approve=True,
                channel="api", expected_hash=bound_hash(approval_id)))
            # At once the same tool with other arguments: it waits while the approved call runs (the
            # run carries it out without the agent asking again), then is a new request, not that approval.
            return pending, await c.call_tool("gw_approved", {"note": "n2"})

    pending, other = run(go)
    first_id, other_id = pending.meta["agentops/approval_id"], other.meta.get("agentops/approval_id")
    assert other.is_error and other.structured_content["error"]["error_code"] == "approval_pending"
    assert other_id is not None and other_id != first_id
    first, second = Approval.objects.get(pk=first_id), Approval.objects.get(pk=other_id)
    assert (first.state, first.arguments) == ("approved", {"note": "n1"})
    assert (second.state, second.arguments) == ("pending", {"note": "n2"})
    assert second.arguments_hash != first.arguments_hash
    assert [a.step.arguments for a in executed.select_related("step")] == [{"note": "n1"}]
    # Its session ended, the run waits for that decision (not for an idle timeout) to stop.
    services.approval_decide(approval_id=other_id, user=second_operator, approve=False, channel="api",
                             expected_hash=bound_hash(other_id))


def test_a_call_to_an_upstream_mcp_capability_is_proxied(gateway_stack, agent_token, stdio_allowed, settings):
    from capabilities.kinds.mcp import servers

    settings.AGENTOPS_MCP_STDIO_COMMANDS = ["python -m mcp_server_time"]   # as the stack's worker allows
    clock = servers.mcp_server_create(user=stdio_allowed, name="clock", transport="stdio", command="python",
                                      args=["-m", "mcp_server_time"])
    servers.mcp_tools_import(user=stdio_allowed, server_id=clock.pk, tools=[
        {"name": "get_current_time", "capability_name": "clock_now", "side_effect": "none",
         "requires_approval": False, "retry_max_attempts": 1, "timeout_s": 20}])
    _, token = agent_token(capabilities=("clock_now", "gw_echo"))

    async def go():
        async with client(gateway_stack.mcp, token) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            return tools, await c.call_tool("clock_now", {"timezone": "Etc/UTC"})

    tools, result = run(go)
    assert "timezone" in tools["clock_now"].input_schema["properties"]   # the upstream server's own schema
    assert not result.is_error, result.structured_content
    assert result.structured_content["timezone"] == "Etc/UTC" and result.structured_content["datetime"]
    assert result.meta["agentops/attempt"] == 1

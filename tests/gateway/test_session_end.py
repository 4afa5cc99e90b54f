"""How a gateway session's run ends when the agent does not end it: the session's idle timeout, its
client's close, the run's deadline. Each stops the run with a truthful reason, and a later call is
refused saying so. A real uvicorn (idle timeout 3 s), a real Celery worker, the official mcp client."""
from __future__ import annotations

import httpx2
import mcp_types as types
import pytest
from conftest import running_stack, stack_env  # noqa: E402 - tests/gateway is on sys.path (its conftest)
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from threaded import run_in_thread

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

IDLE_S = 3
PROTOCOL = "2025-06-18"


@pytest.fixture(scope="module")
def idle_stack(django_db_setup, django_db_blocker, wait_until):
    with django_db_blocker.unblock():
        env = {**stack_env(), "AGENTOPS_GATEWAY_IDLE_TIMEOUT_S": str(IDLE_S)}
    with running_stack(wait_until, env) as stack:
        yield stack


def client(url: str, token: str, **kw) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(url, http_client=http, **kw),
                  client_info=types.Implementation(name="pytest", version="1.0"))


def one_call(url: str, token: str, **kw):
    async def go():
        async with client(url, token, **kw) as c:
            return await c.call_tool("gw_echo", {"text": "hi"})

    return run_in_thread(go)


def later_call(url: str, token: str, session_id: str) -> httpx2.Response:
    """A tools/call in the ended session, as a client that never learnt it ended would send it."""
    async def go():
        async with httpx2.AsyncClient(timeout=60) as http:
            return await http.post(url, json={"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                                              "params": {"name": "gw_echo", "arguments": {"text": "late"}}},
                                   headers={"Authorization": f"Bearer {token}", "Mcp-Session-Id": session_id,
                                            "Mcp-Protocol-Version": PROTOCOL,
                                            "Accept": "application/json, text/event-stream"})

    return run_in_thread(go)


def stopped(run):
    run.refresh_from_db()
    return run.is_finished


def test_an_idle_session_ends_its_run_saying_so_and_a_later_call_is_refused(idle_stack, agent_token, wait_until):
    from gateway.models import GatewaySession
    from runs.models import Run

    _, token = agent_token()
    # The client goes away without closing the session (no DELETE): nothing is in flight any more.
    result = one_call(idle_stack.mcp, token, terminate_on_close=False)
    assert not result.is_error
    run = Run.objects.get(pk=result.meta["agentops/run_id"])
    wait_until(lambda: stopped(run), timeout=60, message="the idle session's run to stop")
    assert (run.status, run.stop_reason) == ("stopped", "session_ended")
    assert f"idle for {IDLE_S} s" in run.stop_detail
    session = GatewaySession.objects.get(run=run)
    assert f"idle for {IDLE_S} s" in session.end_reason

    late = later_call(idle_stack.mcp, token, session.mcp_session_id)
    assert late.status_code == 404   # the protocol's answer: initialize a new session
    message = late.json()["error"]["message"]
    assert message.startswith("Session not found") and f"idle for {IDLE_S} s" in message
    assert f"run {run.pk} stopped session_ended" in message


def test_a_session_its_client_closed_ends_its_run_saying_so(idle_stack, agent_token, wait_until):
    from gateway import mcp_server
    from runs.models import Run

    _, token = agent_token()
    result = one_call(idle_stack.mcp, token)   # the client closes its session (DELETE) on leaving
    run = Run.objects.get(pk=result.meta["agentops/run_id"])
    wait_until(lambda: stopped(run), timeout=60, message="the closed session's run to stop")
    assert (run.stop_reason, run.stop_detail) == ("session_ended", mcp_server.CLIENT_CLOSED)


@pytest.mark.parametrize("stopped_by", ["the_next_call", "the_scheduler"])
def test_the_run_deadline_stops_a_live_session_and_every_later_call_is_refused(
        idle_stack, agent_token, wait_until, stopped_by):
    from django.utils import timezone

    from runs.models import Attempt, Run
    from runs.worker.sweeps import sweep_overdue_runs

    _, token = agent_token(budgets={"deadline_s": 4})

    async def go(after_deadline):
        async with client(idle_stack.mcp, token) as c:   # its GET stream keeps the session from idling
            first = await c.call_tool("gw_echo", {"text": "in time"})
            run_id = first.meta["agentops/run_id"]
            await after_deadline(run_id)
            return first, [await c.call_tool("gw_echo", {"text": f"late {n}"}) for n in range(2)]

    async def after_deadline(run_id):
        import anyio

        def passed():
            run = Run.objects.get(pk=run_id)
            wait_until(lambda: timezone.now() > run.deadline_at, timeout=60, message="the deadline")
            if stopped_by == "the_scheduler":   # as its beat does, every few seconds
                wait_until(lambda: sweep_overdue_runs() or stopped(run), timeout=60, message="the sweep")

        await anyio.to_thread.run_sync(passed)

    first, late = run_in_thread(go, after_deadline)
    assert not first.is_error
    for answer in late:
        assert answer.is_error and answer.meta["agentops/stop_reason"] == "budget_exhausted:deadline"
        assert answer.structured_content["error"]["retryable"] is False
    run = Run.objects.get(pk=first.meta["agentops/run_id"])
    assert (run.status, run.stop_reason) == ("stopped", "budget_exhausted:deadline")
    assert list(Attempt.objects.filter(run=run).values_list("status", flat=True)) == ["ok"]   # nothing ran late

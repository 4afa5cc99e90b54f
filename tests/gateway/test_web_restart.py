"""A web process SIGKILLed with an MCP session open: its session lived in that process's memory, so
nobody will ever close it. The lost-session sweep ends it and its run stops session_ended, while a
session on the web process that carries on (the restarted one) is left alone."""
from __future__ import annotations

import os
import signal

import anyio
import httpx2
import mcp_types as types
import pytest
from conftest import (  # tests/gateway is on sys.path (its conftest)
    _free_port,
    port_open,
    running_stack,
    stack_env,
    start_web,
)
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from threaded import run_in_thread  # tests/gateway is on sys.path (its conftest)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
LOST_S = 2   # the web processes vouch for their sessions every LOST_S / 4


@pytest.fixture
def restart_stack(django_db_blocker, wait_until):
    with django_db_blocker.unblock():
        env = {**stack_env(), "AGENTOPS_GATEWAY_SESSION_LOST_S": str(LOST_S)}
    with running_stack(wait_until, env) as stack:
        port = _free_port()
        stack.after_restart = start_web(env, port)
        stack.after_restart_mcp = f"http://127.0.0.1:{port}/mcp/"
        try:
            wait_until(lambda: port_open(port), timeout=60, message="the second uvicorn")
            yield stack
        finally:
            stack.after_restart.terminate()
            stack.after_restart.wait(timeout=20)


def client(url: str, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(url, http_client=http), client_info=types.Implementation(name="restart", version="1"))


def test_a_session_lost_with_its_killed_web_process_is_ended_by_the_sweep(restart_stack, agent_token, wait_until,
                                                                         settings):
    from gateway import services
    from gateway.models import GatewaySession
    from runs.models import Run

    settings.AGENTOPS_GATEWAY_SESSION_LOST_S = LOST_S
    _, token = agent_token(name="restart")

    async def go():
        async with client(restart_stack.mcp, token) as lost, client(restart_stack.after_restart_mcp, token) as kept:
            before = await lost.call_tool("gw_echo", {"text": "before the kill"})
            first = await kept.call_tool("gw_echo", {"text": "on the live process"})
            os.kill(restart_stack.web.pid, signal.SIGKILL)
            await anyio.to_thread.run_sync(restart_stack.web.wait)
            await anyio.sleep(LOST_S * 2)   # past the sweep's patience; the live process vouched meanwhile
            swept = await anyio.to_thread.run_sync(services.sessions_lost_end)
            after = await kept.call_tool("gw_echo", {"text": "after the sweep"})
            return before, first, swept, after

    before, first, swept, after = run_in_thread(go, timeout=120)
    assert not before.is_error and not first.is_error
    assert swept == 1
    assert not after.is_error and after.structured_content == {"echo": "after the sweep"}

    lost_run = Run.objects.get(pk=before.meta["agentops/run_id"])
    wait_until(lambda: (lost_run.refresh_from_db() or lost_run.stop_reason) == "session_ended", timeout=30,
               message="the lost session's run stopped")
    assert "lost" in lost_run.stop_detail
    lost_session = GatewaySession.objects.get(run=lost_run)
    assert lost_session.ended_at is not None and lost_session.end_reason == services.LOST_REASON
    kept_session = GatewaySession.objects.get(run_id=first.meta["agentops/run_id"])
    assert kept_session.end_reason != services.LOST_REASON   # closed by its client, not swept
    assert services.sessions_lost_end() == 0   # nothing left to sweep: twice is harmless


def test_the_sweep_runs_on_the_schedule():
    from django.conf import settings

    from gateway.tasks import end_lost_sessions

    entry = next(e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == end_lost_sessions.name)
    assert entry["schedule"] <= settings.AGENTOPS_GATEWAY_SESSION_LOST_S

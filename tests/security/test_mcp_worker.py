"""MCP tools where runs execute: a real Celery worker calls a real stdio server (mcp-server-time from PyPI)
and a real streamable-HTTP server inside runs, and Try it goes through the same worker.

Runs on whichever stack the environment selects (SQLite + embedded broker, or DATABASE_URL /
CELERY_BROKER_URL for PostgreSQL + Redis).
"""
from __future__ import annotations

import os
import time

import pytest

from capabilities import policy
from capabilities.kinds.mcp import servers
from capabilities.kinds.python import sync
from core.models import AuditEvent
from runs import services
from runs.models import Attempt, Run
from tests.conftest import running_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TIME_SERVER = {"command": "python", "args": ["-m", "mcp_server_time"]}
READ_ONLY = {"side_effect": "none", "requires_approval": False, "retry_max_attempts": 1, "timeout_s": 20}


@pytest.fixture
def fresh_worker(own_task_queue):
    """A worker of this test's own, on a queue of its own: its stdio session pool starts empty (the
    session's worker may keep a session of the same command from an earlier test)."""
    with running_worker(own_task_queue.env, hostname=f"mcp-{time.time_ns()}", concurrency=2) as proc:
        yield proc


def _register(settings, admin, http_mcp_server):
    settings.AGENTOPS_MCP_STDIO_COMMANDS = ["python -m mcp_server_time", "python -m agentops_no_such_mcp_server"]
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    clock = servers.mcp_server_create(user=admin, name="clock", transport="stdio", **TIME_SERVER)
    remote = servers.mcp_server_create(user=admin, name="remote", transport="http", url=http_mcp_server)
    servers.mcp_tools_import(user=admin, server_id=clock.pk,
                              tools=[{"name": "get_current_time", "capability_name": "clock_now", **READ_ONLY}])
    servers.mcp_tools_import(user=admin, server_id=remote.pk,
                              tools=[{"name": "add", "capability_name": "remote_add", **READ_ONLY}])
    return clock, remote


def _finished(run_id):
    run = Run.objects.get(pk=run_id)
    return run if run.status in ("completed", "stopped", "cancelled") else None


def _run(owner, steps, completion, wait_until):
    run = services.run_start(owner=owner, goal="Use MCP tools", planner="scripted",
                             planner_config={"plans": [steps]}, completion=completion, budgets={"deadline_s": 90})
    return wait_until(lambda: _finished(run.pk), timeout=90, message=f"run {run.pk} to finish")


def test_a_run_calls_a_stdio_and_an_http_mcp_tool_on_a_real_worker(
        fresh_worker, settings, stdio_allowed, operator, http_mcp_server, wait_until):
    clock, _remote = _register(settings, stdio_allowed, http_mcp_server)
    steps = [{"id": "now", "capability": "clock_now", "arguments": {"timezone": "Etc/UTC"}},
             {"id": "sum", "capability": "remote_add", "arguments": {"a": 2, "b": 3}, "depends_on": ["now"]}]
    run = _run(operator, steps, {"capability": "remote_add", "path": "result", "equals": 5}, wait_until)
    attempts = {a.capability_name: a for a in Attempt.objects.filter(run=run)}
    assert run.status == "completed", (run.stop_reason, run.stop_detail,
                                       [(a.capability_name, a.error_message) for a in attempts.values()])
    assert attempts["clock_now"].status == "ok" and attempts["clock_now"].output["timezone"] == "Etc/UTC"
    assert attempts["remote_add"].output == {"result": 5}

    # A second run reuses the worker's stdio session: no second start of the server.
    again = _run(operator, steps[:1], {"capability": "clock_now", "path": "timezone", "equals": "Etc/UTC"},
                 wait_until)
    assert again.status == "completed"
    starts = AuditEvent.objects.filter(action="mcp_server.started", target_id=str(clock.pk),
                                       details__purpose="call")
    assert starts.count() == 1
    start = starts.get()
    assert start.details["command"] == ["python", "-m", "mcp_server_time"]
    assert start.details["pid"] != os.getpid() and start.details["run_id"] == run.pk

    # Try it goes through the same worker (and its pooled session), and leaves an audit row.
    api = __import__("rest_framework.test", fromlist=["APIClient"]).APIClient()
    api.force_authenticate(operator)
    tried = api.post("/api/capabilities/clock_now/try/", {"arguments": {"timezone": "Europe/Paris"}}, format="json")
    assert tried.status_code == 200, tried.json()
    assert tried.json()["status"] == "ok" and tried.json()["output"]["timezone"] == "Europe/Paris"
    assert AuditEvent.objects.filter(action="capability.tried", actor=operator).count() == 1
    assert starts.count() == 1


def test_a_stdio_server_that_fails_reports_its_stderr_on_the_attempt(
        celery_worker, settings, stdio_allowed, operator, wait_until):
    settings.AGENTOPS_MCP_STDIO_COMMANDS = ["python -m agentops_no_such_mcp_server"]
    broken = servers.mcp_server_create(user=stdio_allowed, name="broken", transport="stdio", command="python",
                                        args=["-m", "agentops_no_such_mcp_server"])
    # The tool cannot be listed from a server that does not start: register it by hand.
    policy.capability_create(user=stdio_allowed, name="broken_tool", kind="mcp", mcp_server=broken.pk,
                               config={"tool": "anything"}, policy={**READ_ONLY, "schema": {"type": "object"}})
    run = _run(operator, [{"id": "s1", "capability": "broken_tool", "arguments": {}}],
               {"capability": "broken_tool", "path": "x", "exists": True}, wait_until)
    attempt = Attempt.objects.filter(run=run).first()
    assert run.stop_reason != "internal_error"
    assert attempt.error_code == "connection_error"
    assert "No module named agentops_no_such_mcp_server" in attempt.error_message


def test_try_it_says_clearly_when_no_worker_answers(settings, operator):
    """No worker consumes the queue Try it sends to: the page gets a 503 saying what to do."""
    settings.AGENTOPS_TRY_QUEUE = "no-worker-listens-here"
    settings.AGENTOPS_TRY_WAIT_SECONDS = 1
    sync.python_capabilities_sync()
    api = __import__("rest_framework.test", fromlist=["APIClient"]).APIClient()
    api.force_authenticate(operator)
    response = api.post("/api/capabilities/search_documents/try/", {"arguments": {"q": "x"}}, format="json")
    # search_documents has a timeout of a few seconds: the wait is that plus one.
    assert response.status_code == 503 and "No worker" in response.json()["error"]["message"]

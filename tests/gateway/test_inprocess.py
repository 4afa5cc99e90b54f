"""The gateway's pieces in this process (no subprocess, no worker process): token auth, tools/list
filtering, result and isError mapping, argument validation, session binding, one call at a time.

The ASGI app is served through httpx's in-process transport; where a call must conclude, an
inline worker (a thread running the real engine, runs.worker.engine.run_advance) stands in for Celery.
"""
from __future__ import annotations

import asyncio
import json
import threading
from datetime import timedelta

import httpx2
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from threaded import run_in_thread  # noqa: E402 - tests/gateway is on sys.path (its conftest)

from tests.binding import bound_hash

pytestmark = pytest.mark.django_db(transaction=True)

ACCEPT = "application/json, text/event-stream"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}}


@pytest.fixture
def no_worker(monkeypatch):
    """Nothing advances runs: a call stays in flight until the call wait ends."""
    from runs.worker import queue

    monkeypatch.setattr(queue, "advance_later", lambda run_id, countdown=None: None)


@pytest.fixture
def inline_worker(monkeypatch):
    """Every send of a run's task advances it in a thread of this process with the real engine."""
    from django.db import close_old_connections

    from runs.worker import engine, queue

    threads = []
    ended = threading.Event()   # the test is over: a countdown still running is not waited out

    def drive(run_id, countdown):
        try:
            while True:
                if ended.wait(min(countdown or 0, 5)):   # a task's countdown, as the broker honours it
                    return
                countdown = engine.run_advance(run_id=run_id, worker="inline")
                if countdown is None:
                    return
        finally:
            close_old_connections()

    def send(run_id, countdown=None):
        thread = threading.Thread(target=drive, args=(run_id, countdown), daemon=True)
        threads.append(thread)
        thread.start()

    monkeypatch.setattr(queue, "advance_later", send)
    yield
    ended.set()
    for thread in threads:
        thread.join(timeout=10)


def serve(coro_fn):
    """Run coro_fn(http_for) against a fresh gateway app (its session manager runs once per app)."""
    from agentops.asgi import Router

    router = Router()

    def http_for(token: str | None, **headers) -> httpx2.AsyncClient:
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=router), base_url="http://gateway",
                                  headers=headers, timeout=30)

    async def main():
        async with router.session_manager.run():
            return await coro_fn(http_for)

    return run_in_thread(main)


def mcp_client(http_for, token: str) -> Client:
    return Client(streamable_http_client("http://gateway/mcp/", http_client=http_for(token)),
                  client_info=types.Implementation(name="inprocess", version="1.0"))


async def initialize(http, **headers) -> httpx2.Response:
    return await http.post("/mcp/", json=INIT, headers={"Accept": ACCEPT, **headers})


class TestTokenAuth:
    def test_a_missing_wrong_expired_or_revoked_token_is_a_401(self, agent_token, registry_admin):
        from django.utils import timezone

        from gateway import services
        from gateway.models import AgentToken

        agent, token = agent_token()
        expired, expired_key = services.agent_token_issue(user=None, agent=agent)
        AgentToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        revoked, revoked_key = services.agent_token_issue(user=None, agent=agent)
        services.agent_token_revoke(user=None, token_id=revoked.pk)

        async def go(http_for):
            answers = {}
            for label, key in (("none", None), ("wrong", "aog_not-a-key"), ("expired", expired_key),
                               ("revoked", revoked_key), ("good", token)):
                async with http_for(key) as http:
                    response = await initialize(http)
                    answers[label] = (response.status_code, response.text)
            return answers

        answers = serve(go)
        assert answers["good"][0] == 200
        assert answers["none"][0] == 401 and "Bearer" in answers["none"][1]
        assert answers["wrong"] == (401, answers["wrong"][1]) and "Invalid agent token" in answers["wrong"][1]
        assert answers["expired"][0] == 401 and "expired" in answers["expired"][1]
        assert answers["revoked"][0] == 401 and "revoked" in answers["revoked"][1]

    def test_a_disabled_agent_is_refused(self, agent_token, registry_admin):
        from gateway.models import Agent

        agent, token = agent_token()
        Agent.objects.filter(pk=agent.pk).update(enabled=False)

        async def go(http_for):
            async with http_for(token) as http:
                return await initialize(http)

        response = serve(go)
        assert response.status_code == 401 and "disabled" in response.text

    def test_an_agent_whose_owner_was_deactivated_is_refused_saying_so(self, agent_token, operator):
        agent, token = agent_token()
        operator.is_active = False
        operator.save(update_fields=["is_active"])

        async def go(http_for):
            async with http_for(token) as http:
                return await initialize(http)

        response = serve(go)
        assert response.status_code == 401
        assert "'otto'" in response.text and "deactivated" in response.text and "active owner" in response.text


class TestToolsList:
    def test_it_lists_only_the_agents_enabled_capabilities_its_owner_may_use(self, agent_token):
        from capabilities.models import Capability

        agent, token = agent_token(capabilities=("gw_echo", "gw_flaky", "gw_approved", "gw_admin_only"))
        Capability.objects.filter(name="gw_flaky").update(enabled=False)

        async def go(http_for):
            async with mcp_client(http_for, token) as c:
                return (await c.list_tools()).tools

        tools = {t.name: t for t in serve(go)}
        assert sorted(tools) == ["gw_approved", "gw_echo"]  # gw_flaky disabled; gw_admin_only not the owner's
        assert tools["gw_echo"].input_schema["properties"]["text"]["type"] == "string"
        assert tools["gw_approved"].annotations.destructive_hint is True
        assert "approval" in tools["gw_approved"].description
        assert tools["gw_echo"].annotations.read_only_hint is True

    def test_a_second_listing_at_one_registry_version_reads_no_capability(self, agent_token):
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from gateway.selectors import tools_for

        agent, _ = agent_token(capabilities=("gw_echo", "gw_flaky"))
        first = tools_for(agent)
        with CaptureQueriesContext(connection) as queries:
            again = tools_for(agent)
        assert [s.name for s in again] == [s.name for s in first] == ["gw_echo", "gw_flaky"]
        reads = [q["sql"] for q in queries if "capabilities_capability" in q["sql"]]
        assert len(reads) == 1 and "MAX(" in reads[0]   # the version; the specs are the process's

    def test_a_capability_disabled_between_two_listings_is_gone_from_the_next_and_refused(self, agent_token,
                                                                                        registry_admin, no_worker):
        """The tool list is the process's specs at the registry's version (shared with a worker's runs): a
        change through the registry moves the version, so the next listing and call read it."""
        from asgiref.sync import sync_to_async

        from capabilities.models import Capability
        from capabilities.policy import capability_set_enabled

        agent, token = agent_token(capabilities=("gw_echo", "gw_flaky"))
        flaky = Capability.objects.get(name="gw_flaky").pk

        async def go(http_for):
            async with mcp_client(http_for, token) as c:
                before = sorted(t.name for t in (await c.list_tools()).tools)
                await sync_to_async(capability_set_enabled)(user=registry_admin, capability_id=flaky, enabled=False)
                after = sorted(t.name for t in (await c.list_tools()).tools)
                try:
                    await c.call_tool("gw_flaky", {})
                except MCPError as refused:
                    return before, after, str(refused)
                return before, after, "called"

        before, after, call = serve(go)
        assert before == ["gw_echo", "gw_flaky"] and after == ["gw_echo"]
        assert "Unknown tool: 'gw_flaky'" in call


class TestCalls:
    def test_an_ok_result_is_structured_content_and_a_failure_an_is_error_result(self, agent_token, inline_worker):
        agent, token = agent_token()

        async def go(http_for):
            async with mcp_client(http_for, token) as c:
                return await c.call_tool("gw_echo", {"text": "hi"}), await c.call_tool("gw_flaky", {"q": "x"})

        ok, failed = serve(go)
        assert not ok.is_error and ok.structured_content == {"echo": "hi"}
        assert ok.meta["agentops/attempt"] == 1 and ok.meta["agentops/run_id"]
        error = failed.structured_content["error"]
        assert failed.is_error and error["error_code"] == "connection_error" and error["retryable"] is True
        assert failed.content[0].text.startswith("{")

    def test_bad_arguments_are_answered_at_once_and_never_proposed(self, agent_token, no_worker):
        from runs.models import PlanRevision

        agent, token = agent_token()

        async def go(http_for):
            async with mcp_client(http_for, token) as c:
                out = {"wrong_type": await c.call_tool("gw_echo", {"text": 5}),
                       "missing": await c.call_tool("gw_echo", {}),
                       "extra": await c.call_tool("gw_echo", {"text": "a", "evil": 1})}
                with pytest.raises(MCPError) as unknown:
                    await c.call_tool("no_such_tool", {})
                out["unknown"] = unknown.value.error.code
                return out

        out = serve(go)
        for name in ("wrong_type", "missing", "extra"):
            assert out[name].is_error, name
            assert out[name].structured_content["error"]["error_code"] == "invalid_arguments", name
        assert out["unknown"] == -32602
        assert not PlanRevision.objects.exists()

    def test_nul_characters_and_lone_surrogates_in_an_answer_are_kept_as_the_replacement_character(
            self, agent_token, inline_worker):
        """PostgreSQL keeps no NUL in JSON or text: a tool answering one must not leave its run unwritable
        (before, every pass failed on PostgreSQL and the call hung until the call wait ended)."""
        from capabilities.kinds.python.sync import python_capabilities_sync
        from runs.models import Attempt, Run

        python_capabilities_sync(modules=("capabilities.demo.functions", "gw_capabilities", "nul_capabilities"))
        _agent, token = agent_token(capabilities=("gw_echo", "gw_nul_output", "gw_nul_error"))

        async def go(http_for):
            async with mcp_client(http_for, token) as c:
                return (await c.call_tool("gw_echo", {"text": "a\x00b"}), await c.call_tool("gw_nul_output", {"text": "a"}),
                        await c.call_tool("gw_nul_error", {"text": "x"}))

        refused, output, error = serve(go)
        assert refused.is_error and refused.structured_content["error"]["error_code"] == "invalid_arguments"
        assert "NUL character" in refused.structured_content["error"]["message"]
        kept = {"v": "a\ufffdb", "k\ufffd": 1, "lone": "\ufffd"}
        assert not output.is_error and output.structured_content == kept
        assert error.is_error and "bad\ufffdx\ufffd" in error.structured_content["error"]["message"]
        assert [a.output for a in Attempt.objects.order_by("started_at")][:1] == [kept]
        assert Run.objects.get().status != "internal_error"

    def test_numbers_json_cannot_write_are_refused_in_arguments_and_kept_as_their_names_in_answers(
            self, agent_token, inline_worker):
        """PostgreSQL's JSON has no NaN or Infinity: a call's arguments holding one were proposed and the
        proposal's write failed ("could not handle tools/call"); a tool answering one must not leave its
        run unwritable."""
        from capabilities.kinds.python.sync import python_capabilities_sync
        from runs.models import Attempt, Run

        python_capabilities_sync(modules=("capabilities.demo.functions", "gw_capabilities", "nul_capabilities"))
        _agent, token = agent_token(capabilities=("gw_nonfinite_output",))

        async def go(http_for):
            async with http_for(token) as http:   # raw: the official client writes NaN as null
                headers = {"Accept": ACCEPT, "Content-Type": "application/json", "Mcp-Protocol-Version": "2025-06-18",
                           "Mcp-Session-Id": (await initialize(http)).headers["mcp-session-id"]}
                await http.post("/mcp/", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
                answers = []
                for n, x in enumerate(("NaN", "-Infinity", "1e400", "2.5"), start=2):
                    body = (f'{{"jsonrpc": "2.0", "id": {n}, "method": "tools/call", "params": '
                            f'{{"name": "gw_nonfinite_output", "arguments": {{"x": {x}}}}}}}')
                    answer = await http.post("/mcp/", content=body.encode(), headers=headers)
                    answers.append(next(json.loads(line[5:]) for line in answer.text.splitlines()
                                        if line.startswith("data:") and line[5:].strip())["result"])
                return answers

        *refused, answered = serve(go)
        for result in refused:
            assert result["isError"] and result["structuredContent"]["error"]["error_code"] == "invalid_arguments"
            assert "NaN, Infinity" in result["structuredContent"]["error"]["message"]
        named = {"x": 2.5, "nan": "NaN", "inf": ["Infinity", "-Infinity"]}
        assert not answered["isError"] and answered["structuredContent"] == named
        assert Attempt.objects.get().output == named
        assert Run.objects.get().status != "internal_error"

    def test_malformed_json_rpc_is_a_clear_invalid_request_and_runs_nothing(self, agent_token, inline_worker):
        """A request id that is neither a string nor an integer was taken by the SDK for a notification:
        202 and never an answer, the client waiting forever; a batch got a pydantic dump."""
        from runs.models import Attempt

        _agent, token = agent_token()
        call = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "gw_echo", "arguments": {"text": "x"}}}
        bodies = {"object id": json.dumps({**call, "id": {"a": 1}}), "true id": json.dumps({**call, "id": True}),
                  "float id": json.dumps({**call, "id": 1.5}), "null id": json.dumps({**call, "id": None}),
                  "empty batch": "[]", "batch": json.dumps([{**call, "id": 7}, {**call, "id": 8}])}

        async def go(http_for):
            async with http_for(token) as http:
                headers = {"Accept": ACCEPT, "Content-Type": "application/json", "Mcp-Protocol-Version": "2025-06-18",
                           "Mcp-Session-Id": (await initialize(http)).headers["mcp-session-id"]}
                await http.post("/mcp/", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
                answers = {name: await http.post("/mcp/", content=body.encode(), headers=headers)
                           for name, body in bodies.items()}
                answers["too large"] = await http.post("/mcp/", content=b" " * 1_100_000 + b"{}", headers=headers)
                answers["string id"] = await http.post("/mcp/", json={**call, "id": "s-1"}, headers=headers)
                return answers

        answers = serve(go)
        for name in bodies:
            assert answers[name].status_code == 400, name
            error = answers[name].json()["error"]
            assert error["code"] == -32600 and "Invalid Request" in error["message"], name
        assert "batch" in answers["batch"].json()["error"]["message"]
        assert "string or an integer" in answers["object id"].json()["error"]["message"]
        assert answers["too large"].status_code == 413
        assert answers["string id"].status_code == 200 and '"id":"s-1"' in answers["string id"].text
        assert Attempt.objects.count() == 1   # the well-formed call alone

    def test_a_client_whose_name_holds_a_nul_character_opens_its_session(self, agent_token):
        from runs.models import Run

        _agent, token = agent_token()
        init = json.dumps({**INIT, "params": {**INIT["params"], "clientInfo": {"name": "ra\x00w", "version": "0\x00"}}})

        async def go(http_for):
            async with http_for(token) as http:
                return await http.post("/mcp/", content=init.encode(),
                                       headers={"Accept": ACCEPT, "Content-Type": "application/json"})

        response = serve(go)
        assert response.status_code == 200 and '"error"' not in response.text
        assert Run.objects.get().goal == "MCP session of agent tester (ra\ufffdw 0\ufffd)"

    def test_another_token_using_the_session_id_is_refused(self, agent_token):
        agent, token = agent_token()
        _, other = agent_token(name="other")

        async def go(http_for):
            async with http_for(token) as http:
                session_id = (await initialize(http)).headers["mcp-session-id"]
            listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
            headers = {"Accept": ACCEPT, "Mcp-Session-Id": session_id, "Mcp-Protocol-Version": "2025-06-18"}
            async with http_for(other) as http:
                return await http.post("/mcp/", json=listing, headers=headers)

        response = serve(go)
        assert response.status_code == 404
        assert "gw_echo" not in response.text

    def test_a_second_concurrent_call_in_one_session_is_refused(self, agent_token, inline_worker):
        from runs.models import Attempt

        agent, token = agent_token(capabilities=("gw_slow", "gw_echo"))

        async def go(http_for):
            async with mcp_client(http_for, token) as c:
                first = asyncio.ensure_future(c.call_tool("gw_slow", {"seconds": 1.0}))
                await asyncio.sleep(0.4)   # the first is proposed and runs
                with pytest.raises(MCPError) as second:
                    await c.call_tool("gw_echo", {"text": "two"})
                return await first, second.value.error

        first, error = serve(go)
        assert error.code == -32600 and "one call at a time" in error.message
        assert not first.is_error and first.structured_content == {"slept": 1.0}
        assert list(Attempt.objects.values_list("capability_name", flat=True)) == ["gw_slow"]

    def test_a_call_after_the_owner_lost_the_role_to_start_runs_is_refused_as_permission_denied(
            self, agent_token, inline_worker, operator, caplog):
        """Not "try again": no call of the session can be proposed until an operator restores the
        owner's role, and the client is told so (terminal, not retryable), with nothing logged as a bug."""
        import logging

        from asgiref.sync import sync_to_async

        from core.models import ProjectMembership
        from core.project_access import grant_role
        from runs.models import Attempt

        _agent, token = agent_token()

        def demote():   # still sees the capabilities (a viewer does), may no longer start runs
            ProjectMembership.objects.filter(user=operator, role__name="operator").delete()
            grant_role(operator, "viewer")

        async def go(http_for):
            async with mcp_client(http_for, token) as c:
                first = await c.call_tool("gw_echo", {"text": "a"})
                await sync_to_async(demote)()
                return first, await c.call_tool("gw_echo", {"text": "b"})

        with caplog.at_level(logging.WARNING, logger="gateway.mcp_server"):
            first, refused = serve(go)
        assert not first.is_error
        error = refused.structured_content["error"]
        assert refused.is_error and error["error_code"] == "permission_denied" and error["retryable"] is False
        assert "otto" in error["message"] and "restore" in error["message"]
        assert list(Attempt.objects.values_list("output__echo", flat=True)) == ["a"]
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class TestUnexpectedFailures:
    """A request that fails unexpectedly gets an answer the client can act on, never the exception's text."""

    def failing_call(self, token, monkeypatch, exc):
        from gateway import services

        def fail(**kwargs):
            raise exc

        monkeypatch.setattr(services, "call_submit", fail)

        async def go(http_for):
            async with mcp_client(http_for, token) as c:
                with pytest.raises(MCPError) as failed:
                    await c.call_tool("gw_echo", {"text": "hi"})
                # The session goes on: the next request is answered.
                return failed.value.error, [t.name for t in (await c.list_tools()).tools]

        return serve(go)

    def test_a_database_outage_says_to_try_again_without_its_internals(self, agent_token, no_worker, monkeypatch):
        from django.db import OperationalError

        _agent, token = agent_token()
        error, tools = self.failing_call(token, monkeypatch, OperationalError(
            "deadlock detected\nDETAIL:  Process 7631 waits for ShareLock on transaction 5188\n"
            "CONTEXT:  while locking tuple (0,1) in relation \"auth_user\""))
        assert error.code == -32603
        assert error.message == "The database is unavailable; try again shortly."
        assert "gw_echo" in tools

    def test_a_bug_is_logged_and_answered_without_its_text(self, agent_token, no_worker, monkeypatch):
        import logging

        # A handler on the gateway's own logger: caplog's, on the root logger, once missed this record in the
        # full suite (it reached stderr all the same).
        records: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = records.append
        logger = logging.getLogger("gateway.mcp_server")
        logger.addHandler(handler)
        try:
            _agent, token = agent_token()
            error, _tools = self.failing_call(token, monkeypatch, RuntimeError("internal detail: /srv/secret.py"))
        finally:
            logger.removeHandler(handler)
        assert error.code == -32603
        assert "tools/call" in error.message and "log" in error.message
        assert "internal detail" not in error.message
        assert any(r.exc_info and "internal detail" in str(r.exc_info[1]) for r in records)


    def test_a_background_round_logs_an_outage_once_and_its_end_and_a_bug_with_its_traceback(self, caplog):
        """The gateway's rounds (vouching for sessions, tools/list_changed) retry every few seconds: an
        outage is a warning when it starts and when it ends, not a traceback per round."""
        import logging

        from django.db import OperationalError

        from gateway.mcp_server import _Rounds

        rounds = _Rounds("read the registry's version")
        with caplog.at_level(logging.WARNING, logger="gateway.mcp_server"):
            for _ in range(3):
                rounds.failed(OperationalError("connection refused"))
            rounds.succeeded()
            rounds.succeeded()
            rounds.failed(KeyError("project"))
        lines = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records]
        assert lines == [
            ("WARNING", "could not read the registry's version: database unavailable (OperationalError); "
                        "trying again each round", False),
            ("WARNING", "read the registry's version again: the database is back", False),
            ("ERROR", "could not read the registry's version", True)]

    def test_a_call_whose_answer_and_hold_the_database_failed_is_picked_up_by_the_same_call(
            self, agent_token, inline_worker, monkeypatch, wait_until):
        """The database fails while a proposed call waits for its outcome, and again when the call is held:
        the client is told to try again, and the same call then gets the first one's outcome: run once."""
        from django.db import OperationalError

        from gateway import selectors, services
        from runs.models import Attempt

        _agent, token = agent_token()
        real_outcome, real_hold = selectors.call_outcome, services.call_hold
        failures = {"call_outcome": 1, "call_hold": 1}

        def failing(name, real):
            def call(**kwargs):
                if failures[name]:
                    failures[name] -= 1
                    raise OperationalError("server closed the connection unexpectedly")
                return real(**kwargs)
            return call

        monkeypatch.setattr(selectors, "call_outcome", failing("call_outcome", real_outcome))
        monkeypatch.setattr(services, "call_hold", failing("call_hold", real_hold))

        self.assert_run_once_when_called_again(token, first_concludes=lambda: asyncio.to_thread(
            wait_until, lambda: Attempt.objects.filter(status="ok").exists()))

    def assert_run_once_when_called_again(self, token, first_concludes=None):
        """The first call is answered "try again" (the database failed it); the same call again gets the
        capability's result from its first and only attempt."""
        from runs.models import Attempt

        async def go(http_for):
            async with mcp_client(http_for, token) as c:
                with pytest.raises(MCPError) as failed:
                    await c.call_tool("gw_echo", {"text": "once"})
                if first_concludes is not None:
                    await first_concludes()
                return failed.value.error, await c.call_tool("gw_echo", {"text": "once"})

        error, again = serve(go)
        assert error.message == "The database is unavailable; try again shortly."
        assert not again.is_error and again.structured_content == {"echo": "once"}
        assert again.meta["agentops/attempt"] == 1
        assert Attempt.objects.count() == 1


    def submit_failing_once(self, monkeypatch, wait_until, *, committed: bool):
        """call_submit fails once with a database error: after its commit (the acknowledgement lost, and
        with it the commit's wake-up of the worker) or before it (nothing stored). The first proposal is
        made once the run waits for it with no worker holding it, so only a new wake-up advances it."""
        from django.db import OperationalError

        from gateway import services
        from runs.models import Run
        from runs.planners.external import awaited_revision
        from runs.worker import queue

        real_submit, failures = services.call_submit, [1]

        def submit(**kwargs):
            if not failures:
                return real_submit(**kwargs)
            failures.pop()
            wait_until(lambda: (lambda run: awaited_revision(run) == 1 and run.lease_expires_at is None)(
                Run.objects.get()), timeout=20, message="the run waits for its first call")
            if committed:
                with pytest.MonkeyPatch.context() as lost:
                    lost.setattr(queue, "advance_later", lambda run_id, countdown=None: None)
                    real_submit(**kwargs)
            raise OperationalError("server closed the connection unexpectedly")

        monkeypatch.setattr(services, "call_submit", submit)

    @pytest.mark.parametrize("committed", [True, False], ids=["acknowledgement-lost", "not-committed"])
    def test_a_call_whose_proposal_the_database_failed_runs_once_when_called_again(
            self, agent_token, inline_worker, monkeypatch, wait_until, committed):
        """The database fails the proposal: the client is told to try again. Whether or not the proposal
        was stored (its commit's acknowledgement lost, or no commit at all), the same call again runs the
        capability once and answers its result; a stored proposal is not proposed a second time, and the
        run is woken for it (the commit's wake-up was lost with the acknowledgement)."""
        from runs.models import PlanSubmission

        _agent, token = agent_token()
        self.submit_failing_once(monkeypatch, wait_until, committed=committed)
        self.assert_run_once_when_called_again(token)
        assert list(PlanSubmission.objects.filter(no_further_plan=False).values_list("revision", flat=True)) == [1]

    def test_another_call_after_a_stored_proposal_the_database_failed_runs_after_it(
            self, agent_token, inline_worker, monkeypatch, wait_until):
        """The stored proposal (its acknowledgement lost) is carried out once, and a different call next
        waits for it and is then proposed as the revision after it, never over it."""
        from runs.models import Attempt

        _agent, token = agent_token()
        self.submit_failing_once(monkeypatch, wait_until, committed=True)

        async def go(http_for):
            async with mcp_client(http_for, token) as c:
                with pytest.raises(MCPError):
                    await c.call_tool("gw_echo", {"text": "first"})
                return await c.call_tool("gw_echo", {"text": "second"})

        other = serve(go)
        assert not other.is_error and other.structured_content == {"echo": "second"}
        assert sorted(Attempt.objects.values_list("step__revision__number", "output__echo")) == [
            (1, "first"), (2, "second")]

    def test_a_database_outage_at_the_token_lookup_is_a_503(self, agent_token, monkeypatch):
        from django.db import OperationalError

        from gateway import asgi

        _agent, token = agent_token()

        def down(key):
            raise OperationalError('connection to server at "db.internal" (10.0.0.5), port 5432 failed')

        monkeypatch.setattr(asgi, "bearer_for", down)

        async def go(http_for):
            async with http_for(token) as http:
                return await initialize(http)

        response = serve(go)
        assert response.status_code == 503 and response.headers["retry-after"] == "5"
        assert response.json()["error"] == {"code": -32603, "message": "The database is unavailable; try again shortly."}
        assert "db.internal" not in response.text


class TestWakeUps:
    """A held call ends on the worker's wake-up (runs.wakeups); the timed re-read is only the net."""

    def calls(self, token):
        async def go(http_for):
            async with mcp_client(http_for, token) as c:
                return [await c.call_tool("gw_echo", {"text": str(n)}) for n in range(3)]

        return serve(go)

    def test_the_workers_wake_up_answers_the_call(self, agent_token, inline_worker, monkeypatch):
        from gateway import mcp_server

        # No timed re-read before the test's own timeout: only a wake-up can answer these calls.
        monkeypatch.setattr(mcp_server, "WOKEN_FIRST_S", 600.0)
        monkeypatch.setattr(mcp_server, "WOKEN_MAX_S", 600.0)
        _, token = agent_token()
        results = self.calls(token)
        assert [r.structured_content for r in results] == [{"echo": "0"}, {"echo": "1"}, {"echo": "2"}]

    def test_a_lost_wake_up_is_caught_by_the_re_read(self, agent_token, inline_worker, monkeypatch):
        from runs import wakeups

        monkeypatch.setattr(wakeups, "announce", lambda run_id: None)   # every wake-up lost
        _, token = agent_token()
        results = self.calls(token)
        assert [r.structured_content for r in results] == [{"echo": "0"}, {"echo": "1"}, {"echo": "2"}]


    def test_a_call_before_the_runs_first_pass_waits_for_the_run_instead_of_being_refused(
            self, agent_token, inline_worker, monkeypatch):
        from runs.worker import queue

        send, sends = queue.advance_later, []

        def backlogged(run_id, countdown=None):   # the run's start waits in a busy broker for a while
            sends.append(run_id)
            send(run_id, 2.0 if len(sends) == 1 else countdown)

        monkeypatch.setattr(queue, "advance_later", backlogged)
        _, token = agent_token()
        (result,) = self.calls(token)[:1]
        assert not result.is_error and result.structured_content == {"echo": "0"}


class TestSessionEndedDuringAnApproval:
    """A session that ended while its run waited on an approval: the run ends when the request is
    decided or expires, with what truly happened (not left waiting for its deadline)."""

    def ended_while_pending(self, agent_token, settings):
        from gateway.models import GatewaySession
        from runs.models import Run

        settings.AGENTOPS_GATEWAY_APPROVAL_HOLD_S = 0
        _, token = agent_token()

        async def go(http_for):
            async with mcp_client(http_for, token) as c:
                return await c.call_tool("gw_approved", {"note": "n1"})

        pending = serve(go)   # the client closes its session here, the approval still pending
        assert pending.structured_content["error"]["error_code"] == "approval_pending"
        run = Run.objects.get(pk=pending.meta["agentops/run_id"])
        assert run.status == "awaiting_approval" and GatewaySession.objects.get(run=run).ended_at is not None
        return run, pending.meta["agentops/approval_id"]

    @pytest.mark.parametrize("approve, stop_reason, executed", [(True, "session_ended", 1),
                                                                (False, "approval_rejected", 0)])
    def test_it_stops_once_the_approval_is_decided(self, agent_token, inline_worker, settings, second_operator,
                                                   wait_until, approve, stop_reason, executed):
        from runs import services
        from runs.models import Attempt

        run, approval_id = self.ended_while_pending(agent_token, settings)
        services.approval_decide(approval_id=approval_id, user=second_operator, approve=approve,
                                 channel="api", expected_hash=bound_hash(approval_id))
        wait_until(lambda: (run.refresh_from_db() or run.is_finished), timeout=20, message="the run stopped")
        assert run.stop_reason == stop_reason
        assert Attempt.objects.filter(run=run, capability_name="gw_approved", status="ok").count() == executed

    def test_it_stops_when_the_approval_expires(self, agent_token, inline_worker, settings, wait_until):
        from django.utils import timezone

        from runs.models import Approval
        from runs.worker.sweeps import sweep_expired_approvals

        run, approval_id = self.ended_while_pending(agent_token, settings)
        Approval.objects.filter(pk=approval_id).update(expires_at=timezone.now() - timedelta(seconds=1))
        # As the scheduler does: the sweep passes over a run a worker holds at that moment.
        wait_until(lambda: sweep_expired_approvals() or (run.refresh_from_db() or run.is_finished), timeout=20,
                   interval=0.5, message="the run stopped")
        run.refresh_from_db()
        assert run.stop_reason == "approval_expired"

    def test_a_call_after_the_session_ended_is_refused(self, agent_token, no_worker):
        from gateway import services
        from gateway.models import GatewaySession

        _, token = agent_token()

        async def go(http_for):
            async with mcp_client(http_for, token) as c:
                await c.list_tools()

        serve(go)
        session = GatewaySession.objects.get()
        with pytest.raises(services.CallRefused, match="session ended"):
            services.call_submit(session_id=session.pk, capability="gw_echo", arguments={"text": "late"})


class TestResultMapping:
    """gateway.results on records built here: what each outcome tells the agent."""

    def attempt(self, **fields):
        from runs.models import Attempt

        return Attempt(number=1, uid="a1", **fields)

    def concluded(self, attempt=None, stop_reason="", errors=()):
        from gateway.selectors import Concluded

        return Concluded(attempt, "stopped" if stop_reason else "running", stop_reason, "detail", list(errors))

    def test_a_non_object_output_is_wrapped(self):
        from gateway import results

        result = results.concluded(7, self.concluded(self.attempt(status="ok", output=[1, 2])))
        assert not result.is_error and result.structured_content == {"result": [1, 2]}
        assert result.meta == {"agentops/run_id": 7, "agentops/attempt": 1, "agentops/attempt_id": "a1"}

    def test_an_ok_call_that_stopped_the_run_says_so(self):
        from gateway import results

        result = results.concluded(7, self.concluded(self.attempt(status="ok", output={"a": 1}),
                                                     stop_reason="budget_exhausted:tool_calls"))
        assert not result.is_error and result.structured_content["run"]["stop_reason"] == "budget_exhausted:tool_calls"
        assert result.meta["agentops/stop_reason"] == "budget_exhausted:tool_calls"

    def test_a_terminal_failure_says_it_is_not_retryable(self):
        from gateway import results

        attempt = self.attempt(status="terminal", error_code="permission_denied", error_category="authorization",
                               error_message="no")
        error = results.concluded(7, self.concluded(attempt)).structured_content["error"]
        assert error["retryable"] is False and error["error_code"] == "permission_denied"

    def test_a_timeout_says_when_to_retry(self):
        from gateway import results

        attempt = self.attempt(status="retryable", error_code="timeout", retry_after_s=2.5,
                               retry_guidance="retry after 2.5 s")
        result = results.concluded(7, self.concluded(attempt))
        assert result.is_error
        error = result.structured_content["error"]
        assert (error["retryable"], error["retry_after_s"], error["retry_guidance"]) == (True, 2.5, "retry after 2.5 s")

    def test_a_call_that_may_have_committed_is_not_retryable_whatever_its_error_class(self):
        """A non-idempotent write lost with its worker: repeating it (from a new session, say) may do it twice."""
        from gateway import results
        from runtime.observation import ErrorCategory, SideEffectStatus, guidance_for

        unknown = guidance_for(ErrorCategory.TRANSIENT, SideEffectStatus.UNKNOWN)
        attempt = self.attempt(status="retryable", error_code="connection_error", side_effect_status="unknown",
                               retry_guidance=unknown)
        error = results.concluded(7, self.concluded(attempt, stop_reason="terminal_failure:outcome_unknown")
                                  ).structured_content["error"]
        assert (error["retryable"], error["side_effect"]) == (False, "unknown")
        assert "never repeat blindly" in error["retry_guidance"]

    def test_rejected_arguments_are_invalid_arguments(self):
        from gateway import results

        result = results.concluded(7, self.concluded(errors=[{"path": "text", "message": "not a string"}]))
        assert result.is_error and result.structured_content["error"]["error_code"] == "invalid_arguments"

    def test_a_run_stopped_before_the_call_is_refused_with_its_reason(self):
        from gateway import results

        result = results.concluded(7, self.concluded(stop_reason="approval_rejected"))
        assert result.is_error and result.meta["agentops/stop_reason"] == "approval_rejected"

    def test_approval_pending_names_the_request_and_its_expiry(self):
        from django.utils import timezone

        from gateway import results
        from runs.models import Approval

        approval = Approval(pk=5, capability_name="gw_approved", expires_at=timezone.now())
        result = results.approval_pending(7, approval)
        assert result.is_error and result.meta["agentops/approval_id"] == 5
        assert result.structured_content["error"]["error_code"] == "approval_pending"

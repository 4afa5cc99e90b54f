"""The web tier cannot be starved (issue 34, item 4), on the production layout the README gives:
uvicorn serving agentops.asgi with two worker processes, on loopback, against the test database.

The attacks of the issue, each in a bounded loop: 40 long polls (GET .../planning/?wait=25) from
one viewer, and 80 unauthenticated slowloris sockets. /healthz must answer while they are open,
and one long poll past the per-user cap (set to 40 here) is refused with 429 and Retry-After.

AGENTOPS_TEST_WEB_LAYOUT=gthread runs the same tests against the layout the README used to give
(gunicorn agentops.wsgi -k gthread --workers 2 --threads 16): there they fail, as the issue found.
"""
from __future__ import annotations

import http.client
import json
import os
import select
import socket

import pytest

pytestmark = [pytest.mark.slow]
CAP = 40


@pytest.fixture
def server(web_server):
    return web_server(layout=os.environ.get("AGENTOPS_TEST_WEB_LAYOUT", "uvicorn"),
                      env={"AGENTOPS_LONG_POLL_MAX_PER_USER": str(CAP)})


def _open_request(port: int, raw: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(raw.encode())
    return sock


def _answered(sock: socket.socket) -> bool:
    """Has the server sent anything on this socket yet (without waiting)?"""
    return bool(select.select([sock], [], [], 0)[0])


@pytest.fixture
def world(transactional_db, manual_advance, viewer, operator):
    """An external run that needs nothing now (its first plan submitted, nobody advancing it yet): a long poll on
    it waits its full time."""
    from capabilities.kinds.python.sync import python_capabilities_sync
    from core.tokens import token_create
    from runs import services

    python_capabilities_sync()
    run = services.run_start(owner=operator, goal="Wait", planner="external", budgets={"deadline_s": 300},
                             completion={"capability": "search_documents", "path": "documents.0.id", "exists": True})
    services.plan_submit(run_id=run.pk, user=operator, revision=1, steps=[
        {"id": "s1", "capability": "search_documents", "arguments": {"q": "travel"}, "expected_outcome": "found"}])
    _, key = token_create(user=viewer, name="poller")
    return type("World", (), {"run": run, "viewer": viewer, "token": key})


def _open_polls(user) -> int:
    from runs.models import OpenLongPoll

    return OpenLongPoll.objects.filter(user=user).count()


def _poll_request(run_id: int, credentials: str) -> str:
    return (f"GET /api/runs/{run_id}/planning/?wait=25 HTTP/1.1\r\nHost: 127.0.0.1\r\n{credentials}"
            "Connection: close\r\n\r\n")


def test_healthz_answers_while_one_viewer_holds_40_long_polls_and_the_41st_is_refused(server, world, wait_until):
    credentials = f"Authorization: Token {world.token}\r\n"
    polls = []
    try:
        for _ in range(CAP):
            polls.append(_open_request(server.port, _poll_request(world.run.pk, credentials)))
        wait_until(lambda: _open_polls(world.viewer) == CAP, timeout=30,
                   message=f"{CAP} long polls held at once (held: the count in OpenLongPoll)")
        status, _, body = server.get("/healthz")
        assert status == 200 and json.loads(body)["database"] == "ok"
        assert not any(_answered(sock) for sock in polls), "the long polls ended before /healthz was asked"
        status, headers, body = server.get(f"/api/runs/{world.run.pk}/planning/?wait=25",
                                     {"Authorization": f"Token {world.token}"})
        assert status == 429, body
        assert int(headers["Retry-After"]) >= 1
        assert json.loads(body)["error"]["code"] == "too_many_requests"
        assert "AGENTOPS_LONG_POLL_MAX_PER_USER" in json.loads(body)["error"]["message"]
        # A poll that needs no wait is not refused: the cap counts open long polls only.
        assert server.get(f"/api/runs/{world.run.pk}/planning/", {"Authorization": f"Token {world.token}"})[0] == 200
    finally:
        for sock in polls:
            sock.close()
    # A client that goes away frees its slot.
    wait_until(lambda: _open_polls(world.viewer) == 0, timeout=30, message="the slots freed")


def test_healthz_answers_with_80_slowloris_sockets_open(server, world):
    sockets = []
    try:
        for n in range(80):
            sock = _open_request(server.port, f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow-{n}: ")
            sockets.append(sock)
        for sock in sockets:   # one more dribble each: the headers never end
            sock.sendall(b"a")
        status, _, body = server.get("/healthz")
        assert status == 200 and json.loads(body)["database"] == "ok"
        # And a long poll is still served (held, not refused) while they hang on.
        status, _, body = server.get(f"/api/runs/{world.run.pk}/planning/?wait=1",
                               {"Authorization": f"Token {world.token}"})
        assert status == 200 and json.loads(body)["needs_plan"] is False
    finally:
        for sock in sockets:
            sock.close()


def test_a_signed_in_long_poll_wakes_when_the_worker_takes_the_run(server, world, celery_worker, monkeypatch,
                                                                     operator, wait_until):
    """Session authentication, as the browser's: held like a token's, and answered when the run changes."""
    from django.conf import settings
    from django.test import Client

    from runs import services

    client = Client()
    client.force_login(operator)
    cookie = f"Cookie: {settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}\r\n"
    poll = _open_request(server.port, _poll_request(world.run.pk, cookie))
    try:
        wait_until(lambda: _open_polls(operator) == 1, timeout=30, message="the signed-in long poll held")
        monkeypatch.undo()   # manual_advance: the real worker takes the run from here
        services._enqueue_advance(world.run.pk)
        response = http.client.HTTPResponse(poll)
        poll.settimeout(20)   # before the poll's own 25 s: the wake answered it
        response.begin()
        need = json.loads(response.read())
        assert response.status == 200 and need["status"] in ("running", "completed"), need
        assert {"search_documents", "create_ticket"} <= {c["name"] for c in need["capabilities"]}
    finally:
        poll.close()
    wait_until(lambda: _open_polls(operator) == 0, timeout=30, message="the slot freed")


def test_an_anonymous_long_poll_is_answered_at_once(server, world):
    status, _, body = server.get(f"/api/runs/{world.run.pk}/planning/?wait=25", timeout=15)
    assert status in (401, 403) and json.loads(body)["error"]["code"] == "not_authenticated"
    status, _, body = server.get(f"/api/runs/{world.run.pk}/planning/?wait=99",
                           {"Authorization": f"Token {world.token}"}, timeout=15)
    assert status == 400 and "wait" in json.loads(body)["error"]["fields"]
    status, _, _ = server.get("/api/runs/999999/planning/?wait=25", {"Authorization": f"Token {world.token}"},
                        timeout=15)
    assert status == 404

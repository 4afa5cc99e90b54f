"""A database outage answers 503 with JSON naming what is down, through the real servers.

gunicorn (gthread workers) and uvicorn (ASGI: the web and the MCP gateway) are started against a
PostgreSQL address where nothing listens, so every query fails the way it does while the database
restarts.
"""
import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_without_database(tmp_path_factory, *command: str):
    """The server `command` (its address appended) on a free port, with a database address where nothing
    listens; yields its URL and its log's path."""
    port, dead_db = free_port(), free_port()
    log_path = tmp_path_factory.mktemp("log") / "server.log"
    env = {"PATH": "/usr/bin:/bin", "DATABASE_URL": f"postgres://postgres@127.0.0.1:{dead_db}/nowhere",
           "AGENTOPS_VAR_DIR": str(tmp_path_factory.mktemp("var")), "DEBUG": "false",
           "SECRET_KEY": "x" * 50, "ALLOWED_HOSTS": "127.0.0.1", "SECURE_SSL_REDIRECT": "false",
           "PYTHONPATH": str(ROOT)}
    address = ["-b", f"127.0.0.1:{port}"] if "gunicorn" in command else ["--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen([sys.executable, "-m", *command, *address], cwd=ROOT, env=env,
                            stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    try:
        for _ in range(150):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", log_path
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def web_without_database(tmp_path_factory):
    with serve_without_database(tmp_path_factory, "gunicorn", "agentops.wsgi", "-k", "gthread", "--threads", "4",
                                "--log-level", "warning") as served:
        yield served


@pytest.fixture(scope="module")
def asgi_without_database(tmp_path_factory):
    with serve_without_database(tmp_path_factory, "uvicorn", "agentops.asgi:application",
                                "--log-level", "warning") as served:
        yield served


def fetch(url, data=None, headers=None):
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def test_healthz_says_the_database_is_down(web_without_database):
    web_without_database, _ = web_without_database
    status, headers, body = fetch(f"{web_without_database}/healthz")
    assert status == 503 and headers["Content-Type"] == "application/json"
    data = json.loads(body)
    assert data["database"] == "unavailable" and "database" in data["down"]


def test_the_api_answers_a_json_503_not_an_html_500(web_without_database):
    web_without_database, _ = web_without_database
    status, headers, body = fetch(f"{web_without_database}/api/runs/start/", data=b'{"goal": "x"}',
                                  headers={"Content-Type": "application/json", "Authorization": "Token abc"})
    assert status == 503 and headers["Content-Type"] == "application/json"
    assert headers["Retry-After"]
    assert json.loads(body)["error"]["code"] == "service_unavailable"


def test_pages_answer_503(web_without_database):
    web_without_database, _ = web_without_database
    # A session cookie makes the page look its user up in the database.
    status, _, body = fetch(f"{web_without_database}/runs/", headers={"Cookie": "sessionid=" + "a" * 32})
    assert status == 503 and b"unavailable" in body


def test_each_503_is_logged_as_a_warning_naming_the_database_not_as_a_500(web_without_database):
    url, log_path = web_without_database
    fetch(f"{url}/api/runs/", headers={"Authorization": "Token abc"})
    fetch(f"{url}/runs/", headers={"Cookie": "sessionid=" + "b" * 32})
    log = log_path.read_text()
    assert "WARNING agentops.outages: database unavailable: GET /api/runs/ answered 503" in log, log
    assert "WARNING agentops.outages: database unavailable: GET /runs/ answered 503" in log, log
    assert "Internal Server Error" not in log and "ERROR" not in log, log


def test_the_gateway_answers_503_saying_to_try_again_not_a_500(asgi_without_database):
    """An agent's MCP request whose token cannot be looked up: a JSON-RPC error saying the database is
    unavailable and when to try again, and a warning in the log; no traceback, no internals."""
    url, log_path = asgi_without_database
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "outage-test", "version": "1"}}}
    status, headers, body = fetch(f"{url}/mcp/", data=json.dumps(initialize).encode(),
                                  headers={"Content-Type": "application/json",
                                           "Accept": "application/json, text/event-stream",
                                           "Authorization": "Bearer aog_" + "c" * 40})
    assert status == 503 and headers["Retry-After"] == "5"
    error = json.loads(body)["error"]
    assert error == {"code": -32603, "message": "The database is unavailable; try again shortly."}
    status, headers, _ = fetch(f"{url}/healthz")
    assert status == 503
    # The gateway's background rounds (its tools/list_changed poll, every 2 s) say it once, not each round.
    time.sleep(5)
    log = log_path.read_text()
    assert "gateway POST /mcp/: database unavailable (OperationalError)" in log, log
    assert log.count("could not read the registry's version: database unavailable") == 1, log
    assert "Traceback" not in log and "ERROR" not in log, log

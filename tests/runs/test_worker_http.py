"""HTTP capabilities where runs execute: a real Celery worker calls a real HTTP service on loopback.

Reads keep their connection alive across steps (and runs); writes open and close their own.
Runs on whichever stack the environment selects (SQLite + embedded broker, or DATABASE_URL /
CELERY_BROKER_URL for PostgreSQL + Redis).
"""
from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from capabilities.policy import capability_create
from runs import services
from runs.models import Attempt, Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


class Service(BaseHTTPRequestHandler):
    """Echoes n, with the number of the TCP connection the request came on and its Connection header."""

    protocol_version = "HTTP/1.1"
    numbers = itertools.count(1)

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.number = next(self.numbers)
        self.server.connections.append(self.number)

    def do_GET(self):
        self.answer(int(self.path.rpartition("n=")[2] or 0))

    def do_POST(self):
        self.answer(json.loads(self.rfile.read(int(self.headers["Content-Length"])))["n"])

    def answer(self, n):
        body = json.dumps({"n": n, "connection": self.number, "asked": self.headers.get("Connection")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def service():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Service)
    httpd.daemon_threads = True
    httpd.connections = []
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def register(admin, service, name, *, method, side_effect):
    url = f"http://127.0.0.1:{service.server_address[1]}/items"
    capability_create(user=admin, name=name, kind="http", config={"url": url, "method": method},
                      policy={"side_effect": side_effect, "requires_approval": False, "retry_max_attempts": 1,
                              "timeout_s": 10, "idempotent": side_effect == "none",
                              "schema": {"type": "object", "properties": {"n": {"type": "integer"}},
                                         "required": ["n"]}})


def run_steps(owner, capability, count, wait_until):
    steps = [{"id": f"s{i}", "capability": capability, "arguments": {"n": i},
              **({"depends_on": [f"s{i - 1}"]} if i else {})} for i in range(count)]
    run = services.run_start(owner=owner, goal="Call the service", planner="scripted",
                             planner_config={"plans": [steps]}, budgets={"deadline_s": 90},
                             completion={"capability": capability, "path": "n", "equals": count - 1})

    def finished():
        current = Run.objects.get(pk=run.pk)
        return current if current.status in ("completed", "stopped", "cancelled") else None

    return wait_until(finished, timeout=90, message=f"run {run.pk} to finish")


def test_reads_reuse_one_connection_and_writes_never_do_on_a_real_worker(
        celery_worker, settings, registry_admin, operator, service, wait_until):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    register(registry_admin, service, "lookup_item", method="GET", side_effect="none")
    register(registry_admin, service, "record_item", method="POST", side_effect="write")

    run = run_steps(operator, "lookup_item", 4, wait_until)
    outputs = [a.output for a in Attempt.objects.filter(run=run).order_by("started_at")]
    assert run.status == "completed", (run.stop_reason, run.stop_detail)
    assert [o["n"] for o in outputs] == [0, 1, 2, 3]
    assert {o["asked"] for o in outputs} == {"keep-alive"}
    assert len({o["connection"] for o in outputs}) == 1  # four calls, one TCP connection
    assert len(service.connections) == 1

    written = run_steps(operator, "record_item", 3, wait_until)
    outputs = [a.output for a in Attempt.objects.filter(run=written).order_by("started_at")]
    assert written.status == "completed", (written.stop_reason, written.stop_detail)
    assert {o["asked"] for o in outputs} == {"close"}
    assert len({o["connection"] for o in outputs}) == 3  # a connection of its own for each write
    assert len(service.connections) == 4

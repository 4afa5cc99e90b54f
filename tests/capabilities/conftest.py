"""A real HTTP server on loopback for the http executor tests."""
from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest


def pytest_ignore_collect(collection_path, config):
    # `pytest -p no:django tests/capabilities` runs the executors without Django:
    # skip the one module that needs the database.
    if collection_path.name == "test_demo_functions.py" and not config.pluginmanager.hasplugin("django"):
        return True
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    orders: dict[str, dict] = {}
    lock = threading.Lock()

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_PUT(self):
        self.route("PUT")

    def do_DELETE(self):
        self.route("DELETE")

    def route(self, method):
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        if path == "/echo":
            return self.reply(200, {"method": method, "query": query, "body": body,
                                    "headers": {k.lower(): v for k, v in self.headers.items()}})
        if path.startswith("/status/"):
            code = int(path.rsplit("/", 1)[1])
            return self.reply(code, {"error": f"status {code}"})
        if path == "/rate-limited":
            return self.reply(429, {"error": "slow down"}, headers={"Retry-After": "7"})
        if path == "/unavailable":
            when = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
            return self.reply(503, {"error": "maintenance"}, headers={"Retry-After": when})
        if path == "/slow":
            time.sleep(float(query.get("s", ["2"])[0]))
            return self.reply(200, {"slow": True})
        if path == "/nul":   # NUL characters in a value, a key and a text body; and the literal text \u0000
            if query.get("as") == ["text"]:
                return self.reply(200, "a\x00b", content_type="text/plain")
            return self.reply(int(query.get("status", ["200"])[0]),
                              {"v": "a\x00b", "k\x00": 1, "literal": "\\u0000", "lone": "\ud800"})
        if path == "/nonfinite":   # what Python's json writes for NaN and infinities (PostgreSQL's JSON refuses them)
            return self.reply(200, '{"n": NaN, "i": [Infinity, -Infinity], "big": 1e400, "name": "NaN"}')
        if path == "/text":
            return self.reply(200, "plain words", content_type="text/plain")
        if path == "/latin1":
            return self.reply(200, "café".encode("latin-1"), content_type="text/plain; charset=iso-8859-1")
        if path in ("/trickle-head", "/trickle-body"):
            # Each byte well within any socket timeout, the whole answer far beyond the call's.
            body = b"x" * int(query.get("n", ["100"])[0])
            head = self.head(200, len(body))
            at_once, slowly = (b"", head + body) if path == "/trickle-head" else (head, body)
            self.wfile.write(at_once)
            for byte in slowly:
                time.sleep(float(query.get("s", ["0.02"])[0]))
                self.wfile.write(bytes([byte]))
            return None
        if path == "/short":
            # Promises 100 bytes, sends 10 and closes.
            self.close_connection = True
            self.wfile.write(self.head(200, 100) + b"x" * 10)
            return None
        if path == "/big":
            return self.reply(200, {"rows": ["x" * 100] * 200})
        if path == "/drop":
            self.close_connection = True
            self.wfile.write(b"")
            self.connection.shutdown(2)
            return None
        if path == "/loop":
            return self.reply(302, None, headers={"Location": "/loop"})
        if path.startswith("/redirect"):
            target = query.get("to", ["/echo"])[0]
            code = int(query.get("code", ["302"])[0])
            return self.reply(code, None, headers={"Location": target})
        if path == "/orders" and method == "POST":
            key = self.headers.get("Idempotency-Key")
            if not key:
                return self.reply(400, {"error": "Idempotency-Key required"})
            with self.lock:
                replayed = key in self.orders
                order = self.orders.setdefault(key, {"order_id": len(self.orders) + 1, "item": body["item"]})
            return self.reply(200, {**order, "replayed": replayed})
        if path.startswith("/orders/status/"):
            key = path.rsplit("/", 1)[1]
            if key in self.orders:
                return self.reply(200, {"committed": True, "result": self.orders[key]})
            return self.reply(404, {"error": "unknown key"})
        return self.reply(404, {"error": "no route"})

    def reply(self, status, payload, *, headers=None, content_type="application/json"):
        data = b"" if payload is None else payload if isinstance(payload, bytes) else (
            payload.encode() if isinstance(payload, str) else json.dumps(payload).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def head(self, status, length, content_type="text/plain"):
        """A status line and headers as bytes, for answers written by hand."""
        return f"HTTP/1.1 {status} OK\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n".encode()


@pytest.fixture(scope="session")
def http_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.handle_error = lambda request, address: None  # clients that gave up (timeouts) are expected
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# -- capability registry (services, pages, API) ---------------------------------------------------

@pytest.fixture
def allowlist(settings):
    """Outbound HTTP may reach api.example.com and *.example.org (no DNS needed: checked unresolved)."""
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["api.example.com", "*.example.org"]
    settings.AGENTOPS_HTTP_ALLOW_PRIVATE = False
    return settings.AGENTOPS_HTTP_ALLOWED_HOSTS


@pytest.fixture
def make_http_capability(registry_admin, allowlist):
    """Register an http capability through the service; keyword arguments are policy fields."""
    from capabilities.policy import capability_create

    def make(name="create_order", *, config=None, user=None, **policy):
        policy.setdefault("schema", {"type": "object", "properties": {"item": {"type": "string"}},
                                     "required": ["item"]})
        return capability_create(user=user or registry_admin, name=name, kind="http", policy=policy,
                                 config=config or {"url": "https://api.example.com/orders", "method": "POST"})

    return make


@pytest.fixture
def make_attempt(operator):
    """Attempt rows (with the run, revision and step they need) for usage and detail pages."""
    import secrets

    from django.utils import timezone

    from runs.models import Attempt, PlanRevision, Run, Step

    state = {}

    def make(capability_name, *, latency_s=0.1, status="ok", started_at=None):
        if "step" not in state:
            run = Run.objects.create(goal="usage", completion={}, budgets={}, planner="scripted", owner=operator,
                                     trace_id=secrets.token_hex(16))
            revision = PlanRevision.objects.create(run=run, number=1, accepted=True, reason_code="initial")
            state["step"] = Step.objects.create(run=run, revision=revision, index=0, key="s1",
                                                capability_name=capability_name, arguments_hash="0" * 64)
            state["number"] = 0
        state["number"] += 1
        step = state["step"]
        started = started_at or timezone.now()
        return Attempt.objects.create(
            run=step.run, step=step, uid=secrets.token_hex(16), number=state["number"],
            capability_name=capability_name, signature="sig", signature_hash="0" * 64, started_at=started,
            ended_at=started, latency_s=latency_s, status=status,
            error_code="" if status == "ok" else "timeout", trace_id="0" * 32, span_id="0" * 16)

    return make


def audit_for(capability) -> list[str]:
    """The actions of the capability's audit events, oldest first."""
    from core.models import AuditEvent

    return list(AuditEvent.objects.filter(target_type="capability", target_id=str(capability.pk))
                .order_by("created_at", "id").values_list("action", flat=True))

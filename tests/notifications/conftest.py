"""A real webhook receiver on loopback (the SMTP server is in tests/conftest.py), and run records."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Hook(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        server = self.server
        with server.lock:
            server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            status = server.statuses.pop(0) if server.statuses else 200
        if server.redirect_to:
            self.send_response(307)
            self.send_header("Location", server.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


@pytest.fixture
def webhook(settings):
    """Receives Apprise json:// posts; `statuses` scripts the answers (then 200)."""
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.AGENTOPS_HTTP_ALLOW_PRIVATE = True
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    server.daemon_threads = True
    server.requests, server.statuses, server.lock = [], [], threading.Lock()
    server.redirect_to = ""  # answer every POST with a 307 there
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    server.url = f"json://127.0.0.1:{server.server_address[1]}/hook"
    server.payloads = lambda: [json.loads(r["body"]) for r in server.requests]
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


# -- run records, written directly as runs.worker.persistence would ---------------------------------------

@pytest.fixture
def make_run(db, operator):
    import itertools

    from django.utils import timezone

    from runs.models import Run

    seq = itertools.count(1)

    def make(*, goal="Find the travel policy", status="running", stop_reason="", finished_at=None, budgets=None,
             **fields):
        now = timezone.now()
        if status in ("completed", "stopped", "cancelled"):
            stop_reason = stop_reason or ("completed" if status == "completed" else "cancelled")
            finished_at = finished_at or now
        return Run.objects.create(
            goal=goal, completion={"capability": "search_documents", "path": "documents.0.id", "exists": True},
            budgets=budgets or {"max_tool_calls": 20, "deadline_s": 600}, planner="scripted", owner=operator,
            status=status, stop_reason=stop_reason, finished_at=finished_at, started_at=now,
            trace_id=f"notify{next(seq):026d}", **fields)

    return make


@pytest.fixture
def waiting_approval(make_run):
    from datetime import timedelta

    from django.utils import timezone

    from runs.models import Approval, PlanRevision, Step

    run = make_run(goal="Open a ticket for the printer", status="awaiting_approval")
    revision = PlanRevision.objects.create(run=run, number=1, accepted=True, reason_code="initial",
                                           steps=[{"id": "s1", "capability": "create_ticket",
                                                   "arguments": {"title": "Printer"}}])
    step = Step.objects.create(run=run, revision=revision, index=0, key="s1", capability_name="create_ticket",
                               arguments={"title": "Printer"}, arguments_hash="h1", approval_state="pending")
    return Approval.objects.create(run=run, kind="step", revision=revision, step=step, capability_name="create_ticket",
                                   arguments=step.arguments, arguments_hash="h1",
                                   expires_at=timezone.now() + timedelta(hours=1))

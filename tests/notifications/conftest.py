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


# -- a Slack Web API stand-in on loopback, and requests signed as Slack signs them ------------------

class SlackApi(BaseHTTPRequestHandler):
    """chat.postMessage, chat.update, chat.postEphemeral and users.info, answered as Slack answers them."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        server = self.server
        method = self.path.rsplit("/", 1)[-1]
        payload = json.loads(body or b"{}")
        with server.lock:
            server.calls.append({"method": method, "payload": payload, "auth": self.headers.get("Authorization")})
            if self.headers.get("Authorization") != f"Bearer {server.token}":
                answer = {"ok": False, "error": "invalid_auth"}
            elif method == "chat.postMessage":
                server.ts += 1
                answer = {"ok": True, "channel": payload["channel"], "ts": f"1700000000.{server.ts:06d}",
                          "message": {"text": payload.get("text", "")}}
            elif method in ("chat.update", "chat.postEphemeral"):
                answer = {"ok": True, "channel": payload.get("channel"), "ts": payload.get("ts", "")}
            elif method == "users.info":
                user = server.users.get(payload.get("user"))
                answer = {"ok": True, "user": user} if user else {"ok": False, "error": "user_not_found"}
            else:
                answer = {"ok": False, "error": "unknown_method"}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _port_in_range() -> int:
    """A free port of this test run's range (8300-8399), else any."""
    import socket

    for port in range(8300, 8400):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return 0


@pytest.fixture
def slack(settings):
    """The Slack Web API on loopback; `sign`/`post` send requests signed with the app's signing secret."""
    import hashlib
    import hmac
    import time
    from urllib.parse import urlencode

    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = [*settings.AGENTOPS_HTTP_ALLOWED_HOSTS, "127.0.0.1"]
    settings.AGENTOPS_HTTP_ALLOW_PRIVATE = True
    settings.AGENTOPS_SLACK_SIGNING_SECRET = "test-signing-secret"
    settings.AGENTOPS_SLACK_BOT_TOKEN = "xoxb-test-token"
    server = ThreadingHTTPServer(("127.0.0.1", _port_in_range()), SlackApi)
    server.daemon_threads = True
    server.calls, server.lock, server.ts, server.token = [], threading.Lock(), 0, "xoxb-test-token"
    server.users = {"U_OLGA": {"id": "U_OLGA", "name": "olga", "deleted": False, "is_bot": False},
                    "U_VERA": {"id": "U_VERA", "name": "vera", "deleted": False, "is_bot": False},
                    "U_OTTO": {"id": "U_OTTO", "name": "otto", "deleted": False, "is_bot": False},
                    "U_BOT": {"id": "U_BOT", "name": "bot", "deleted": False, "is_bot": True}}
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    settings.AGENTOPS_SLACK_API_URL = f"http://127.0.0.1:{server.server_address[1]}/api/"
    server.of = lambda method: [c["payload"] for c in server.calls if c["method"] == method]

    def sign(body: bytes, timestamp: int | None = None, secret: str = "test-signing-secret") -> dict:
        timestamp = int(time.time()) if timestamp is None else timestamp
        base = f"v0:{timestamp}:".encode() + body
        signature = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
        return {"HTTP_X_SLACK_REQUEST_TIMESTAMP": str(timestamp), "HTTP_X_SLACK_SIGNATURE": signature}

    def post(client, path: str, form: dict, **sign_kw):
        body = urlencode(form).encode()
        return client.post(path, body, content_type="application/x-www-form-urlencoded", **sign(body, **sign_kw))

    server.sign, server.post = sign, post
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def slack_click(message_payload: dict, *, user: str, action: str = "agentops_approve", comment: str = "",
                value: str | None = None, team: str = "T_TEAM") -> dict:
    """The block_actions payload Slack sends when `user` clicks a button of a message we posted."""
    buttons = [e for b in message_payload["blocks"] if b["type"] == "actions" for e in b["elements"]]
    button = next(b for b in buttons if b["action_id"] == action)
    return {"type": "block_actions", "team": {"id": team}, "user": {"id": user, "team_id": team},
            "channel": {"id": message_payload["channel"]},
            "container": {"type": "message", "channel_id": message_payload["channel"],
                          "message_ts": message_payload["ts"]},
            "actions": [{"action_id": action, "value": button["value"] if value is None else value,
                         "type": "button"}],
            "state": {"values": {"agentops_comment": {"comment": {"type": "plain_text_input", "value": comment}}}}}

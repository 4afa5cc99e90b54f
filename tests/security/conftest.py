"""Real servers on loopback for the security tests: a chat-completions endpoint, an echoing webhook, and
the product's own web server as the README runs it in production."""
from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


class Recorder:
    """A loopback HTTP server that records every request and answers from a queue (or echoes)."""

    def __init__(self):
        self.requests: list[dict] = []
        self.responses: list[dict] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                request = {"method": self.command, "path": self.path, "headers": dict(self.headers.items()),
                           "body": body}
                recorder.requests.append(request)
                answer = recorder.responses.pop(0) if recorder.responses else {"status": 200, "json": request}
                payload = answer.get("raw") or json.dumps(answer.get("json"))
                self.send_response(answer.get("status", 200))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload.encode())))
                self.end_headers()
                self.wfile.write(payload.encode())

            do_GET = do_POST = _handle

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A short poll: shutdown() waits out one poll interval (the default 0.5 s cost every test).
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder():
    server = Recorder()
    yield server
    server.close()


def chat_completion(content, usage=None):
    return {"status": 200, "json": {"choices": [{"message": {"role": "assistant", "content": content}}],
                                    "usage": usage if usage is not None else
                                    {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}}


ROOT = Path(__file__).resolve().parents[2]
# The production layout (README "Production"), and the one it replaced (issue 34: starved by slow clients).
WEB_LAYOUTS = {
    "uvicorn": lambda port: [sys.executable, "-m", "uvicorn", "agentops.asgi:application", "--workers", "2",
                             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
    "gthread": lambda port: [sys.executable, "-m", "gunicorn", "agentops.wsgi", "-k", "gthread", "--workers", "2",
                             "--threads", "16", "--timeout", "60", "--bind", f"127.0.0.1:{port}",
                             "--log-level", "warning"],
}


class WebServer:
    def __init__(self, port: int):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def get(self, path: str, headers: dict | None = None, timeout: float = 10) -> tuple[int, dict, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request("GET", path, headers={"Host": "127.0.0.1", **(headers or {})})
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()


@pytest.fixture
def web_server(worker_env, wait_until):
    """web_server(layout=..., env=...): the web server on a loopback port against the test database,
    stopped (and waited for) after the test."""
    procs = []

    def start(*, layout: str = "uvicorn", env: dict | None = None) -> WebServer:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        proc = subprocess.Popen(WEB_LAYOUTS[layout](port), cwd=ROOT, env={**worker_env, **(env or {})})
        procs.append(proc)
        server = WebServer(port)

        def up():
            assert proc.poll() is None, f"the {layout} server exited with {proc.returncode}"
            try:
                return server.get("/healthz", timeout=2)[0] == 200
            except OSError:
                return False

        wait_until(up, timeout=60, message=f"the {layout} server")
        return server

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

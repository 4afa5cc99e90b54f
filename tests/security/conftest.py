"""Real servers on loopback for the security tests: a chat-completions endpoint and an echoing webhook."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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

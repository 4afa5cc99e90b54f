"""Keep-alive: reads reuse a connection to the address the guard checked; writes never do."""
from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from capabilities.executors.base import FileOutputStore
from capabilities.kinds.http import executor as http_executor
from capabilities.kinds.http.executor import HttpExecutor
from capabilities.netguard import NetGuard
from runs.runtime.capability import CapabilitySpec, Kind, SideEffect
from runs.runtime.observation import ErrorCode, Status


class CountingHandler(BaseHTTPRequestHandler):
    """Answers with the number of the TCP connection the request came on."""

    protocol_version = "HTTP/1.1"
    numbers = itertools.count(1)

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.connection_number = next(self.numbers)
        self.server.connections.append(self.connection_number)

    def do_GET(self):
        self.answer()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer()

    def answer(self):
        body = json.dumps({"connection": self.connection_number, "asked": self.headers.get("Connection")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.path == "/big":
            body = json.dumps({"pad": "x" * 5000}).encode()
        if self.path == "/close":
            self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if self.path == "/drop-after":  # as a server does that drops an idle connection: no warning
            self.wfile.flush()
            self.close_connection = True


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), CountingHandler)
    httpd.daemon_threads = True
    httpd.connections = []
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def executor(tmp_path):
    return HttpExecutor(guard=NetGuard(["127.0.0.1"]), environ={}, output_store=FileOutputStore(tmp_path))


def call(executor, server, path, *, side_effect=SideEffect.NONE, method="GET", **config):
    url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    capability = CapabilitySpec(name="remote", kind=Kind.HTTP, side_effect=side_effect, timeout_s=2.0,
                                config={"url": url, "method": method, **config})
    return executor.execute(capability, {}, idempotency_key="k" if side_effect != SideEffect.NONE else None,
                            timeout_s=2.0, trace_id="0af7651916cd43dd8448eb211c80319c", span_id="b7ad6b7169203331")


def test_reads_reuse_one_connection(executor, server):
    answers = [call(executor, server, "/n") for _ in range(3)]
    assert [a.status for a in answers] == [Status.OK] * 3
    assert len({a.output["connection"] for a in answers}) == 1
    assert answers[0].output["asked"] == "keep-alive"
    assert len(server.connections) == 1


def test_state_changing_calls_always_have_a_connection_of_their_own(executor, server):
    answers = [call(executor, server, "/orders", side_effect=SideEffect.WRITE, method="POST") for _ in range(2)]
    assert [a.status for a in answers] == [Status.OK] * 2
    assert {a.output["asked"] for a in answers} == {"close"}
    assert len(server.connections) == 2
    # Nor does a read take a connection a write left: it left none.
    assert call(executor, server, "/n").status == Status.OK
    assert len(server.connections) == 3


def test_a_connection_the_server_dropped_while_idle_is_replaced_and_the_read_answered(executor, server):
    first = call(executor, server, "/drop-after")
    second = call(executor, server, "/n")  # sent on the dropped connection, then again on a new one
    assert first.status == second.status == Status.OK
    assert second.output["connection"] != first.output["connection"]
    assert len(server.connections) == 2


def test_a_connection_the_server_asked_to_close_or_idle_too_long_is_not_reused(executor, server, monkeypatch):
    call(executor, server, "/close")
    call(executor, server, "/n")
    assert len(server.connections) == 2
    monkeypatch.setattr(http_executor, "IDLE_SECONDS", 0.0)
    call(executor, server, "/n")
    assert len(server.connections) == 3


def test_an_answer_not_read_whole_closes_its_connection(executor, server):
    refused = call(executor, server, "/big", max_response_bytes=1000)
    assert refused.error_code == ErrorCode.INVALID_ARGUMENTS  # larger than the capability allows
    assert call(executor, server, "/n").status == Status.OK
    assert len(server.connections) == 2


def test_threads_never_share_a_connection_at_once(executor, server):
    results = []

    def reads():
        results.extend(call(executor, server, "/n").status for _ in range(20))

    threads = [threading.Thread(target=reads) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [Status.OK] * 160
    assert len(server.connections) <= 8  # at most one per thread calling at once

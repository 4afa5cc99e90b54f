"""The OpenTelemetry export leaves the server through the egress guard, like everything else.

The OTLP exporter takes a requests.Session; ours (capabilities.egress.guarded_session) sends each
export through guarded_client: to the address the guard checked, never through an environment
proxy, never after a redirect, never to a cloud credential range even when named. Spans are read
back from a real OTLP/HTTP receiver (tests/otlp_receiver.py); a loopback server stands in for a
proxy or a redirect's target and counts what reaches it.
"""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from capabilities.egress import guarded_session
from capabilities.netguard import NetGuard
from runs import otel


class _Counting(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self):
        self.server.seen.append((self.command, self.path))
        if self.server.redirect_to:
            self.send_response(307)
            self.send_header("Location", self.server.redirect_to)
        else:
            self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_CONNECT = _answer


@pytest.fixture
def counting():
    def start(redirect_to: str = ""):
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
        server.seen, server.redirect_to = [], redirect_to
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(server)
        return server

    servers: list[ThreadingHTTPServer] = []
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _export_one_span(name: str) -> str:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(otel._exporter()))
    with provider.get_tracer("test").start_as_current_span(name) as span:
        trace_id = format(span.get_span_context().trace_id, "032x")
    provider.shutdown()
    return trace_id


@pytest.mark.slow
def test_spans_reach_the_collector_directly_whatever_proxy_the_environment_names(
        otlp_receiver, counting, monkeypatch):
    proxy = counting()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.url)
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.server_address[1]}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    trace_id = _export_one_span("through the guard")
    assert [s["name"] for s in otlp_receiver.spans(trace_id)] == ["through the guard"]
    assert proxy.seen == []


def test_a_redirect_from_the_collector_is_not_followed(counting):
    elsewhere = counting()
    collector = counting(redirect_to=f"http://127.0.0.1:{elsewhere.server_address[1]}/v1/traces")
    session = guarded_session(NetGuard(["127.0.0.1"], allow_private=True, credential_entries=False))
    answer = session.post(f"http://127.0.0.1:{collector.server_address[1]}/v1/traces", data=b"x",
                          allow_redirects=True)
    assert answer.status_code == 307 and len(collector.seen) == 1 and elsewhere.seen == []


@pytest.mark.parametrize("endpoint", ["http://169.254.169.254/", "http://[::ffff:a9fe:a9fe]:4318",
                                      "http://2852039166:4318"])
def test_a_collector_in_a_cloud_credential_range_is_refused_even_when_named(monkeypatch, endpoint):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    with pytest.raises(requests.exceptions.ConnectionError, match="refused|not allowed|credential"):
        guarded_session(otel.collector_guard()).post(endpoint.rstrip("/") + "/v1/traces", data=b"x", timeout=2)


def test_only_the_named_collector_s_host(monkeypatch, counting):
    other = counting()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector.internal:4318/v1/traces")
    with pytest.raises(requests.exceptions.ConnectionError):
        guarded_session(otel.collector_guard()).post(f"http://127.0.0.1:{other.server_address[1]}/", data=b"x")
    assert other.seen == []

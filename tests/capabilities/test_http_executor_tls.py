"""The http executor against a real TLS server on loopback.

The server's name, api.agentops.test, is in no DNS (.test is reserved): only the
guard's resolver knows it is 127.0.0.1. So a call that succeeds connected to the
checked address, while the Host header, the server name (SNI) and the
certificate check all used the name.
"""
from __future__ import annotations

import socket
import ssl
import threading
from http.server import ThreadingHTTPServer

import pytest
import trustme

from capabilities.executors.base import FileOutputStore
from capabilities.kinds.http.executor import HttpExecutor
from capabilities.netguard import NetGuard
from runtime.capability import CapabilitySpec, Kind, SideEffect
from runtime.observation import ErrorCode, SideEffectStatus, Status

from .conftest import Handler

NAME = "api.agentops.test"


class RecordingHandler(Handler):
    def route(self, method):
        self.server.requests.append((method, self.path))
        return super().route(method)


class TLSServer(ThreadingHTTPServer):
    """Handshakes in each connection's own thread; records the server names and requests it saw."""

    daemon_threads = True

    def __init__(self, context: ssl.SSLContext) -> None:
        self.server_names: list[str | None] = []
        self.requests: list[tuple[str, str]] = []
        context.sni_callback = lambda tls, name, _context: self.server_names.append(name)
        self.context = context
        super().__init__(("127.0.0.1", 0), RecordingHandler)

    def finish_request(self, request, client_address):
        with self.context.wrap_socket(request, server_side=True) as tls:
            super().finish_request(tls, client_address)

    def handle_error(self, request, client_address):
        pass  # refused handshakes are what some tests are about


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture
def serve(ca):
    """Start a TLS server with a certificate for `name` from `issuer` (the trusted CA by default)."""
    servers = []

    def serve(*, name=NAME, issuer=None):
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        (issuer or ca).issue_cert(name).configure_cert(context)
        server = TLSServer(context)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(server)
        return server

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def executor(ca, tmp_path):
    guard = NetGuard([NAME], allow_private=True, resolver=lambda host, port: ["127.0.0.1"])
    trusted = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode("ascii"))
    return HttpExecutor(guard=guard, environ={}, tls=trusted, output_store=FileOutputStore(tmp_path))


def call(executor, url, *, timeout_s=2.0):
    spec = CapabilitySpec(name="remote", kind=Kind.HTTP, side_effect=SideEffect.WRITE, timeout_s=timeout_s,
                          config={"url": url, "method": "POST"})
    return executor.execute(spec, {"a": 1}, idempotency_key="k")


def test_it_connects_to_the_checked_address_with_the_name_for_host_sni_and_certificate(executor, serve):
    server = serve()
    port = server.server_address[1]
    observation = call(executor, f"https://{NAME}:{port}/echo")
    assert observation.status == Status.OK
    assert observation.output["headers"]["host"] == f"{NAME}:{port}"
    assert observation.output["body"] == {"a": 1}
    assert server.server_names == [NAME]


@pytest.mark.parametrize("problem", ["a certificate for another name", "a certificate from an untrusted CA"])
def test_a_certificate_that_does_not_prove_the_name_is_refused_before_anything_is_sent(executor, serve, problem):
    if problem == "a certificate for another name":
        server = serve(name="other.agentops.test")
    else:
        server = serve(issuer=trustme.CA())
    observation = call(executor, f"https://{NAME}:{server.server_address[1]}/echo")
    assert observation.error_code == ErrorCode.CONNECTION_ERROR
    assert "CERTIFICATE_VERIFY_FAILED" in observation.error_message
    assert observation.side_effect == SideEffectStatus.NOT_COMMITTED
    assert server.requests == []


def test_a_handshake_that_never_completes_times_out_before_anything_is_sent(executor):
    with socket.socket() as silent:  # accepts connections (the kernel does) but never speaks TLS
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        observation = call(executor, f"https://{NAME}:{silent.getsockname()[1]}/echo", timeout_s=0.3)
    assert observation.error_code == ErrorCode.TIMEOUT
    assert "connecting" in observation.error_message
    assert observation.side_effect == SideEffectStatus.NOT_COMMITTED
    assert observation.latency_s < 1


def test_reads_keep_one_tls_connection_and_handshake(executor, serve):
    server = serve()
    spec = CapabilitySpec(name="remote", kind=Kind.HTTP, side_effect=SideEffect.NONE, timeout_s=2.0,
                          config={"url": f"https://{NAME}:{server.server_address[1]}/echo", "method": "GET"})
    answers = [executor.execute(spec, {"n": n}) for n in range(3)]
    assert [a.status for a in answers] == [Status.OK] * 3
    assert [a.output["query"] for a in answers] == [{"n": ["0"]}, {"n": ["1"]}, {"n": ["2"]}]
    assert server.server_names == [NAME]  # one handshake for three reads

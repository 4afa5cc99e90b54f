"""Probes of the egress guard through HTTP capabilities: registered through the API, tried through a real
worker (or inline, where the test must choose what a name resolves to), against loopback servers that
record every connection.

The bypass this file pins down: a host that is an IP address in disguise (`127.0.0.1%.allowed.test`,
which the guard reads as 127.0.0.1 once the "zone" is cut off) was admitted by a wildcard name entry
(`*.allowed.test`), so any address at all was reachable (any private one with allow_private).
"""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from capabilities import policy
from capabilities.netguard import NetGuard
from tests.conftest import running_worker

DISGUISED = ["127.0.0.1%.allowed.test", "[::ffff:127.0.0.1%.allowed.test]", "127.0.0.1%25.allowed.test"]


class Server:
    """A loopback HTTP server that counts connections and answers 200, or redirects to `redirect_to`."""

    def __init__(self, address: str = "127.0.0.1"):
        self.connections, self.redirect_to = 0, ""
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                server.connections += 1
                self.send_response(302 if server.redirect_to else 200)
                if server.redirect_to:
                    self.send_header("Location", server.redirect_to)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer((address, 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.port = self.httpd.server_address[1]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def target():
    server = Server()
    yield server
    server.close()


@pytest.fixture
def second():
    server = Server()
    yield server
    server.close()


def _register(admin, name, url):
    return policy.capability_create(user=admin, name=name, kind="http", config={"url": url},
                                    policy={"side_effect": "none", "retry_max_attempts": 1, "timeout_s": 5,
                                            "schema": {"type": "object"}})


@pytest.mark.django_db
@pytest.mark.parametrize("host", DISGUISED)
def test_registration_refuses_an_address_dressed_as_an_allowed_subdomain(api_for, registry_admin, settings,
                                                                         target, host):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["*.allowed.test"]
    settings.AGENTOPS_HTTP_ALLOW_PRIVATE = True
    response = api_for(registry_admin).post("/api/capabilities/", {
        "name": "probe", "kind": "http", "side_effect": "none", "schema": {"type": "object"},
        "config": {"url": f"http://{host}:{target.port}/x"}}, format="json")
    assert response.status_code == 400, response.json()
    assert "address is not on the allowlist" in str(response.json()["error"]["fields"]["config.url"])


@pytest.fixture
def wildcard_worker(own_task_queue):
    """A worker whose allowlist is a wildcard name with allow_private on (an on-prem deployment)."""
    env = {**own_task_queue.env, "AGENTOPS_HTTP_ALLOWED_HOSTS": "*.allowed.test", "AGENTOPS_HTTP_ALLOW_PRIVATE": "true"}
    with running_worker(env, hostname=f"egress-probe-{time.time_ns()}", concurrency=2) as proc:
        yield proc


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_refuses_an_address_dressed_as_an_allowed_subdomain_and_connects_to_nothing(
        wildcard_worker, api_for, registry_admin, operator, settings, target):
    # Registered while 127.0.0.1 was listed too; the worker's allowlist no longer names it.
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["*.allowed.test", "127.0.0.1"]
    for n, host in enumerate(DISGUISED):
        _register(registry_admin, f"probe{n}", f"http://{host}:{target.port}/x")
    api = api_for(operator)
    for n in range(len(DISGUISED)):
        tried = api.post(f"/api/capabilities/probe{n}/try/", {"arguments": {}}, format="json")
        assert tried.status_code == 200, tried.json()
        assert tried.json()["error_code"] == "permission_denied", tried.json()
        assert "refused" in tried.json()["error_message"] and "not on the allowlist" in tried.json()["error_message"]
    assert target.connections == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("location", ["http://localhost:{port}/", "http://169.254.169.254/latest/meta-data/",
                                      "http://[::ffff:a9fe:a9fe]/", "file:///etc/passwd",
                                      "gopher://127.0.0.1:{port}/_GET", "http://2130706434:{port}/"])
def test_every_redirect_hop_is_checked_by_the_worker(celery_worker, api_for, registry_admin, operator, settings,
                                                      target, second, location):
    """The session's worker allows 127.0.0.1 only: the first hop is admitted, the redirect is not followed."""
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    target.redirect_to = location.format(port=second.port)
    _register(registry_admin, "hop", f"http://127.0.0.1:{target.port}/start")
    tried = api_for(operator).post("/api/capabilities/hop/try/", {"arguments": {}}, format="json")
    assert tried.status_code == 200, tried.json()
    assert tried.json()["error_code"] == "permission_denied" and "refused" in tried.json()["error_message"]
    assert target.connections == 1 and second.connections == 0


@pytest.fixture
def dns(monkeypatch):
    """What test names resolve to, for every guard built in this process (the guard's resolver)."""
    answers: dict[str, list[str]] = {}

    def resolve(host, port):
        if host not in answers:
            raise OSError(f"unknown test name {host}")
        return answers[host]

    monkeypatch.setitem(NetGuard.__init__.__kwdefaults__, "resolver", resolve)
    return answers


@pytest.mark.django_db
@pytest.mark.usefixtures("try_inline")
@pytest.mark.parametrize(("answers", "reason"), [
    (["fec0::1"], "site-local"),                          # deprecated IPv6 site-local: Python calls it global
    (["93.184.216.34", "127.0.0.1"], "loopback"),        # one public answer, one private
    (["::ffff:127.0.0.1"], "loopback"),                  # IPv4-mapped IPv6
    (["64:ff9b::a9fe:a9fe"], "credential range"),        # NAT64 of the metadata address
])
def test_a_name_resolving_to_a_forbidden_address_is_refused_and_nothing_connects(
        dns, api_for, registry_admin, operator, settings, target, answers, reason):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["*.allowed.test"]
    dns["svc.allowed.test"] = answers
    _register(registry_admin, "named", f"http://svc.allowed.test:{target.port}/x")
    tried = api_for(operator).post("/api/capabilities/named/try/", {"arguments": {}}, format="json")
    assert tried.status_code == 200, tried.json()
    assert tried.json()["error_code"] == "permission_denied" and reason in tried.json()["error_message"]
    assert target.connections == 0


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["http://2130706433:{port}/", "http://0x7f.1:{port}/", "http://017700000001:{port}/",
                                 "http://0.0.0.0:{port}/", "http://[::ffff:127.0.0.1]:{port}/",
                                 "http://allowed.test@127.0.0.1:{port}/", "http://ALLOWED.test.@127.0.0.1:{port}/",
                                 "file:///etc/passwd", "ftp://svc.allowed.test/", "gopher://svc.allowed.test/"])
def test_registration_refuses_other_spellings_and_schemes(api_for, registry_admin, settings, target, url):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["allowed.test", "*.allowed.test"]
    settings.AGENTOPS_HTTP_ALLOW_PRIVATE = True
    response = api_for(registry_admin).post("/api/capabilities/", {
        "name": "probe", "kind": "http", "side_effect": "none", "schema": {"type": "object"},
        "config": {"url": url.format(port=target.port), "status_url": url.format(port=target.port)}}, format="json")
    assert response.status_code == 400, response.json()
    fields = response.json()["error"]["fields"]
    assert "refused" in str(fields["config.url"]) and "refused" in str(fields["config.status_url"])

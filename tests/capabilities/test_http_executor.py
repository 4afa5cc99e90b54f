"""The http executor against a real HTTP server on loopback."""
from __future__ import annotations

import contextlib
import socket
import time
from dataclasses import replace

import pytest

from capabilities.executors.base import FileOutputStore
from capabilities.executors.secrets import REDACTED
from capabilities.kinds.http.executor import HttpExecutor, retry_after_seconds
from capabilities.netguard import NetGuard
from runtime.capability import CapabilitySpec, Kind, SideEffect
from runtime.observation import ErrorCode, SideEffectStatus, Status

SECRET = "s3cr3t-value-never-logged"


def http_spec(url, *, method="GET", side_effect=SideEffect.NONE, timeout_s=2.0, **config):
    return CapabilitySpec(name="remote", kind=Kind.HTTP, side_effect=side_effect, timeout_s=timeout_s,
                          config={"url": url, "method": method, **config})


@pytest.fixture
def executor(tmp_path):
    guard = NetGuard(["127.0.0.1"])
    return HttpExecutor(guard=guard, environ={"DEMO_TOKEN": SECRET}, output_store=FileOutputStore(tmp_path))


def run(executor, spec, arguments=None, *, key=None, timeout_s=None):
    return executor.execute(spec, arguments or {}, idempotency_key=key, timeout_s=timeout_s or spec.timeout_s,
                            trace_id="0af7651916cd43dd8448eb211c80319c", span_id="b7ad6b7169203331")


def closed_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class TestRequests:
    def test_it_sends_get_arguments_as_query_parameters(self, executor, http_server):
        observation = run(executor, http_spec(f"{http_server}/echo"), {"q": "travel", "limit": 3, "exact": True,
                                                                       "tags": ["a", "b"]})
        assert observation.status == Status.OK
        assert observation.output["method"] == "GET"
        assert observation.output["query"] == {"q": ["travel"], "limit": ["3"], "exact": ["true"], "tags": ["a", "b"]}
        assert observation.extra["http_status"] == 200
        assert observation.side_effect == SideEffectStatus.NOT_COMMITTED

    def test_it_sends_other_methods_as_a_json_body(self, executor, http_server):
        observation = run(executor, http_spec(f"{http_server}/echo", method="PUT"), {"title": "x", "n": [1, 2]})
        assert observation.output["method"] == "PUT"
        assert observation.output["body"] == {"title": "x", "n": [1, 2]}

    def test_it_sends_traceparent_and_plain_headers(self, executor, http_server):
        spec = http_spec(f"{http_server}/echo", headers={"X-Team": "ops"})
        headers = run(executor, spec).output["headers"]
        assert headers["traceparent"] == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        assert headers["x-team"] == "ops"
        assert "idempotency-key" not in headers

    def test_it_sends_the_idempotency_key_on_side_effecting_calls(self, executor, http_server):
        spec = http_spec(f"{http_server}/echo", method="POST", side_effect=SideEffect.WRITE)
        observation = run(executor, spec, {"a": 1}, key="run-1-step-2")
        assert observation.output["headers"]["idempotency-key"] == "run-1-step-2"
        assert observation.side_effect == SideEffectStatus.COMMITTED
        assert observation.state_changed

    def test_the_same_idempotency_key_is_deduplicated_by_the_callee(self, executor, http_server):
        spec = http_spec(f"{http_server}/orders", method="POST", side_effect=SideEffect.WRITE)
        first = run(executor, spec, {"item": "chair"}, key="order-key-1")
        again = run(executor, spec, {"item": "chair"}, key="order-key-1")
        assert first.output["order_id"] == again.output["order_id"]
        assert (first.output["replayed"], again.output["replayed"]) == (False, True)

    def test_it_resolves_secret_headers_from_the_environment_at_call_time(self, executor, http_server):
        spec = http_spec(f"{http_server}/echo", secret_headers={"X-Api-Key": "DEMO_TOKEN"})
        observation = run(executor, spec)
        # The echo quoted it, so it was sent; the stored output does not keep it.
        assert observation.output["headers"]["x-api-key"] == REDACTED
        assert SECRET not in str(spec.to_dict())

    def test_a_missing_secret_is_a_terminal_permission_error_naming_the_variable(self, executor, http_server):
        spec = http_spec(f"{http_server}/echo", secret_headers={"Authorization": "NOT_SET_ANYWHERE"})
        observation = run(executor, spec)
        assert observation.error_code == ErrorCode.PERMISSION_DENIED
        assert observation.status == Status.TERMINAL
        assert "NOT_SET_ANYWHERE" in observation.error_message

    def test_a_non_json_body_becomes_text(self, executor, http_server):
        assert run(executor, http_spec(f"{http_server}/text")).output == "plain words"

    def test_nul_characters_and_lone_surrogates_in_an_answer_are_kept_as_the_replacement_character(
            self, executor, http_server):
        """PostgreSQL keeps no NUL in JSON or text, and no driver encodes a lone surrogate (a JSON \\ud800
        escape): the answer must be storable on either database."""
        observation = run(executor, http_spec(f"{http_server}/nul"))
        assert observation.output == {"v": "a\ufffdb", "k\ufffd": 1, "literal": "\\u0000", "lone": "\ufffd"}
        assert run(executor, http_spec(f"{http_server}/nul?as=text")).output == "a\ufffdb"
        failed = run(executor, http_spec(f"{http_server}/nul?status=500"))
        assert failed.status == Status.RETRYABLE and failed.output["v"] == "a\ufffdb"
        assert "\x00" not in failed.error_message

    def test_numbers_json_cannot_write_in_an_answer_are_kept_as_their_names(self, executor, http_server):
        observation = run(executor, http_spec(f"{http_server}/nonfinite"))
        assert observation.output == {"n": "NaN", "i": ["Infinity", "-Infinity"], "big": "Infinity", "name": "NaN"}

    def test_a_text_body_is_decoded_with_its_charset(self, executor, http_server):
        assert run(executor, http_spec(f"{http_server}/latin1")).output == "café"

    def test_it_escapes_what_a_url_may_not_carry_raw(self, executor, http_server):
        observation = run(executor, http_spec(f"{http_server}/echo?q=a b&city=Zürich&done=100%25"))
        assert observation.output["query"] == {"q": ["a b"], "city": ["Zürich"], "done": ["100%"]}

    def test_it_asks_for_an_uncompressed_answer_and_replaces_a_configured_host(self, executor, http_server):
        spec = http_spec(f"{http_server}/echo", headers={"host": "elsewhere.example", "Accept-Encoding": "gzip"})
        headers = run(executor, spec).output["headers"]
        assert headers["accept-encoding"] == "identity"
        assert headers["user-agent"] == "AgentOps"
        assert headers["host"] == http_server.removeprefix("http://")

    @pytest.mark.parametrize("value", ["ops\r\nX-Injected: 1", "ops\nX-Injected: 1", "ops\r\n X-Folded: 1"])
    def test_a_header_value_with_a_line_break_is_refused_before_anything_is_sent(self, executor, value):
        # A closed port: had anything been sent, this would be a connection error.
        spec = http_spec(f"http://127.0.0.1:{closed_port()}/echo", method="POST", side_effect=SideEffect.WRITE,
                         headers={"X-Team": value})
        observation = run(executor, spec, {"a": 1}, key="k")
        assert observation.error_code == ErrorCode.INVALID_ARGUMENTS
        assert observation.status == Status.TERMINAL
        assert observation.side_effect == SideEffectStatus.NOT_COMMITTED
        assert "X-Team" in observation.error_message
        assert "Injected" not in observation.error_message and "Folded" not in observation.error_message

    def test_a_secret_http_cannot_carry_is_refused_without_quoting_it(self, tmp_path):
        # Not Latin-1, so http.client refuses it; the message must not need the redactor.
        executor = HttpExecutor(guard=NetGuard(["127.0.0.1"]), environ={"EURO_TOKEN": "s3cr3t-€uro-value"},
                                output_store=FileOutputStore(tmp_path))
        spec = http_spec(f"http://127.0.0.1:{closed_port()}/echo", secret_headers={"X-Api-Key": "EURO_TOKEN"})
        observation = run(executor, spec)
        assert observation.error_code == ErrorCode.INVALID_ARGUMENTS
        assert "not valid HTTP" in observation.error_message
        assert "s3cr3t" not in observation.error_message and "redacted" not in observation.error_message

    def test_a_large_body_is_stored_by_reference(self, executor, http_server):
        spec = CapabilitySpec(name="big", kind=Kind.HTTP, max_output_bytes=2000, config={"url": f"{http_server}/big"})
        observation = run(executor, spec)
        assert observation.output is None
        assert observation.output_ref.size_bytes > 2000
        assert executor.output_store.read(observation.output_ref.uri) == {"rows": ["x" * 100] * 200}


class TestStatusCodes:
    @pytest.mark.parametrize("code, error, status", [
        (400, ErrorCode.INVALID_ARGUMENTS, Status.TERMINAL),
        (401, ErrorCode.PERMISSION_DENIED, Status.TERMINAL),
        (403, ErrorCode.PERMISSION_DENIED, Status.TERMINAL),
        (404, ErrorCode.NOT_FOUND, Status.TERMINAL),
        (409, ErrorCode.CONFLICT, Status.TERMINAL),
        (422, ErrorCode.INVALID_ARGUMENTS, Status.TERMINAL),
        (500, ErrorCode.SERVER_ERROR, Status.RETRYABLE),
        (502, ErrorCode.SERVER_ERROR, Status.RETRYABLE),
        (408, ErrorCode.TIMEOUT, Status.RETRYABLE),
    ])
    def test_it_maps_http_statuses(self, executor, http_server, code, error, status):
        spec = http_spec(f"{http_server}/status/{code}", method="POST", side_effect=SideEffect.WRITE)
        observation = run(executor, spec, {"a": 1}, key="k")
        assert (observation.error_code, observation.status) == (error, status)
        assert observation.extra["http_status"] == code
        assert observation.output == {"error": f"status {code}"}
        assert f"HTTP {code}" in observation.error_message
        # The callee answered with an error: nothing committed.
        assert observation.side_effect == SideEffectStatus.NOT_COMMITTED

    def test_a_gateway_timeout_on_a_write_has_an_unknown_outcome(self, executor, http_server):
        spec = http_spec(f"{http_server}/status/504", method="POST", side_effect=SideEffect.WRITE)
        observation = run(executor, spec, {}, key="k")
        assert observation.error_code == ErrorCode.TIMEOUT
        assert observation.side_effect == SideEffectStatus.UNKNOWN

    def test_it_honours_retry_after_seconds_on_429(self, executor, http_server):
        spec = http_spec(f"{http_server}/rate-limited", method="POST", side_effect=SideEffect.WRITE)
        observation = run(executor, spec, {}, key="k")
        assert observation.error_code == ErrorCode.RATE_LIMITED
        assert observation.retry_after_s == 7
        assert observation.side_effect == SideEffectStatus.NOT_COMMITTED

    def test_it_honours_a_retry_after_date_on_503(self, executor, http_server):
        observation = run(executor, http_spec(f"{http_server}/unavailable"))
        assert observation.error_code == ErrorCode.SERVER_ERROR
        assert observation.status == Status.RETRYABLE
        assert 100 < observation.retry_after_s <= 120

    def test_retry_after_parsing(self):
        assert retry_after_seconds("0") == 0
        assert retry_after_seconds("2.5") == 2.5
        # Not a number of seconds (stored, an infinity made every JSON answer about the attempt a 500).
        assert [retry_after_seconds(v) for v in ("inf", "-Infinity", "nan", "1e400")] == [None] * 4
        assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0  # in the past
        assert retry_after_seconds("soon") is None
        assert retry_after_seconds(None) is None


class TestFailuresOnTheWire:
    def test_a_slow_answer_times_out_with_an_unknown_outcome_for_a_write(self, executor, http_server):
        spec = http_spec(f"{http_server}/slow?s=2", method="POST", side_effect=SideEffect.WRITE, timeout_s=0.3)
        started = time.monotonic()
        observation = run(executor, spec, {"a": 1}, key="k")
        assert time.monotonic() - started < 1.5
        assert observation.error_code == ErrorCode.TIMEOUT
        assert observation.status == Status.RETRYABLE
        assert observation.side_effect == SideEffectStatus.UNKNOWN
        assert 0.25 < observation.latency_s < 1.5

    def test_a_slow_read_times_out_without_side_effect(self, executor, http_server):
        observation = run(executor, http_spec(f"{http_server}/slow?s=2", timeout_s=0.3))
        assert observation.error_code == ErrorCode.TIMEOUT
        assert observation.side_effect == SideEffectStatus.NOT_COMMITTED

    @pytest.mark.parametrize("path, message", [("/trickle-body", "did not finish answering in time"),
                                               ("/trickle-head", "did not answer in time")])
    def test_an_answer_trickled_byte_by_byte_times_out_at_the_deadline(self, executor, http_server, path, message):
        # One byte every 20 ms never trips a per-read timeout; only the call's deadline ends it.
        spec = http_spec(f"{http_server}{path}?n=100&s=0.02", method="POST", side_effect=SideEffect.WRITE,
                         timeout_s=0.4)
        observation = run(executor, spec, {"a": 1}, key="k")
        assert observation.error_code == ErrorCode.TIMEOUT
        assert message in observation.error_message
        assert observation.side_effect == SideEffectStatus.UNKNOWN
        assert 0.35 < observation.latency_s < 0.9

    def test_a_body_cut_short_is_a_broken_connection_with_an_unknown_outcome(self, executor, http_server):
        spec = http_spec(f"{http_server}/short", method="POST", side_effect=SideEffect.WRITE)
        observation = run(executor, spec, {"a": 1}, key="k")
        assert observation.error_code == ErrorCode.CONNECTION_ERROR
        assert "IncompleteRead" in observation.error_message
        assert observation.side_effect == SideEffectStatus.UNKNOWN

    def test_a_body_larger_than_the_limit_is_refused_but_the_write_committed(self, executor, http_server):
        spec = http_spec(f"{http_server}/big", method="POST", side_effect=SideEffect.WRITE, max_response_bytes=1000)
        observation = run(executor, spec, {"a": 1}, key="k")
        assert observation.error_code == ErrorCode.INVALID_ARGUMENTS
        assert "larger than 1000 bytes" in observation.error_message
        assert observation.side_effect == SideEffectStatus.COMMITTED
        assert observation.extra == {"http_status": 200}

    def test_a_refused_connection_never_committed(self, executor):
        spec = http_spec(f"http://127.0.0.1:{closed_port()}/orders", method="POST", side_effect=SideEffect.WRITE)
        observation = run(executor, spec, {"a": 1}, key="k")
        assert observation.error_code == ErrorCode.CONNECTION_ERROR
        assert observation.status == Status.RETRYABLE
        assert observation.side_effect == SideEffectStatus.NOT_COMMITTED

    def test_a_connection_dropped_after_sending_has_an_unknown_outcome(self, executor, http_server):
        spec = http_spec(f"{http_server}/drop", method="POST", side_effect=SideEffect.WRITE)
        observation = run(executor, spec, {"a": 1}, key="k")
        assert observation.error_code == ErrorCode.CONNECTION_ERROR
        assert observation.side_effect == SideEffectStatus.UNKNOWN

    def test_a_connection_the_peer_never_accepts_times_out_unsent(self, executor):
        # A listener whose accept queue is full drops further SYNs: connect() waits, bounded by the
        # kernel's send timeout, which carries the deadline.
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(0)
            port = listener.getsockname()[1]
            fillers = [socket.socket() for _ in range(3)]
            for filler in fillers:
                filler.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    filler.connect(("127.0.0.1", port))
            try:
                time.sleep(0.1)
                spec = http_spec(f"http://127.0.0.1:{port}/orders", method="POST", side_effect=SideEffect.WRITE,
                                 timeout_s=0.5)
                started = time.monotonic()
                observation = run(executor, spec, {"a": 1}, key="k")
            finally:
                for filler in fillers:
                    filler.close()
        assert 0.4 < time.monotonic() - started < 3
        assert observation.error_code == ErrorCode.TIMEOUT
        assert "connecting to 127.0.0.1 timed out" in observation.error_message
        assert observation.side_effect == SideEffectStatus.NOT_COMMITTED  # nothing was sent

    def test_a_peer_that_stops_reading_the_request_times_out_at_the_deadline(self, executor):
        # Plain HTTP sends on a blocking socket whose kernel send timeout carries the deadline:
        # a peer that accepts and never reads must still end the call on time.
        with socket.socket() as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            url = f"http://127.0.0.1:{listener.getsockname()[1]}/upload"
            spec = replace(http_spec(url, method="POST", side_effect=SideEffect.WRITE, timeout_s=0.5),
                           max_argument_bytes=32_000_000)  # more than the kernel's buffers take
            started = time.monotonic()
            observation = run(executor, spec, {"blob": "x" * 16_000_000}, key="k")
        assert 0.4 < time.monotonic() - started < 3
        assert observation.error_code == ErrorCode.TIMEOUT
        assert observation.status == Status.RETRYABLE
        assert observation.side_effect == SideEffectStatus.UNKNOWN  # part of the request went out


class TestRedirects:
    def test_it_follows_a_redirect_on_the_allowlist(self, executor, http_server):
        observation = run(executor, http_spec(f"{http_server}/redirect?to=/echo%3Fhop%3D1"))
        assert observation.status == Status.OK
        assert observation.output["query"] == {"hop": ["1"]}

    def test_it_refuses_a_redirect_to_the_metadata_address(self, executor, http_server):
        spec = http_spec(f"{http_server}/redirect?to=http://169.254.169.254/latest/meta-data/")
        observation = run(executor, spec)
        assert observation.error_code == ErrorCode.PERMISSION_DENIED
        assert observation.status == Status.TERMINAL
        assert "169.254.169.254" in observation.error_message

    def test_it_refuses_a_redirect_to_a_host_off_the_allowlist(self, executor, http_server):
        observation = run(executor, http_spec(f"{http_server}/redirect?to=http://evil.example.net/steal"))
        assert observation.error_code == ErrorCode.PERMISSION_DENIED
        assert "evil.example.net" in observation.error_message
        assert "allowlist" in observation.error_message

    def test_it_refuses_a_redirect_even_when_the_metadata_host_is_listed_by_name(self, http_server, tmp_path):
        guard = NetGuard(["127.0.0.1", "metadata.internal"], resolver=lambda host, port: ["169.254.169.254"])
        executor = HttpExecutor(guard=guard, output_store=FileOutputStore(tmp_path))
        observation = run(executor, http_spec(f"{http_server}/redirect?to=http://metadata.internal/"))
        assert observation.error_code == ErrorCode.PERMISSION_DENIED
        assert "metadata" in observation.error_message

    def test_it_stops_after_five_redirects(self, executor, http_server):
        observation = run(executor, http_spec(f"{http_server}/loop"))
        assert observation.status == Status.TERMINAL
        assert "redirects" in observation.error_message

    def test_it_does_not_follow_redirects_when_told_not_to(self, executor, http_server):
        observation = run(executor, http_spec(f"{http_server}/redirect?to=/echo", allow_redirects=False))
        assert observation.extra == {"http_status": 302, "location": "/echo"}

    def test_it_drops_secret_headers_when_a_redirect_leaves_the_origin(self, http_server, tmp_path):
        port = http_server.rsplit(":", 1)[1]
        guard = NetGuard(["127.0.0.1", "localhost"], allow_private=True)
        executor = HttpExecutor(guard=guard, environ={"DEMO_TOKEN": SECRET}, output_store=FileOutputStore(tmp_path))
        spec = http_spec(f"{http_server}/redirect?to=http://localhost:{port}/echo",
                         secret_headers={"X-Api-Key": "DEMO_TOKEN"})
        observation = run(executor, spec)
        assert observation.status == Status.OK
        assert "x-api-key" not in observation.output["headers"]
        assert observation.output["headers"]["host"] == f"localhost:{port}"

    def test_a_see_other_redirect_turns_a_post_into_a_get(self, executor, http_server):
        spec = http_spec(f"{http_server}/redirect?to=/echo&code=303", method="POST")
        assert run(executor, spec, {"a": 1}).output["method"] == "GET"

    def test_a_307_redirect_keeps_the_method_and_body(self, executor, http_server):
        spec = http_spec(f"{http_server}/redirect?to=/echo&code=307", method="POST")
        output = run(executor, spec, {"a": 1}).output
        assert (output["method"], output["body"]) == ("POST", {"a": 1})


class TestTheGuardOnTheFirstHop:
    def test_it_refuses_loopback_unless_allowlisted(self, http_server, tmp_path):
        executor = HttpExecutor(guard=NetGuard(["api.example.com"]), output_store=FileOutputStore(tmp_path))
        observation = run(executor, http_spec(f"{http_server}/echo"))
        assert observation.error_code == ErrorCode.PERMISSION_DENIED
        assert "127.0.0.1" in observation.error_message

    def test_it_refuses_a_listed_name_that_resolves_to_loopback(self, http_server, tmp_path):
        port = http_server.rsplit(":", 1)[1]
        executor = HttpExecutor(guard=NetGuard(["localhost"]), output_store=FileOutputStore(tmp_path))
        observation = run(executor, http_spec(f"http://localhost:{port}/echo"))
        assert observation.error_code == ErrorCode.PERMISSION_DENIED
        assert "loopback" in observation.error_message


class TestStatusLookup:
    def test_it_finds_a_committed_operation_by_its_key(self, executor, http_server):
        spec = http_spec(f"{http_server}/orders", method="POST", side_effect=SideEffect.WRITE)
        spec = CapabilitySpec(**{**vars(spec), "status_lookup": True,
                                 "config": {**spec.config, "status_url": f"{http_server}/orders/status/{{idempotency_key}}"}})
        run(executor, spec, {"item": "lamp"}, key="lookup-key-1")
        found = executor.lookup_status(spec, {"item": "lamp"}, idempotency_key="lookup-key-1", timeout_s=2)
        assert found.status == Status.OK
        assert found.side_effect == SideEffectStatus.COMMITTED
        assert found.output["item"] == "lamp"
        missing = executor.lookup_status(spec, {"item": "lamp"}, idempotency_key="never-sent", timeout_s=2)
        assert missing.side_effect == SideEffectStatus.NOT_COMMITTED

    def test_it_cannot_tell_without_a_status_url(self, executor, http_server):
        spec = http_spec(f"{http_server}/orders", method="POST", side_effect=SideEffect.WRITE)
        assert executor.lookup_status(spec, {}, idempotency_key="k", timeout_s=2) is None

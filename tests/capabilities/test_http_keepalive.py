"""Keep-alive: reads reuse a connection to the address the guard checked; writes never do."""
from __future__ import annotations

import threading
import time

import pytest

from capabilities.executors.base import FileOutputStore
from capabilities.kinds.http import executor as http_executor
from capabilities.kinds.http.executor import HttpExecutor
from capabilities.netguard import NetGuard
from runtime.capability import CapabilitySpec, Kind, SideEffect
from runtime.observation import ErrorCode, Status


@pytest.fixture
def server(counting_http_service):
    return counting_http_service


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


def test_idle_connections_past_their_time_are_closed_even_for_origins_no_longer_called(monkeypatch):
    class Connection:
        closed = False

        def close(self):
            self.closed = True

    monkeypatch.setattr(http_executor, "IDLE_SECONDS", 0.05)
    idle = http_executor.IdleConnections()
    a, b, fresh = Connection(), Connection(), Connection()
    idle.give("a", a)
    idle.give("b", b)
    assert idle.take("a") is a  # fresh: reused, not closed
    idle.give("a", a)
    time.sleep(0.1)
    idle.give("c", fresh)  # any later call closes what every origin left idle too long
    assert a.closed and b.closed and not fresh.closed
    assert idle.take("a") is None and idle.take("b") is None
    assert idle.take("c") is fresh

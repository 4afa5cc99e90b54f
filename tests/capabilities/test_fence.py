"""The fence a state-changing call carries to its callee, and the open calls of a python executor."""
from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from capabilities.executors.base import FileOutputStore
from capabilities.executors.fence import Fence
from capabilities.executors.open_calls import OPEN_CALLS, OpenCalls
from capabilities.kinds.http.executor import HttpExecutor
from capabilities.kinds.mcp.executor import McpExecutor, StdioPolicy
from capabilities.kinds.python.executor import PythonExecutor
from capabilities.kinds.python.registry import CallContext, capability, commit_fenced
from capabilities.netguard import NetGuard
from runtime.capability import CapabilitySpec, Kind, SideEffect
from runtime.observation import ErrorCode, SideEffectStatus, Status

SEEN: list[CallContext] = []
RELEASE = threading.Event()


@capability(name="test_fence_write", side_effect="write")
def fenced_write(n: int, *, context: CallContext) -> dict:
    """Record the context; commit only while current."""
    SEEN.append(context)
    return commit_fenced(context, lambda: {"n": n})


@capability(name="test_fence_slow", side_effect="external", timeout_s=0.1)
def slow_send(n: int, *, context: CallContext) -> dict:
    """Outlive the timeout until released."""
    RELEASE.wait(10)
    return {"n": n}


def spec_of(function, **changes):
    from dataclasses import replace

    return replace(function.__capability__.to_spec(), **changes)


@pytest.fixture
def python(tmp_path):
    return PythonExecutor(output_store=FileOutputStore(tmp_path), on_thread_exit=None)


def test_a_fence_names_run_lease_and_attempt_and_asks_its_check():
    answers = iter([True, False])
    fence = Fence(7, 12, 3, check=lambda: next(answers))
    assert fence.token == "7:12:3"
    assert fence.still_current() and not fence.still_current()
    assert Fence(1, 1, 1).still_current()   # no store to ask: nothing says it was taken over


@pytest.mark.django_db(transaction=True)
def test_a_python_capability_gets_the_fence_and_commits_only_while_it_is_current(python):
    observation = python.execute(spec_of(fenced_write), {"n": 1}, idempotency_key="k", timeout_s=5,
                                 fence=Fence(1, 4, 1, check=lambda: True))
    assert observation.output == {"n": 1} and SEEN[-1].fence.token == "1:4:1"
    refused = python.execute(spec_of(fenced_write), {"n": 2}, idempotency_key="k", timeout_s=5,
                             fence=Fence(1, 4, 2, check=lambda: False))
    assert refused.error_code is ErrorCode.CONFLICT
    assert refused.side_effect is SideEffectStatus.NOT_COMMITTED and "taken over" in refused.error_message


def test_a_call_abandoned_at_its_timeout_stays_in_flight_until_its_thread_ends(python):
    RELEASE.clear()
    woken = threading.Event()
    observation = python.execute(spec_of(slow_send), {"n": 1}, idempotency_key="slow-key", timeout_s=0.1,
                                 fence=Fence(99, 1, 1))
    assert observation.error_code is ErrorCode.TIMEOUT and observation.side_effect is SideEffectStatus.UNKNOWN
    assert python.in_flight(spec_of(slow_send), idempotency_key="slow-key")
    assert OPEN_CALLS.when_closed(99, woken.set)          # the worker keeps the run until it ends
    RELEASE.set()
    assert woken.wait(5)
    deadline = time.monotonic() + 5
    while python.in_flight(spec_of(slow_send), idempotency_key="slow-key") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not python.in_flight(spec_of(slow_send), idempotency_key="slow-key")
    assert not OPEN_CALLS.when_closed(99, woken.set)      # nothing open: the caller lets go itself


def test_open_calls_count_several_calls_of_one_run():
    calls, woken = OpenCalls(), []
    calls.opened(1, "a")
    calls.opened(1, "b")
    assert calls.when_closed(1, lambda: woken.append(1))
    calls.closed(1, "a")
    assert woken == [] and calls.in_flight("b") and not calls.in_flight("a")
    calls.closed(1, "b")
    assert woken == [1]


def test_http_sends_the_fence_on_state_changing_calls_and_their_lookups(tmp_path, http_server):
    executor = HttpExecutor(guard=NetGuard(["127.0.0.1"]), environ={}, output_store=FileOutputStore(tmp_path))
    spec = CapabilitySpec(name="remote", kind=Kind.HTTP, side_effect=SideEffect.WRITE, status_lookup=True,
                          config={"url": f"{http_server}/echo", "method": "POST",
                                  "status_url": f"{http_server}/echo?key={{idempotency_key}}"})
    fence = Fence(5, 9, 2)
    sent = executor.execute(spec, {"a": 1}, idempotency_key="k-1", timeout_s=5, fence=fence)
    assert sent.output["headers"]["agentops-fence"] == "5:9:2"
    assert sent.output["headers"]["idempotency-key"] == "k-1"
    looked = executor.lookup_status(spec, {"a": 1}, idempotency_key="k-1", timeout_s=5, fence=Fence(5, 10, 3))
    assert looked.output["headers"]["agentops-fence"] == "5:10:3"
    read = CapabilitySpec(name="read", kind=Kind.HTTP, config={"url": f"{http_server}/echo"})
    assert "agentops-fence" not in executor.execute(read, {}, timeout_s=5, fence=fence).output["headers"]


# A real stdio MCP server that records the `_meta` of every call in a ledger (tests/chaos) and, as a
# well-behaved callee does, refuses a write whose lease token is older than one seen for its key.
LEDGER_SERVER = Path(__file__).resolve().parents[1] / "chaos" / "ledger_mcp_server.py"


@pytest.mark.slow
def test_mcp_sends_the_fence_and_the_key_in_meta_on_state_changing_calls(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    executor = McpExecutor(environ={}, output_store=FileOutputStore(tmp_path), stdio=StdioPolicy(commands=(sys.executable,)))
    write = CapabilitySpec(name="ledger_mcp", kind=Kind.MCP, side_effect=SideEffect.WRITE, idempotent=True,
                           timeout_s=30, config={"transport": "stdio", "command": sys.executable,
                                                 "args": [str(LEDGER_SERVER)], "env": {"CHAOS_LEDGER": str(ledger)},
                                                 "tool": "ledger_mcp_write"})

    def call(spec, item, key, fence):
        return executor.execute(spec, {"item": item, "seconds": 0}, idempotency_key=key, timeout_s=30, fence=fence)

    def ledger_of(kind, item):
        lines = [json.loads(line) for line in ledger.read_text().splitlines()]
        return [r for r in lines if r["kind"] == kind and r.get("item") == item]

    sent = call(write, "a", "k-1", Fence(5, 9, 2))
    assert sent.side_effect is SideEffectStatus.COMMITTED, sent.error_message
    (arrived,) = ledger_of("received", "a")
    assert (arrived["key"], arrived["fence"]) == ("k-1", "5:9:2")
    # The callee keeps the highest lease token per key: a paused worker's late call, made under the
    # lease it held before the takeover, is refused and writes nothing.
    late = call(write, "a", "k-1", Fence(5, 8, 1))
    assert ledger_of("received", "a")[-1]["fence"] == "5:8:1"
    assert (late.status, late.side_effect) == (Status.TERMINAL, SideEffectStatus.NOT_COMMITTED)
    assert "fenced" in late.error_message and len(ledger_of("effect", "a")) == 1
    # A call that changes nothing carries neither: there is nothing to deduplicate or fence.
    read = replace(write, name="ledger_mcp_read", side_effect=SideEffect.NONE)
    call(read, "b", "k-2", Fence(5, 9, 3))
    (arrived,) = ledger_of("received", "b")
    assert (arrived["key"], arrived["fence"]) == ("", "")

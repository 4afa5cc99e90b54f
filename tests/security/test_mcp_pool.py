"""The per-process stdio pool: one server per command line, reused, restarted when it dies, closed on shutdown."""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from capabilities.executors.base import FileOutputStore
from capabilities.kinds.mcp import pool as mcp_pool
from capabilities.kinds.mcp.executor import McpExecutor, StdioPolicy
from runtime.capability import CapabilitySpec, Kind
from runtime.observation import Status

pytestmark = pytest.mark.slow

DEMO_SERVER = str(Path(__file__).resolve().parents[1] / "capabilities" / "mcp_demo_server.py")


def _servers():
    """PIDs of demo servers that are children of this process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        ppid = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), 0)
        zombie = "State:\tZ" in status
        if ppid == os.getpid() and not zombie and "mcp_demo_server.py" in cmdline and "--http" not in cmdline:
            found.append(int(entry.name))
    return found


def _wait_for_no_servers(timeout_s=10.0):
    # A server discarded by an earlier test may still be exiting: counts must start from none.
    deadline = time.monotonic() + timeout_s
    while _servers() and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.fixture
def executor(tmp_path):
    mcp_pool.pool().close_all()
    _wait_for_no_servers()
    starts = []
    policy = StdioPolicy(commands=(sys.executable,), on_start=lambda config, purpose: starts.append(purpose))
    executor = McpExecutor(stdio=policy, output_store=FileOutputStore(tmp_path), environ={})
    executor.starts = starts
    yield executor
    mcp_pool.pool().close_all()


def call(executor, tool="add", arguments=None, timeout_s=15.0):
    spec = CapabilitySpec(name=tool, kind=Kind.MCP, timeout_s=timeout_s,
                          config={"transport": "stdio", "command": sys.executable, "args": [DEMO_SERVER], "tool": tool})
    return executor.execute(spec, arguments if arguments is not None else {"a": 1, "b": 2})


def test_calls_reuse_one_server_and_a_dead_one_is_restarted(executor):
    assert [call(executor).output for _ in range(5)] == [{"result": 3}] * 5
    assert executor.starts == ["call"] and len(_servers()) == 1

    os.kill(_servers()[0], signal.SIGKILL)
    time.sleep(0.3)
    # A read-only call that meets the dead server is sent again on a fresh one.
    assert call(executor).output == {"result": 3}
    assert executor.starts == ["call", "call"] and len(_servers()) == 1


def test_a_side_effecting_call_on_a_dead_server_is_not_resent(executor):
    from runtime.capability import SideEffect

    assert call(executor).output == {"result": 3}
    os.kill(_servers()[0], signal.SIGKILL)
    time.sleep(0.3)
    spec = CapabilitySpec(name="delete_item", kind=Kind.MCP, side_effect=SideEffect.WRITE, timeout_s=15,
                          config={"transport": "stdio", "command": sys.executable, "args": [DEMO_SERVER],
                                  "tool": "delete_item"})
    failed = executor.execute(spec, {"item_id": "a1"}, idempotency_key="k")
    assert failed.status == Status.RETRYABLE and failed.error_code.value == "connection_error"
    assert call(executor).output == {"result": 3}   # the next call restarts the server
    assert executor.starts == ["call", "call"]


def test_a_timed_out_server_is_not_reused(executor):
    slow = call(executor, "slow", {"seconds": 5}, timeout_s=1.0)
    assert slow.error_code.value == "timeout"
    assert call(executor).output == {"result": 3}
    assert executor.starts == ["call", "call"]


def test_close_all_stops_every_server(executor):
    call(executor)
    assert len(_servers()) == 1
    mcp_pool.pool().close_all()
    _wait_for_no_servers()
    assert _servers() == [] and mcp_pool.pool().size() == 0

"""Calls in a gevent worker: a process monkey-patched as `celery worker --pool gevent` patches it.

Run in a subprocess of its own (monkey patching cannot be undone). Greenlets share one OS thread,
and asyncio keeps its running loop per OS thread: two coroutine calls at once, or one beside the
stdio MCP pool, used to fail with "asyncio.run() cannot be called from a running event loop".
"""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("gevent")

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    from gevent import monkey; monkey.patch_all()
    import asyncio, json, sys, threading, time

    import django; django.setup()
    from mcp import StdioServerParameters

    from capabilities.executors import event_loop
    from capabilities.kinds.mcp import pool as mcp_pool
    from capabilities.kinds.python.executor import CallTimedOut, call_with_timeout

    figures = {"green": event_loop.green()}
    began = time.monotonic()
    try:
        call_with_timeout(lambda: time.sleep(5), 0.3)
    except CallTimedOut:
        figures["timed_out_after_s"] = round(time.monotonic() - began, 2)

    async def nap(n):
        await asyncio.sleep(0.3)
        return n

    async def server_time(client):
        result = await client.call_tool("get_current_time", {"timezone": "UTC"})
        return not result.is_error

    results = {}
    def coroutine_call(n):
        try:
            results[n] = call_with_timeout(lambda: nap(n), 10)
        except Exception as exc:
            results[n] = repr(exc)
    def stdio_call():
        params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server_time"])
        try:
            results["stdio"] = mcp_pool.pool().run(params, server_time, 30)
        except Exception as exc:
            results["stdio"] = repr(exc)
    threads = [threading.Thread(target=coroutine_call, args=(n,)) for n in range(3)]
    threads.append(threading.Thread(target=stdio_call))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    figures["results"] = results
    mcp_pool.pool().close_all()
    print(json.dumps(figures))
""")


@pytest.mark.slow
def test_a_green_worker_times_out_calls_and_runs_coroutines_side_by_side_with_the_stdio_pool():
    env = {"DJANGO_SETTINGS_MODULE": "agentops.settings", "DEBUG": "true", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["green"] is True
    assert figures["timed_out_after_s"] < 2   # the call's greenlet is abandoned, as a thread would be
    assert figures["results"] == {"0": 0, "1": 1, "2": 2, "stdio": True}, done.stderr[-3000:]

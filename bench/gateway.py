#!/usr/bin/env python
"""The MCP gateway's cost per tools/call, and many sessions at once.

Starts uvicorn (agentops.asgi, the gateway at /mcp/) and a Celery worker on the configured
database and broker, registers an agent for a no-op python capability (bench_noop), then:

1. Latency: one MCP session (the official mcp client over loopback HTTP) makes --calls calls,
   one after another; beside it the same capability's function is called directly, and called
   through the MCP SDK alone (bench/bare_mcp.py: the same SDK server and client, nothing of
   AgentOps). Printed: p50 and p99 of each, and the gateway's overhead (tools/call minus the
   direct call); the SDK's own share of it is the bare line.
2. Concurrency: --sessions sessions at once, each making --per-session calls; printed: calls/s,
   p50 and p99 per call, and what was lost: every call must return its own result, and every
   session's run must hold exactly its calls, each executed once.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gateway_bench CELERY_BROKER_URL=redis://127.0.0.1:6379/12 \\
        .venv/bin/python bench/gateway.py                     # 500 calls; 100 sessions x 20 calls

Target (issue 29): overhead p50 <= 5 ms. It purges the broker's queue first: give it a Redis
database of its own. Exit status 1 if a call was lost or failed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

import benchenv  # noqa: E402  (bench/ is on sys.path: these run as scripts)

benchenv.prepare()
CAPABILITY = "bench_noop"
MODULES = "capabilities.demo.functions,gw_bench_capabilities"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_processes(args, workdir: Path, port: int, bare_port: int) -> dict[str, subprocess.Popen]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "AGENTOPS_CAPABILITY_MODULES": MODULES,
           "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    commands = {
        "worker": [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "threads",
                   "--concurrency", str(args.concurrency), "--loglevel", "WARNING", "--without-mingle",
                   "--without-gossip", "--hostname", f"gwbench-{os.getpid()}@bench"],
        "web": [sys.executable, "-m", "uvicorn", "agentops.asgi:application", "--host", "127.0.0.1",
                "--port", str(port), "--log-level", "warning", "--no-access-log"],
        "bare": [sys.executable, "-m", "uvicorn", "bare_mcp:app", "--host", "127.0.0.1",
                 "--port", str(bare_port), "--log-level", "warning", "--no-access-log"],
    }
    return {name: subprocess.Popen(command, cwd=ROOT, env=env, stdout=open(workdir / f"{name}.log", "w"),
                                   stderr=subprocess.STDOUT) for name, command in commands.items()}


def stop(procs) -> None:
    for proc in procs.values():
        proc.terminate()
    for proc in procs.values():
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def wait_up(port: int, bare_port: int, timeout: float = 60) -> None:
    from agentops.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5), \
                    socket.create_connection(("127.0.0.1", bare_port), timeout=0.5):
                if app.control.ping(destination=[f"gwbench-{os.getpid()}@bench"], timeout=1.0):
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("uvicorn or the worker did not start")


def prepare_agent() -> str:
    from django.contrib.auth.models import User

    from agentops.celery import app
    from capabilities.kinds.python.sync import python_capabilities_sync
    from gateway import services

    python_capabilities_sync(modules=tuple(MODULES.split(",")))
    owner, _ = User.objects.get_or_create(username="bench", defaults={"is_superuser": True, "is_staff": True})
    big = 20_000
    agent = services.agent_save(user=None, name="bench", owner=owner, capabilities=[CAPABILITY], budgets={
        "max_tool_calls": big, "max_iterations": 2 * big, "max_revisions": big, "deadline_s": 3600.0})
    with app.connection_for_write() as conn:
        app.control.purge(connection=conn)
    return services.agent_token_issue(user=None, agent=agent, name="bench")[1]


async def session(url: str, token: str, calls: int, offset: int, latencies: list[float], problems: list[str]):
    """One MCP session making `calls` calls; returns its run id."""
    import httpx2
    import mcp_types as types
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    run_id = None
    async with Client(streamable_http_client(url, http_client=http),
                      client_info=types.Implementation(name="bench", version="1")) as client:
        for n in range(offset, offset + calls):
            started = time.perf_counter()
            result = await client.call_tool(CAPABILITY, {"i": n})
            latencies.append(time.perf_counter() - started)
            run_id = result.meta["agentops/run_id"]
            if result.is_error or result.structured_content != {"i": n}:
                problems.append(f"call {n}: {result.structured_content}")
    return run_id


async def bare_calls(url: str, calls: int) -> list[float]:
    """The same calls through the MCP SDK alone (bench/bare_mcp.py), after a warm-up."""
    import httpx2
    import mcp_types as types
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    latencies: list[float] = []
    async with Client(streamable_http_client(url, http_client=httpx2.AsyncClient(timeout=60)),
                      client_info=types.Implementation(name="bench", version="1")) as client:
        for n in range(20 + calls):
            started = time.perf_counter()
            result = await client.call_tool(CAPABILITY, {"i": n})
            if n >= 20:
                latencies.append(time.perf_counter() - started)
            assert result.structured_content == {"i": n}, result
    return latencies


def direct_calls(calls: int) -> list[float]:
    from gw_bench_capabilities import bench_noop

    latencies = []
    for n in range(calls):
        started = time.perf_counter()
        bench_noop(n)
        latencies.append(time.perf_counter() - started)
    return latencies


def lost(run_ids: list[int], per_run: int) -> list[str]:
    """Runs that do not hold exactly their calls, each executed once and ok."""
    from django.db.models import Count

    from runs.models import Attempt

    counts = dict(Attempt.objects.filter(run_id__in=run_ids, status="ok").values_list("run_id")
                  .annotate(n=Count("id")).values_list("run_id", "n"))
    distinct = dict(Attempt.objects.filter(run_id__in=run_ids).values("run_id")
                    .annotate(n=Count("step__arguments_hash", distinct=True)).values_list("run_id", "n"))
    return [f"run {r}: {counts.get(r, 0)} ok attempts, {distinct.get(r, 0)} distinct calls (want {per_run})"
            for r in run_ids if counts.get(r, 0) != per_run or distinct.get(r, 0) != per_run]


async def measure(args, url: str, token: str, bare_url: str) -> dict:
    problems: list[str] = []
    gateway: list[float] = []
    await session(url, token, 20, 0, [], problems)   # warm-up: connections, caches, the worker's threads
    latency_run = await session(url, token, args.calls, 0, gateway, problems)
    direct = direct_calls(args.calls)
    bare = await bare_calls(bare_url, args.calls)
    together: list[float] = []
    started = time.perf_counter()
    run_ids = await asyncio.gather(*(session(url, token, args.per_session, s * args.per_session, together, problems)
                                     for s in range(args.sessions)))
    elapsed = time.perf_counter() - started
    from asgiref.sync import sync_to_async

    missing = await sync_to_async(lost)([latency_run], args.calls) + await sync_to_async(lost)(
        list(run_ids), args.per_session)
    ms = lambda v: round(v * 1000, 2)  # noqa: E731
    return {
        "calls": args.calls, "tools_call_p50_ms": ms(pct(gateway, .5)), "tools_call_p95_ms": ms(pct(gateway, .95)),
        "tools_call_p99_ms": ms(pct(gateway, .99)),
        "direct_p50_ms": ms(pct(direct, .5)), "direct_p95_ms": ms(pct(direct, .95)), "direct_p99_ms": ms(pct(direct, .99)),
        "bare_sdk_p50_ms": ms(pct(bare, .5)), "bare_sdk_p95_ms": ms(pct(bare, .95)), "bare_sdk_p99_ms": ms(pct(bare, .99)),
        "overhead_p50_ms": ms(pct(gateway, .5) - pct(direct, .5)),
        "overhead_p95_ms": ms(pct(gateway, .95) - pct(direct, .95)),
        "overhead_p99_ms": ms(pct(gateway, .99) - pct(direct, .99)),
        "sessions": args.sessions, "per_session": args.per_session, "concurrent_calls": len(together),
        "calls_per_s": round(len(together) / elapsed, 1), "concurrent_p50_ms": ms(statistics.median(together)),
        "concurrent_p99_ms": ms(pct(together, .99)), "failed_calls": problems[:10], "lost": missing[:10],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--per-session", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=16, help="the worker's threads")
    parser.add_argument("--json", action="store_true", help="one JSON object on the last line")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="agentops-gwbench-"))
    os.environ.setdefault("AGENTOPS_VAR_DIR", str(workdir / "var"))
    sys.path.insert(0, str(HERE))
    benchenv.start_django(ROOT)
    from django.conf import settings
    from django.db import connection

    token = prepare_agent()
    port = free_port()
    bare_port = free_port()
    procs = start_processes(args, workdir, port, bare_port)
    try:
        wait_up(port, bare_port)
        figures = asyncio.run(measure(args, f"http://127.0.0.1:{port}/mcp/", token, f"http://127.0.0.1:{bare_port}/mcp"))
    finally:
        stop(procs)
    figures["stack"] = f"{connection.vendor} + {settings.CELERY_BROKER_URL.split('://')[0]}"
    figures["cores"] = os.cpu_count()
    failed = bool(figures["failed_calls"] or figures["lost"])
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"MCP gateway on {figures['stack']} ({figures['cores']} cores; uvicorn, 1 worker x "
              f"{args.concurrency} threads; logs {workdir})\n"
              f"  tools/call, one session   p50 {figures['tools_call_p50_ms']} ms  p95 {figures['tools_call_p95_ms']} ms"
              f"  p99 {figures['tools_call_p99_ms']} ms  ({args.calls} calls)\n"
              f"  direct function call      p50 {figures['direct_p50_ms']} ms  p95 {figures['direct_p95_ms']} ms"
              f"  p99 {figures['direct_p99_ms']} ms\n"
              f"  the MCP SDK alone         p50 {figures['bare_sdk_p50_ms']} ms  p95 {figures['bare_sdk_p95_ms']} ms"
              f"  p99 {figures['bare_sdk_p99_ms']} ms  (bench/bare_mcp.py: no token, run, database or worker)\n"
              f"  gateway overhead          p50 {figures['overhead_p50_ms']} ms  p95 {figures['overhead_p95_ms']} ms"
              f"  p99 {figures['overhead_p99_ms']} ms\n"
              f"  {args.sessions} sessions at once     {figures['calls_per_s']} calls/s  p50 "
              f"{figures['concurrent_p50_ms']} ms  p99 {figures['concurrent_p99_ms']} ms "
              f"({figures['concurrent_calls']} calls)\n"
              f"  failed or lost            {len(figures['failed_calls']) + len(figures['lost'])} "
              f"{'; '.join(figures['failed_calls'] + figures['lost'])}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

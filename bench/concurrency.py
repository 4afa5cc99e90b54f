#!/usr/bin/env python
"""How many I/O-bound runs can one worker process advance at once?

Starts a loopback HTTP server whose every answer takes --delay seconds (200 ms), registers
it as an HTTP capability, then for each worker pool starts ONE real Celery worker process
(--concurrency N) and N runs of --steps steps each calling it, all queued at once. Ideal:
every run advances without waiting for another, so all finish after steps x delay. Prints
the wall time, steps per second against the ideal (N / delay) and the ratio.

    DATABASE_URL=postgres://... CELERY_BROKER_URL=redis://... .venv/bin/python bench/concurrency.py
    .venv/bin/python bench/concurrency.py --pools threads,gevent --runs 64 --steps 20
    .venv/bin/python bench/concurrency.py --pools threads,threads:2   # also: 2 worker processes, 32 threads each

Target: >= 0.9 of ideal at 64 concurrent runs. Needs PostgreSQL with max_connections above
N + 10 for the threads and gevent pools (one connection per concurrent run). gevent is not a
dependency of the product: install it into the venv to measure that pool.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import benchenv  # noqa: E402  (bench/ is on sys.path: these run as scripts)

from runtime.stop import RunStatus  # noqa: E402

benchenv.prepare()
CAPABILITY = "bench_slow_lookup"


def serve(port: int, delay: float, keep_alive: bool = True) -> None:
    """The slow peer: answers every GET after `delay` with {"n": n}. One asyncio loop, so
    hundreds of callers wait side by side for almost no CPU (a thread per request would not).
    Connections stay open for the next request (HTTP/1.1 keep-alive, as web servers do) unless
    the client asks to close or --no-keep-alive is given."""
    import asyncio

    async def answer(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1].decode()
                await asyncio.sleep(delay)
                n = int(parse_qs(urlsplit(target).query).get("n", ["0"])[0])
                body = json.dumps({"n": n}).encode()
                close = not keep_alive or b"\r\nconnection: close" in head.lower()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: %s\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (b"close" if close else b"keep-alive", len(body), body))
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, IndexError, ValueError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(answer, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def start_server(delay: float, keep_alive: bool = True) -> tuple[subprocess.Popen, int]:
    """The slow peer in its own process, so its threads take no CPU from the one measured."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--delay", str(delay),
                               *([] if keep_alive else ["--no-keep-alive"])])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server, port
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise SystemExit("the slow HTTP server did not start")


def call_layer(port: int, concurrency: int, waves: int, delay: float) -> list[tuple[str, float, float]]:
    """Only the HTTP calls, no run around them: the product's HttpExecutor on `concurrency` threads,
    against the same calls from one asyncio event loop (httpx.AsyncClient), as an async executor
    path would make them. (name, ratio to ideal, CPU ms per call)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from capabilities.executors.dispatch import CapabilityExecutor
    from capabilities.models import Capability
    from capabilities.netguard import NetGuard

    spec = Capability.objects.select_related("current_version").get(name=CAPABILITY).current_version.to_spec()
    executor = CapabilityExecutor(guard=NetGuard(["127.0.0.1"], allow_private=True))
    calls, ideal = concurrency * waves, waves * delay
    results = []

    wall, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(concurrency) as pool:
        observations = list(pool.map(lambda n: executor.execute(spec, {"n": n}), range(calls)))
    assert all(o.status.value == "ok" for o in observations), {o.error_message for o in observations}
    results.append(("threads + HttpExecutor", ideal / (time.perf_counter() - wall),
                    (time.process_time() - cpu) / calls * 1000))

    async def gather():
        limits = httpx.Limits(max_connections=concurrency)
        async with httpx.AsyncClient(trust_env=False, limits=limits) as client:
            semaphore = asyncio.Semaphore(concurrency)

            async def one(n):
                async with semaphore:
                    response = await client.get(f"http://127.0.0.1:{port}/lookup", params={"n": n})
                    return response.json()["n"]

            return await asyncio.gather(*(one(n) for n in range(calls)))

    wall, cpu = time.perf_counter(), time.process_time()
    assert sorted(asyncio.run(gather())) == list(range(calls))
    results.append(("asyncio + httpx.AsyncClient", ideal / (time.perf_counter() - wall),
                    (time.process_time() - cpu) / calls * 1000))
    return results


def register(port: int):
    from django.contrib.auth.models import User

    from capabilities.models import Capability
    from capabilities.policy import capability_create, capability_update

    user, created = User.objects.get_or_create(username="bench", defaults={"is_superuser": True, "is_staff": True})
    if created or not user.is_superuser:
        user.is_superuser = True
        user.save()
    url = f"http://127.0.0.1:{port}/lookup"
    existing = Capability.objects.filter(name=CAPABILITY).first()
    config = {"url": url, "method": "GET"}
    policy = {"side_effect": "none", "timeout_s": 5, "retry_max_attempts": 1,
              "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}
    if existing is None:
        capability_create(user=user, name=CAPABILITY, kind="http", policy=policy, config=config)
    elif existing.current_version.config != config:  # a new port: a new version (an unchanged one is refused)
        capability_update(user=user, capability_id=existing.pk, policy=policy, config=config)
    return user


def start_runs(user, count: int, steps: int) -> list[int]:
    from django.db import transaction

    from runs import services

    plan = [{"id": f"s{i}", "capability": CAPABILITY, "arguments": {"n": i}, "expected_outcome": "echo"}
            for i in range(steps)]
    budgets = {"deadline_s": 600, "max_iterations": steps + 5, "max_tool_calls": steps + 5,
               "max_calls_per_capability": {CAPABILITY: steps + 5}, "max_plan_steps": steps + 1,
               "max_retries": 0}
    # One transaction: every run is queued at the same instant, when it commits.
    with transaction.atomic():
        runs = [services.run_start(owner=user, goal=f"bench concurrency {i}", planner="scripted",
                                   planner_config={"plans": [plan]}, budgets=budgets,
                                   completion={"capability": CAPABILITY, "path": "n", "equals": steps - 1})
                for i in range(count)]
    return [r.pk for r in runs]


def wait_finished(run_ids: list[int], timeout: float) -> None:
    from core.choices import FINISHED_STATUSES
    from runs.models import Run

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Run.objects.filter(pk__in=run_ids, status__in=list(FINISHED_STATUSES)).count() == len(run_ids):
            return
        time.sleep(0.05)
    raise SystemExit(f"runs did not finish within {timeout} s")


def measure(pool: str, concurrency: int, runs: int, steps: int, delay: float, env: dict, profile: str = "",
            processes: int = 1, cold: bool = False) -> dict:
    """`processes` workers of `concurrency` // `processes` each (CPU is summed over them)."""
    from django.db.models import Max

    from runs.models import Run

    workers, hostnames = [], [f"bench-{pool}-{os.getpid()}-{n}@bench" for n in range(processes)]
    for hostname in hostnames:
        command = [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", pool,
                   "--concurrency", str(concurrency // processes), "--loglevel", "WARNING", "--without-mingle",
                   "--without-gossip", "--hostname", hostname]
        log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - the worker process writes it
            prefix=f"agentops-bench-{pool}-", suffix=".log", delete=False)
        workers.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
    spy = None
    try:
        user = register_user()
        warm = start_runs(user, 1, 1)  # a worker is up once this finishes
        wait_finished(warm, 120)
        wait_ready(hostnames)
        if not cold:
            # A worker that has been running: each of its threads has its database connection (kept
            # CONN_MAX_AGE, 60 s) and its imports done. Two slow steps keep every thread busy at once,
            # so the pool starts all of them. --cold measures a worker's first 64 runs.
            wait_finished(start_runs(user, concurrency, 2), 120)
        pids = [w.pid for w in workers]
        cpu_before, sys_before = process_cpu_s(*pids), process_cpu_s(*pids, system_only=True)
        if profile:  # py-spy (not a dependency) samples the worker while it advances the runs
            spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pids[0]),
                                    "--rate", "200", "--gil", "--nonblocking", "--format", "raw", "--output", profile],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run_ids = start_runs(user, runs, steps)
        queued = time.time()
        wait_finished(run_ids, 60 + steps * delay * runs)
        times = Run.objects.filter(pk__in=run_ids).aggregate(last=Max("finished_at"), started=Max("started_at"))
        finished, last_start = times["last"].timestamp(), times["started"].timestamp()
        where_time_goes = step_timing(run_ids, queued)
        outcomes = set(Run.objects.filter(pk__in=run_ids).values_list("stop_reason", "tool_calls"))
        cpu_per_step = (process_cpu_s(*pids) - cpu_before) / (runs * steps)
        sys_per_step = (process_cpu_s(*pids, system_only=True) - sys_before) / (runs * steps)
    finally:
        if spy is not None:
            spy.send_signal(2)
            spy.wait(timeout=60)
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    if outcomes != {(RunStatus.COMPLETED, steps)}:
        raise SystemExit(f"{pool}: runs did not all complete with {steps} calls: {outcomes} (log {log.name})")
    wall = finished - queued
    ideal = steps * delay
    return {"pool": pool if processes == 1 else f"{pool} x{processes}", "wall_s": wall, "cpu_ms_per_step": cpu_per_step * 1000,
            "sys_ms_per_step": sys_per_step * 1000, "ideal_s": ideal, "ratio": ideal / wall, "last_start_s": last_start - queued,
            "steps_per_s": runs * steps / wall, "ideal_steps_per_s": runs / delay, **where_time_goes}


def step_timing(run_ids: list[int], queued: float) -> dict:
    """Where a run's time went, from its attempt rows: when the runs began (median), how long a call
    took (its own 200 ms plus waiting for the GIL in the worker) and the gap between one call's end
    and the next one's start (the pass: decide, record, plan)."""
    import statistics

    from runs.models import Attempt, Run

    starts = sorted(t.timestamp() - queued for t in Run.objects.filter(pk__in=run_ids).values_list("started_at", flat=True))
    rows = Attempt.objects.filter(run_id__in=run_ids).order_by("run_id", "started_at").values_list(
        "run_id", "started_at", "ended_at")
    calls, gaps, previous = [], [], None
    first_call, last_end, ends = {}, {}, []
    for run_id, started, ended in rows:
        calls.append((ended - started).total_seconds())
        if previous is not None and previous[0] == run_id:
            gaps.append((started - previous[1]).total_seconds())
        previous = (run_id, ended)
        first_call.setdefault(run_id, started.timestamp())
        last_end[run_id] = ended.timestamp()
        ends.append(ended.timestamp())
    # While every run is between its first call and its last: calls ended per second, all of them in
    # flight (what a worker serving runs of many steps sustains, without the 64 runs' start-up).
    window = (max(first_call.values()), min(last_end.values()))
    in_window = sum(window[0] <= end <= window[1] for end in ends)
    span = window[1] - window[0]
    return {"median_start_s": statistics.median(starts), "call_ms": 1000 * statistics.mean(calls),
            "gap_ms": 1000 * statistics.mean(gaps) if gaps else 0.0,
            "first_call_last_s": window[0] - queued,
            "steady_steps_per_s": in_window / span if span > 0 else 0.0, "steady_window_s": span}


def process_cpu_s(*pids: int, system_only: bool = False) -> float:
    """CPU seconds (user + system, or system alone) processes have used, threads included (Linux /proc)."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[12]) if system_only else int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def wait_ready(hostnames: list[str], timeout: float = 60) -> None:
    """Every worker answers a ping (so runs are not all taken by the first one up)."""
    from agentops.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answered = {name for reply in app.control.ping(destination=hostnames, timeout=1.0) for name in reply}
        if answered >= set(hostnames):
            return
    raise SystemExit(f"workers did not all start: {hostnames}")


def register_user():
    from django.contrib.auth.models import User

    return User.objects.get(username="bench")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", default="threads,gevent")
    parser.add_argument("--runs", type=int, default=64, help="concurrent runs (and the worker's concurrency)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--profile", default="", help="record the worker with py-spy into PROFILE.<pool>.txt "
                        "(collapsed stacks; py-spy is not a dependency: pip install py-spy)")
    parser.add_argument("--cold", action="store_true", help="measure a fresh worker's first runs (each thread "
                        "opens its database connection while the runs start) instead of a warm worker's")
    parser.add_argument("--var-dir", default=os.path.join(tempfile.gettempdir(), "agentops-bench-concurrency"))
    parser.add_argument("--no-keep-alive", action="store_true", help="the slow server closes every connection "
                        "after its answer (each call then opens a new one)")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # internal: be the slow server
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.delay, keep_alive=not args.no_keep_alive)
        return
    os.environ.setdefault("AGENTOPS_VAR_DIR", args.var_dir)
    os.environ["AGENTOPS_HTTP_ALLOWED_HOSTS"] = "127.0.0.1"
    os.environ["AGENTOPS_HTTP_ALLOW_PRIVATE"] = "true"
    benchenv.start_django(ROOT)
    env = dict(os.environ)
    server, port = start_server(args.delay, keep_alive=not args.no_keep_alive)
    try:
        register(port)
        report(args, port, env)
    finally:
        server.kill()
        server.wait()


def report(args, port: int, env: dict) -> None:
    from django.conf import settings
    from django.db import connection

    print(f"{args.runs} runs x {args.steps} steps of {args.delay * 1000:.0f} ms on {connection.vendor}, broker "
          f"{settings.CELERY_BROKER_URL.split('://')[0]}, one worker process per pool, "
          f"{'cold (its first runs)' if args.cold else 'warm (its threads have served runs before)'}, the peer "
          f"{'closes each connection' if args.no_keep_alive else 'keeps connections alive'}")
    print(f"{'pool':10} {'wall s':>8} {'ideal s':>8} {'steps/s':>9} {'ideal/s':>8} {'ratio':>6} "
          f"{'runs began (median, last)':>26} "
          f"{'last 1st call':>13} {'steady steps/s':>15} {'steady ratio':>12} "
          f"{'call':>9} {'between calls':>14} {'worker CPU/step':>16} {'of it kernel':>13} {'CPU-bound max':>14}")
    load_before = f"{os.getloadavg()[0]:.2f}"
    for entry in args.pools.split(","):
        pool, _, processes = entry.partition(":")
        if pool in ("gevent", "eventlet") and importlib.util.find_spec(pool) is None:
            print(f"{pool:10} not installed (not a dependency: .venv/bin/pip install {pool} to measure it)")
            continue
        result = measure(pool, args.runs, args.runs, args.steps, args.delay, env,
                         profile=f"{args.profile}.{pool}.txt" if args.profile else "", processes=int(processes or 1),
                         cold=args.cold)
        print(f"{result['pool']:10} {result['wall_s']:8.2f} {result['ideal_s']:8.2f} {result['steps_per_s']:9.1f} "
              f"{result['ideal_steps_per_s']:8.1f} {result['ratio']:6.2f} "
              f"{result['median_start_s']:15.2f} s, {result['last_start_s']:5.2f} s "
              f"{result['first_call_last_s']:11.2f} s {result['steady_steps_per_s']:15.1f} "
              f"{result['steady_steps_per_s'] / result['ideal_steps_per_s']:12.2f} "
              f"{result['call_ms']:6.1f} ms {result['gap_ms']:11.1f} ms "
              f"{result['cpu_ms_per_step']:13.2f} ms {result['sys_ms_per_step']:10.2f} ms "
              f"{1000 * int(processes or 1) / result['cpu_ms_per_step']:10.0f}/s", flush=True)
    print(f"Load average before and after: {load_before}, {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores).")
    print("One process runs Python on one core at a time: steps/s cannot exceed 1000 / (worker CPU ms per step),\n"
          "whatever the pool; the ideal needs that to reach runs / delay.")
    print(f"\nThe HTTP calls alone, {args.runs} at a time, 5 waves (ideal {5 * args.delay:.1f} s), in this process:")
    for name, ratio, cpu_ms in call_layer(port, args.runs, 5, args.delay):
        print(f"  {name:28} ratio {ratio:5.2f}   CPU {cpu_ms:5.2f} ms per call")


if __name__ == "__main__":
    main()

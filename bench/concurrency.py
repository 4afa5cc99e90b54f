#!/usr/bin/env python
"""How many I/O-bound runs can one worker process advance at once?

Starts a loopback HTTP server whose every answer takes --delay seconds (200 ms), registers
it as an HTTP capability, then for each worker pool starts ONE real Celery worker process
(--concurrency N) and N runs of --steps steps each calling it, all queued at once. Ideal:
every run advances without waiting for another, so all finish after steps x delay. Prints
the wall time, steps per second against the ideal (N / delay) and the ratio.

    DATABASE_URL=postgres://... CELERY_BROKER_URL=redis://... .venv/bin/python bench/concurrency.py
    .venv/bin/python bench/concurrency.py --pools threads,gevent --runs 64 --steps 20

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

benchenv.prepare()
CAPABILITY = "bench_slow_lookup"


def serve(port: int, delay: float) -> None:
    """The slow peer: answers every GET after `delay` with {"n": n}. One asyncio loop, so
    hundreds of callers wait side by side for almost no CPU (a thread per request would not)."""
    import asyncio

    async def answer(reader, writer):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            target = head.split(b" ", 2)[1].decode()
            await asyncio.sleep(delay)
            n = int(parse_qs(urlsplit(target).query).get("n", ["0"])[0])
            body = json.dumps({"n": n}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, IndexError, ValueError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(answer, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def start_server(delay: float) -> tuple[subprocess.Popen, int]:
    """The slow peer in its own process, so its threads take no CPU from the one measured."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--delay", str(delay)])
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

    from capabilities.policy import capability_create, capability_update
    from capabilities.models import Capability

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
    else:
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


def measure(pool: str, concurrency: int, runs: int, steps: int, delay: float, env: dict) -> dict:
    from django.db.models import Max

    from runs.models import Run

    command = [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", pool,
               "--concurrency", str(concurrency), "--loglevel", "WARNING", "--without-mingle", "--without-gossip",
               "--hostname", f"bench-{pool}-{os.getpid()}@%h"]
    log = tempfile.NamedTemporaryFile(prefix=f"agentops-bench-{pool}-", suffix=".log", delete=False)
    worker = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        user = register_user()
        warm = start_runs(user, 1, 1)  # the worker is up once this finishes
        wait_finished(warm, 120)
        cpu_before = process_cpu_s(worker.pid)
        run_ids = start_runs(user, runs, steps)
        queued = time.time()
        wait_finished(run_ids, 60 + steps * delay * runs)
        times = Run.objects.filter(pk__in=run_ids).aggregate(last=Max("finished_at"), started=Max("started_at"))
        finished, last_start = times["last"].timestamp(), times["started"].timestamp()
        outcomes = set(Run.objects.filter(pk__in=run_ids).values_list("stop_reason", "tool_calls"))
        cpu_per_step = (process_cpu_s(worker.pid) - cpu_before) / (runs * steps)
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    if outcomes != {("completed", steps)}:
        raise SystemExit(f"{pool}: runs did not all complete with {steps} calls: {outcomes} (log {log.name})")
    wall = finished - queued
    ideal = steps * delay
    return {"pool": pool, "wall_s": wall, "cpu_ms_per_step": cpu_per_step * 1000, "ideal_s": ideal, "ratio": ideal / wall, "last_start_s": last_start - queued,
            "steps_per_s": runs * steps / wall, "ideal_steps_per_s": runs / delay}


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used, threads included (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def register_user():
    from django.contrib.auth.models import User

    return User.objects.get(username="bench")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", default="threads,gevent")
    parser.add_argument("--runs", type=int, default=64, help="concurrent runs (and the worker's concurrency)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--var-dir", default=os.path.join(tempfile.gettempdir(), "agentops-bench-concurrency"))
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # internal: be the slow server
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.delay)
        return
    os.environ.setdefault("AGENTOPS_VAR_DIR", args.var_dir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentops.settings"
    os.environ["AGENTOPS_HTTP_ALLOWED_HOSTS"] = "127.0.0.1"
    os.environ["AGENTOPS_HTTP_ALLOW_PRIVATE"] = "true"
    env = dict(os.environ)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    import django

    django.setup()
    server, port = start_server(args.delay)
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
          f"{settings.CELERY_BROKER_URL.split('://')[0]}, one worker process per pool")
    print(f"{'pool':10} {'wall s':>8} {'ideal s':>8} {'steps/s':>9} {'ideal/s':>8} {'ratio':>6} {'last run began':>15} {'worker CPU/step':>16} {'CPU-bound max':>14}")
    for pool in args.pools.split(","):
        if pool in ("gevent", "eventlet") and importlib.util.find_spec(pool) is None:
            print(f"{pool:10} not installed (not a dependency: .venv/bin/pip install {pool} to measure it)")
            continue
        result = measure(pool, args.runs, args.runs, args.steps, args.delay, env)
        print(f"{pool:10} {result['wall_s']:8.2f} {result['ideal_s']:8.2f} {result['steps_per_s']:9.1f} "
              f"{result['ideal_steps_per_s']:8.1f} {result['ratio']:6.2f} {result['last_start_s']:13.2f} s "
              f"{result['cpu_ms_per_step']:13.2f} ms {1000 / result['cpu_ms_per_step']:10.0f}/s", flush=True)
    print("One process runs Python on one core at a time: steps/s cannot exceed 1000 / (worker CPU ms per step),\n"
          "whatever the pool; the ideal needs that to reach runs / delay.")
    print(f"\nThe HTTP calls alone, {args.runs} at a time, 5 waves (ideal {5 * args.delay:.1f} s), in this process:")
    for name, ratio, cpu_ms in call_layer(port, args.runs, 5, args.delay):
        print(f"  {name:28} ratio {ratio:5.2f}   CPU {cpu_ms:5.2f} ms per call")


if __name__ == "__main__":
    main()

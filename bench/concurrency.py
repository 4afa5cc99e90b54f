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
N + 10 for the threads and gevent pools (one connection per concurrent run).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CAPABILITY = "bench_slow_lookup"


def serve(port: int, delay: float) -> None:
    """The slow peer: sleeps `delay`, then echoes n. Threads, so 64 callers wait side by side."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            time.sleep(delay)
            n = int(parse_qs(urlsplit(self.path).query).get("n", ["0"])[0])
            body = json.dumps({"n": n}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.request_queue_size = 1024
    server.serve_forever()


def start_server(delay: float) -> tuple[threading.Thread, int]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    thread = threading.Thread(target=serve, args=(port, delay), daemon=True)
    thread.start()
    return thread, port


def register(port: int):
    from django.contrib.auth.models import User

    from capabilities import services as capability_services
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
        capability_services.capability_create(user=user, name=CAPABILITY, kind="http", policy=policy, config=config)
    else:
        capability_services.capability_update(user=user, capability_id=existing.pk, policy=policy, config=config)
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
    from runs.choices import FINISHED_STATUSES
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
    args = parser.parse_args()
    os.environ.setdefault("AGENTOPS_VAR_DIR", args.var_dir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentops.settings"
    os.environ["AGENTOPS_HTTP_ALLOWED_HOSTS"] = "127.0.0.1"
    os.environ["AGENTOPS_HTTP_ALLOW_PRIVATE"] = "true"
    env = dict(os.environ)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    _thread, port = start_server(args.delay)
    register(port)
    print(f"{args.runs} runs x {args.steps} steps of {args.delay * 1000:.0f} ms on {connection.vendor}, broker "
          f"{settings.CELERY_BROKER_URL.split('://')[0]}, one worker process per pool")
    print(f"{'pool':10} {'wall s':>8} {'ideal s':>8} {'steps/s':>9} {'ideal/s':>8} {'ratio':>6} {'last run began':>15} {'worker CPU/step':>16} {'CPU-bound max':>14}")
    for pool in args.pools.split(","):
        result = measure(pool, args.runs, args.runs, args.steps, args.delay, env)
        print(f"{pool:10} {result['wall_s']:8.2f} {result['ideal_s']:8.2f} {result['steps_per_s']:9.1f} "
              f"{result['ideal_steps_per_s']:8.1f} {result['ratio']:6.2f} {result['last_start_s']:13.2f} s "
              f"{result['cpu_ms_per_step']:13.2f} ms {1000 / result['cpu_ms_per_step']:10.0f}/s", flush=True)
    print("One process runs Python on one core at a time: steps/s cannot exceed 1000 / (worker CPU ms per step),\n"
          "whatever the pool; the ideal needs that to reach runs / delay.")


if __name__ == "__main__":
    main()

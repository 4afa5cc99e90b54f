#!/usr/bin/env python
"""What does an admission under a registry-wide rate limit cost, and does it hold under contention?

One admission is one locked read-modify-write of the capability's RateLimitWindow row
(capabilities/ratelimit.py). Prints the median and p95 latency of an uncontended
admission, then races N threads (each with its own connection) for a limit of K calls
and prints how many were admitted (must be exactly K) and the wall time.

    .venv/bin/python bench/ratelimit_admission.py [--admissions 500] [--threads 8] [--limit 50]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/mydb .venv/bin/python bench/ratelimit_admission.py

Uses a fresh SQLite file in a temporary directory unless DATABASE_URL is set (it then
migrates that database and writes rows named bench_*).
"""
from __future__ import annotations

import argparse
import contextvars
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import benchenv  # noqa: E402  (bench/ is on sys.path: these run as scripts)

benchenv.prepare()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--admissions", type=int, default=500)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--limit", type=int, default=50)
    args = parser.parse_args()
    os.environ.setdefault("AGENTOPS_VAR_DIR", tempfile.mkdtemp(prefix="agentops-bench-"))
    benchenv.start_django(ROOT)
    from django.db import connection

    from capabilities.models import RateLimitWindow
    from capabilities.ratelimit import admit
    from runtime.capability import CapabilitySpec, RateLimit

    RateLimitWindow.objects.filter(capability_name__startswith="bench_").delete()
    roomy = CapabilitySpec(name="bench_roomy", rate_limit=RateLimit(10 ** 9, 3600.0))
    # The window keeps only the admissions inside the period: bound it for the latency figure.
    bounded = CapabilitySpec(name="bench_bounded", rate_limit=RateLimit(100, 0.001))
    for spec, label in ((bounded, "window of <=100"), (roomy, "growing window")):
        timings = []
        for _ in range(args.admissions if spec is bounded else min(args.admissions, 200)):
            started = time.perf_counter()
            admit(spec)
            timings.append(time.perf_counter() - started)
        timings.sort()
        print(f"{connection.vendor:10s} uncontended admission ({label}): median {statistics.median(timings) * 1e3:6.2f} ms, "
              f"p95 {timings[int(len(timings) * .95)] * 1e3:6.2f} ms")

    raced = CapabilitySpec(name="bench_raced", rate_limit=RateLimit(args.limit, 3600.0))
    per_thread = max(1, (args.limit * 2) // args.threads)
    results: list[float | None] = []
    lock, barrier = threading.Lock(), threading.Barrier(args.threads)

    def contend() -> None:
        try:
            barrier.wait()
            for _ in range(per_thread):
                outcome = admit(raced)
                with lock:
                    results.append(outcome)
        finally:
            connection.close()

    # Each thread acts in the project in scope, as a worker's pass does (a new thread starts with none).
    threads = [threading.Thread(target=contextvars.copy_context().run, args=(contend,)) for _ in range(args.threads)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    admitted = sum(r is None for r in results)
    print(f"{connection.vendor:10s} {args.threads} threads x {per_thread} admissions for {args.limit} slots: "
          f"{admitted} admitted ({'exact' if admitted == args.limit else 'WRONG'}), {len(results) - admitted} told to "
          f"wait, {len(results) / wall:7.1f} admissions/s")
    RateLimitWindow.objects.filter(capability_name__startswith="bench_").delete()


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""What does retention cost with attempts partitioned by month (PostgreSQL), and without?

Builds N finished runs of M attempts each, created over the 30 days that ended 400 days ago
(bench/explorer.py's loader: two calendar months of attempts), then purges every run older
than 365 days with runs.retention.purge_runs, and prints its wall time, the WAL it wrote and
what the attempts table holds after (its size, and the dead rows left for VACUUM). Run it
twice on two fresh databases of your own cluster: as migrated (months dropped whole), and with
--unpartitioned (migration runs.0033 reversed first: every attempt deleted row by row).

    createdb -h 127.0.0.1 -p 5499 -U postgres ret_a; createdb -h 127.0.0.1 -p 5499 -U postgres ret_b
    DATABASE_URL=postgres://postgres@127.0.0.1:5499/ret_a .venv/bin/python bench/retention.py --runs 50000
    DATABASE_URL=postgres://postgres@127.0.0.1:5499/ret_b .venv/bin/python bench/retention.py --runs 50000 \\
        --unpartitioned
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import benchenv  # noqa: E402  (bench/ is on sys.path: these run as scripts)

benchenv.prepare()


def scalar(sql: str):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50_000)
    parser.add_argument("--attempts-per-run", type=int, default=10)
    parser.add_argument("--unpartitioned", action="store_true", help="reverse runs.0033 first")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("DATABASE_URL must name a PostgreSQL database: SQLite has no partitions")
    os.environ.setdefault("DEBUG", "true")
    benchenv.start_django(ROOT)
    if args.unpartitioned:
        benchenv.unpartition_attempts(ROOT)
    from django.db import connection
    from explorer import build

    from runs import partitions
    from runs.retention import purge_runs

    end = datetime.now(UTC) - timedelta(days=400)
    if partitions.is_partitioned():
        partitions.create_months([partitions.month_start(end - timedelta(days=31)), partitions.month_start(end)])
    build(args.runs, args.attempts_per_run, end=end)
    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")   # the load's full-page images are not the purge's
    attempts = scalar("SELECT count(*) FROM runs_attempt")
    size_before = scalar("SELECT pg_total_relation_size('runs_attempt') + coalesce((SELECT sum("
                         "pg_total_relation_size(inhrelid)) FROM pg_inherits WHERE inhparent = 'runs_attempt'::regclass), 0)")
    lsn = scalar("SELECT pg_current_wal_lsn()")
    started, cpu = time.perf_counter(), time.process_time()
    report = purge_runs(older_than_days=365)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    wal = scalar(f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{lsn}')")
    scalar("SELECT pg_stat_force_next_flush()")   # this backend's counts of dead rows (PostgreSQL 15+)
    time.sleep(1.5)
    dead = scalar("SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE relname LIKE 'runs_attempt%'")
    size_after = scalar("SELECT pg_total_relation_size('runs_attempt') + coalesce((SELECT sum("
                        "pg_total_relation_size(inhrelid)) FROM pg_inherits WHERE inhparent = 'runs_attempt'::regclass), 0)")
    layout = "partitioned by month" if partitions.is_partitioned() else "one table"
    print(f"attempts {layout}: {args.runs:,} runs, {attempts:,} attempts, {size_before / 2**20:.0f} MB")
    print(f"purge: {report.summary()}")
    print(f"  wall {wall:.1f} s (this process's CPU {cpu:.1f} s), WAL {wal / 2**20:.1f} MB "
          f"({wal / max(attempts, 1):.0f} B per attempt)")
    print(f"  after: attempts table {size_after / 2**20:.0f} MB on disk, {dead:,} dead rows left for VACUUM")


if __name__ == "__main__":
    main()

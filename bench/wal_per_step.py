#!/usr/bin/env python
"""How much WAL does a step write, and how many steps a second does one worker advance?

Runs bench/concurrency.py (a real Celery worker, --runs runs of --steps HTTP steps) on
PostgreSQL, notes the WAL position before and after, and reads the WAL written in between
with pg_waldump, keeping only this database's records (those naming one of its relations,
and the commit records of their transactions): other databases on the same cluster, as on a
shared machine, are left out. Prints steps/s, WAL per step (and of it full-page images, which
depend on how recently a checkpoint ran), records per step and the bytes per resource manager;
then the share of runs_run's updates that were HOT (heap-only: no index entry written, from
pg_stat_user_tables) and the number of indexes each attempt insert keeps up.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench CELERY_BROKER_URL=redis://127.0.0.1:6379/9 \\
        .venv/bin/python bench/wal_per_step.py --runs 16 --steps 20

Needs the cluster's pg_wal directory on this machine (run as root or postgres) and a
superuser role (data_directory).
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"blkref #0: rel \d+/\d+/(\d+)")
RECORD = re.compile(r"rmgr: (\S+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+), tx:\s*(\d+), lsn: \S+, prev \S+, desc: (.*)")


def psql(sql: str) -> str:
    return subprocess.run(["psql", os.environ["DATABASE_URL"], "-Atc", sql], check=True, capture_output=True,
                          text=True).stdout.strip()


UPDATED_TABLES = ("runs_run", "runs_step")   # each pass updates a row of each


def run_updates() -> dict[str, tuple[int, int]]:
    """The updates and HOT updates so far of the tables every pass updates. A backend sends its
    statistics at most once a second (and at exit): the bench's worker has exited, so a short wait
    lets the collector catch up."""
    import time

    time.sleep(1.5)
    psql("SELECT pg_stat_clear_snapshot()")
    found = {}
    for table in UPDATED_TABLES:
        updates, hot = psql(f"SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = '{table}'").split("|")
        found[table] = (int(updates), int(hot))
    return found


def index_count(table: str) -> str:
    """How many indexes the table has, and how many of them are partial (an insert writes to those
    only when the row meets their condition)."""
    total, partial = psql(f"SELECT count(*), count(*) FILTER (WHERE indpred IS NOT NULL) FROM pg_index "
                          f"WHERE indrelid = '{table}'::regclass").split("|")
    return f"{total} ({partial} of them partial)"


def table_fillfactor(table: str) -> str:
    options = psql(f"SELECT reloptions FROM pg_class WHERE oid = '{table}'::regclass")
    found = re.search(r"fillfactor=(\d+)", options)
    return found.group(1) if found else "100 (default)"


def waldump() -> str:
    found = shutil.which("pg_waldump") or sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_waldump"))[-1:]
    if not found:
        raise SystemExit("pg_waldump not found (it comes with the PostgreSQL server package)")
    return found if isinstance(found, str) else found[0]


def attribute(dump: str, oid: str) -> dict:
    """This database's records: those naming its relations, then the commits of their transactions."""
    mine = f"/{oid}/"
    records = [(m.group(1), int(m.group(3)), m.group(4), m.group(5)) for line in dump.splitlines()
               if (m := RECORD.search(line))]
    txs = {tx for _, _, tx, desc in records if mine in desc and tx != "0"}
    kept = [(rmgr, size, desc) for rmgr, size, tx, desc in records
            if mine in desc or (rmgr == "Transaction" and tx in txs)]
    by_rmgr: Counter = Counter()
    for rmgr, size, _ in kept:
        by_rmgr[rmgr] += size
    fpi = sum(size for _, size, desc in kept if "FPW" in desc)
    by_relation: Counter = Counter()
    for _, size, desc in kept:
        found = BLOCK.search(desc)
        by_relation[found.group(1) if found else "(commits)"] += size
    return {"bytes": sum(size for _, size, _ in kept), "records": len(kept), "fpi_bytes": fpi,
            "transactions": len(txs), "by_rmgr": by_rmgr, "by_relation": by_relation,
            "run_updates": run_update_kinds(kept)}


def run_update_kinds(kept: list) -> Counter:
    """runs_run's heap updates by kind: HOT; not HOT with the new version on the same page (so an
    indexed column changed); not HOT on another page (no room left on the old one)."""
    run = psql("SELECT relfilenode FROM pg_class WHERE oid = 'runs_run'::regclass")
    kinds: Counter = Counter()
    for rmgr, _, desc in kept:
        if not rmgr.startswith("Heap") or f"/{run} " not in desc + " ":
            continue
        if desc.startswith("HOT_UPDATE"):
            kinds["HOT"] += 1
        elif desc.startswith("UPDATE"):
            kinds["not HOT, other page" if "blkref #1" in desc else "not HOT, same page"] += 1
    return kinds


def relation_names() -> dict[str, str]:
    """relfilenode -> name; a TOAST table and its index are named after their table."""
    rows = psql("SELECT c.relfilenode, coalesce(t.relname || ' (TOAST)', ti.relname || ' (TOAST index)', c.relname) "
                "FROM pg_class c LEFT JOIN pg_class t ON t.reltoastrelid = c.oid "
                "LEFT JOIN pg_index i ON i.indexrelid = c.oid "
                "LEFT JOIN pg_class ti ON ti.reltoastrelid = i.indrelid WHERE c.relfilenode <> 0")
    return dict(line.split("|", 1) for line in rows.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.02, help="each HTTP call's answer time")
    parser.add_argument("--pool", default="threads")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        raise SystemExit("set DATABASE_URL to a PostgreSQL database")
    oid = psql("SELECT oid FROM pg_database WHERE datname = current_database()")
    pg_wal = Path(psql("SHOW data_directory")) / "pg_wal"
    # Migrated first, so the window holds the bench's runs alone.
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True,
                   env={**os.environ, "DEBUG": os.environ.get("DEBUG", "true")})
    attempts = "SELECT count(*) FROM runs_attempt"
    before_attempts = int(psql(attempts))
    before_updates = run_updates()
    start = psql("SELECT pg_current_wal_lsn()")
    bench = subprocess.run([sys.executable, str(ROOT / "bench" / "concurrency.py"), "--pools", args.pool, "--runs",
                            str(args.runs), "--steps", str(args.steps), "--delay", str(args.delay)],
                           cwd=ROOT, check=True, capture_output=True, text=True)
    end = psql("SELECT pg_current_wal_lsn()")
    after_updates = run_updates()
    dump = subprocess.run([waldump(), "-p", str(pg_wal), "-s", start, "-e", end], capture_output=True, text=True)
    if dump.returncode and not dump.stdout:
        raise SystemExit(f"pg_waldump: {dump.stderr.strip()} (the segments were recycled: run again)")
    steps = int(psql(attempts)) - before_attempts
    found = attribute(dump.stdout, oid)
    lines = bench.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("pool"))
    print("\n".join(lines[:header + 2]))
    cluster = int(float(psql(f"SELECT pg_wal_lsn_diff('{end}', '{start}')")))
    print(f"\nWAL of this database over the bench ({args.runs} runs started and finished, {steps} steps), "
          f"of {cluster / 1e6:.1f} MB written by the whole cluster meanwhile:")
    print(f"  {found['bytes'] / steps / 1000:.2f} KB per step, of it full-page images "
          f"{found['fpi_bytes'] / steps / 1000:.2f} KB; {found['records'] / steps:.1f} records and "
          f"{found['transactions'] / steps:.2f} transactions per step")
    for rmgr, size in found["by_rmgr"].most_common(6):
        print(f"  {rmgr:12} {size / steps / 1000:6.2f} KB per step")
    names = relation_names()
    print("  by relation:")
    for relation, size in found["by_relation"].most_common(14):
        print(f"    {names.get(relation, relation):44} {size / steps / 1000:6.2f} KB per step")
    print(f"  runs_run's heap updates: {dict(found['run_updates'])}")
    print()
    for table in UPDATED_TABLES:
        updates = after_updates[table][0] - before_updates[table][0]
        hot = after_updates[table][1] - before_updates[table][1]
        print(f"{table}: {updates} updates, {hot} of them HOT ({100 * hot / max(updates, 1):.0f} %); "
              f"fillfactor {table_fillfactor(table)}")
    print(f"runs_attempt: {index_count('runs_attempt')} indexes")


if __name__ == "__main__":
    main()

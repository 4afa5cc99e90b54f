#!/usr/bin/env python
"""What does one pass cost as the plan grows? CPU, WAL and rows per pass at plan lengths 10, 100 and 1,000.

Drives runs pass by pass through the real adapter, as a worker's slice does (runs.worker: a
claimed lease, the PassWriter committing each pass: one statement on PostgreSQL), on a plan of
N steps of the no-op python capability `bench_noop` (bench/gw_bench_capabilities.py), each step
one call. For the passes that make a call (the first 9 of each run, as many at every length) it
prints per pass: this process's CPU (the controller, the executor, the adapter) and of it the
write's, the server backend's CPU (read from /proc: the database runs on this machine), the WAL
written (pg_current_wal_lsn; run on a cluster of its own so nothing else writes), the
checkpoint's head as stored, and the HOT share of the run row's updates. Target (issue 33): at
1,000 steps within 1.5x of 10 steps in CPU and WAL.

    pg_createcluster 15 passcost --port 5498 -- --auth=trust && pg_ctlcluster 15 passcost start
    createdb -h 127.0.0.1 -p 5498 -U postgres bench_pass
    DATABASE_URL=postgres://postgres@127.0.0.1:5498/bench_pass .venv/bin/python bench/pass_cost.py
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import benchenv  # noqa: E402  (bench/ is on sys.path: these run as scripts)

benchenv.prepare()

TICKS = os.sysconf("SC_CLK_TCK")


def backend_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS   # utime, stime


def scalar(sql: str):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]


def run_updates() -> tuple[int, int]:
    """(updates, HOT updates) of the run table so far, flushed from this backend first."""
    scalar("SELECT pg_stat_force_next_flush()")
    scalar("SELECT 1")
    time.sleep(1.1)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'runs_run'")
        return cursor.fetchone()


def noop_capability():
    """The no-op python capability bench/gateway.py uses, and the owner the runs start as."""
    from django.contrib.auth.models import User

    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync(modules=("capabilities.demo.functions", "gw_bench_capabilities"))
    owner, _ = User.objects.get_or_create(username="bench", defaults={"is_superuser": True, "is_staff": True})
    return owner


CALLS_PER_RUN = 9   # the calls measured in each run: as many at every plan length (a 10-step plan has 10)


def one_run(owner, steps: int) -> dict:
    """One run of a `steps`-step plan: its first CALLS_PER_RUN calls measured, pass by pass."""
    from django.db import connection

    from runs import checkpoint, services
    from runs.models import Run
    from runs.worker import adapters, leases
    from runs.worker.persistence import PassWriter

    plan = [{"id": f"s{n}", "capability": "bench_noop", "arguments": {"i": n}} for n in range(steps)]
    run = services.run_start(owner=owner, goal=f"pass cost at {steps} steps",
                             completion={"capability": "bench_noop", "path": "i", "equals": -1},
                             budgets={"deadline_s": 3600, "max_plan_steps": steps, "max_tool_calls": 10 * steps,
                                      "max_iterations": 10 * steps},
                             planner="scripted", planner_config={"plans": [plan]})
    lease = leases.claim(run.pk, "bench")
    run = Run.objects.get(pk=run.pk)
    writer = PassWriter(run, lease)
    controller = adapters.build_controller(run, writer)
    state = writer.previous = checkpoint.load(run)
    transition = controller.advance(state)     # the plan
    writer.commit(transition)
    state = transition.state
    backend = scalar("SELECT pg_backend_pid()")
    figures = {"passes": 0, "cpu": 0.0, "write": 0.0, "server": 0.0, "wal": 0}
    while figures["passes"] < CALLS_PER_RUN and not state.is_terminal:
        lsn = scalar("SELECT pg_current_wal_lsn()")
        server_before, started = backend_cpu_s(backend), time.process_time()
        transition = controller.advance(state)
        writing = time.process_time()
        writer.commit(transition)
        ended = time.process_time()
        figures["server"] += backend_cpu_s(backend) - server_before
        figures["cpu"] += ended - started
        figures["write"] += ended - writing
        figures["wal"] += int(scalar(f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{lsn}')"))
        figures["passes"] += 1
        state = transition.state
    figures["head"] = len(json.dumps(Run.objects.get(pk=run.pk).state))
    connection.close()
    return figures


def one_length(owner, steps: int, passes: int) -> dict:
    updates_before = run_updates()
    runs = [one_run(owner, steps) for _ in range(max(1, -(-passes // CALLS_PER_RUN)))]
    updates_after = run_updates()
    done = sum(r["passes"] for r in runs)
    total = {k: sum(r[k] for r in runs) for k in ("cpu", "write", "server", "wal")}
    updates, hot = updates_after[0] - updates_before[0], updates_after[1] - updates_before[1]
    return {"steps": steps, "passes": done, "cpu_ms": 1000 * total["cpu"] / done,
            "write_ms": 1000 * total["write"] / done, "server_ms": 1000 * total["server"] / done,
            "wal_b": total["wal"] / done, "head_b": max(r["head"] for r in runs), "hot": hot / updates if updates else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=200, help="calls measured per plan length")
    parser.add_argument("--lengths", default="10,100,1000")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("Needs DATABASE_URL on a PostgreSQL cluster of its own (WAL is counted cluster-wide).")
    os.environ.setdefault("AGENTOPS_VAR_DIR", "/tmp/agentops-bench-pass")
    benchenv.start_django(ROOT)
    owner = noop_capability()
    rows = [one_length(owner, int(n), args.passes) for n in args.lengths.split(",")]
    print(f"PostgreSQL, one pass = one call of a no-op read capability, committed as a worker does; "
          f"{args.passes} passes per plan length (9 per run); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'plan steps':>10} {'CPU ms':>7} {'of it write':>11} {'server ms':>9} {'WAL B':>7} {'head B':>7} "
          f"{'HOT %':>6}")
    for r in rows:
        print(f"{r['steps']:>10} {r['cpu_ms']:7.2f} {r['write_ms']:11.2f} {r['server_ms']:9.2f} {r['wal_b']:7.0f} "
              f"{r['head_b']:7d} {100 * r['hot']:6.1f}")
    base = rows[0]
    for r in rows[1:]:
        cpu = (r["cpu_ms"] + r["server_ms"]) / (base["cpu_ms"] + base["server_ms"])
        print(f"{r['steps']} vs {base['steps']} steps: CPU x{cpu:.2f}, WAL x{r['wal_b'] / base['wal_b']:.2f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""How much does the runtime add per step?

1. In-process: the real Controller on a simulated capability and clock, so the
   figure is the controller's own overhead per pass (plus the checkpoint's JSON
   round trip that every persisted pass pays).
2. End to end: a real Celery worker and database advance a polling run; the
   per-step latency (one capability call recorded with its decision) is printed
   beside one bare insert-and-commit measured in the same run, as a ratio, and
   the write transactions per step are counted.

    .venv/bin/python bench/step_overhead.py [--steps 300]
    DATABASE_URL=postgres://... CELERY_BROKER_URL=redis://... .venv/bin/python bench/step_overhead.py

Target: at most 2 write transactions per step.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def in_process(steps: int) -> None:
    from runs.runtime.scenario import prepare_scenario
    from runs.runtime.state import RunState

    scenario = {
        "name": "bench", "goal": "poll until resolved",
        "completion": {"capability": "status", "path": "status", "equals": "resolved"},
        "budgets": {"max_iterations": steps + 10, "max_tool_calls": steps + 10, "deadline_s": 10 ** 9,
                    "max_calls_per_capability": {"status": steps + 10}},
        "capabilities": [{"name": "status", "side_effect": "read", "polling": {"max_attempts": steps + 5, "interval_s": 1},
                          "schema": {"type": "object", "properties": {"id": {"type": "integer"}}},
                          "responses": [{"return": {"status": "open"}}] * (steps - 1)
                          + [{"return": {"status": "resolved"}}]}],
        "planner": {"plans": [[{"capability": "status", "arguments": {"id": 1}}]]},
    }
    rig = prepare_scenario(scenario)
    state, passes, advance_s, checkpoint_s = rig.state, 0, [], []
    while not state.is_terminal:
        started = time.perf_counter()
        transition = rig.controller.advance(state)
        advance_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        state = RunState.from_dict(json.loads(json.dumps(transition.state.to_dict())))
        checkpoint_s.append(time.perf_counter() - started)
        if transition.wait_s:
            rig.clock.sleep(transition.wait_s)
        passes += 1
    print(f"in-process: {passes} passes, stop={state.stop_reason}")
    print(f"  controller.advance   median {statistics.median(advance_s) * 1e6:8.1f} µs   "
          f"p95 {sorted(advance_s)[int(len(advance_s) * .95)] * 1e6:8.1f} µs")
    print(f"  checkpoint JSON trip median {statistics.median(checkpoint_s) * 1e6:8.1f} µs")


def end_to_end(steps: int) -> None:
    env = {**os.environ}
    var_dir = tempfile.mkdtemp(prefix="agentops-bench-")
    env.setdefault("AGENTOPS_VAR_DIR", var_dir)
    os.environ.update(env)
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentops.settings"
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.db import connection, transaction

    from agentops.models import WorkerHeartbeat
    from capabilities.models import CapabilityVersion, Ticket
    from runs import services
    from runs.models import Attempt, Run

    user, _ = User.objects.get_or_create(username="bench", defaults={"is_superuser": True})
    CapabilityVersion.objects.filter(capability__name="get_ticket_status").update(
        polling_interval_s=0.001, polling_max_attempts=steps * 2)
    ticket = Ticket.objects.create(idempotency_key=f"bench-{time.time_ns()}", title="bench")

    # A bare insert-and-commit on the same database, for scale.
    bare = []
    for _ in range(50):
        started = time.perf_counter()
        with transaction.atomic():
            WorkerHeartbeat.objects.create(worker=f"bench-{time.time_ns()}", seen_at="2026-01-01T00:00:00Z")
        bare.append(time.perf_counter() - started)
    WorkerHeartbeat.objects.filter(worker__startswith="bench-").delete()

    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "threads",
                               "-c", "2", "-l", "WARNING", "--without-mingle", "--without-gossip"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run = services.run_start(
            owner=user, goal="bench", planner="scripted",
            planner_config={"plans": [[{"capability": "get_ticket_status", "arguments": {"ticket_id": ticket.pk}}]]},
            completion={"capability": "get_ticket_status", "path": "status", "equals": "resolved"},
            budgets={"deadline_s": 3600, "max_iterations": steps * 3, "max_tool_calls": steps * 3,
                     "max_calls_per_capability": {"get_ticket_status": steps * 3}})
        deadline = time.monotonic() + 600
        while Run.objects.get(pk=run.pk).tool_calls < steps and time.monotonic() < deadline:
            time.sleep(0.2)
        Ticket.objects.filter(pk=ticket.pk).update(status="resolved")
        while not Run.objects.get(pk=run.pk).is_finished and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    run = Run.objects.get(pk=run.pk)
    ends = list(Attempt.objects.filter(run=run).order_by("started_at").values_list("ended_at", flat=True))
    gaps = [(b - a).total_seconds() for a, b in zip(ends, ends[1:])]
    poll_interval = 0.001
    step_s = statistics.median(gaps) - poll_interval
    bare_s = statistics.median(bare)
    print(f"end to end ({connection.vendor}, broker {env.get('CELERY_BROKER_URL') or 'embedded'}): "
          f"{len(ends)} steps, run {run.status}/{run.stop_reason}")
    print(f"  step latency median {step_s * 1000:7.2f} ms   bare insert+commit median {bare_s * 1000:6.2f} ms   "
          f"ratio {step_s / bare_s:5.1f}x")
    print(f"  write transactions per step: {_transactions_per_step(run.pk)}")


def _transactions_per_step(run_id: int) -> str:
    """Re-advance a fresh copy of the same kind of run in-process, counting write transactions per pass."""
    from django.db import connection

    from runs import engine
    from runs.models import Run

    source = Run.objects.get(pk=run_id)
    from runs import services

    run = services.run_start(owner=source.owner, goal="count transactions", planner="scripted",
                             planner_config=source.planner_config, completion={"capability": "get_ticket_status",
                                                                               "path": "status", "equals": "never"},
                             budgets={"deadline_s": 600, "max_iterations": 21, "max_tool_calls": 20,
                                      "max_calls_per_capability": {"get_ticket_status": 20}})
    counts = {"writes": 0, "atomic": 0}

    def count(execute, sql, params, many, context):
        verb = sql.lstrip().split(" ", 1)[0].upper()
        if verb in ("INSERT", "UPDATE", "DELETE") and not connection.in_atomic_block:
            counts["writes"] += 1  # an autocommit write is its own transaction
        return execute(sql, params, many, context)

    original_commit = connection.commit

    def counting_commit():
        counts["atomic"] += 1
        return original_commit()

    connection.commit = counting_commit
    with connection.execute_wrapper(count):
        engine.run_advance(run_id=run.pk, worker="bench-count", slice_seconds=60)
    connection.commit = original_commit
    run.refresh_from_db()
    passes = run.iterations
    total = counts["writes"] + counts["atomic"]
    return f"{total} over {passes} passes = {total / passes:.2f} (claim + release once per task, one per pass)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--in-process-only", action="store_true")
    args = parser.parse_args()
    in_process(args.steps)
    if not args.in_process_only:
        end_to_end(args.steps)


if __name__ == "__main__":
    main()

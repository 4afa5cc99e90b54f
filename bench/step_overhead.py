#!/usr/bin/env python
"""How much does the runtime add per step?

1. In-process: the real Controller on a simulated capability and clock, so the
   figure is the controller's own overhead per pass (plus the checkpoint's JSON
   round trip that every persisted pass pays).
2. End to end: a real Celery worker and database advance a polling run; the
   per-step latency (one capability call recorded with its decision) is printed
   beside a self-enqueueing Celery task writing one row per step and a bare
   insert-and-commit, all on the same database and broker, as ratios; then the SQL
   statements per pass (the common case: a read), once per slice, and what a
   side-effecting pass adds for its write-ahead intent.

    .venv/bin/python bench/step_overhead.py [--steps 300]
    DATABASE_URL=postgres://... CELERY_BROKER_URL=redis://... .venv/bin/python bench/step_overhead.py

Targets: at most 4 statements per pass; per step at most 5x a bare commit and 2x
the self-enqueueing task.
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
from collections import Counter
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import benchenv  # noqa: E402  (bench/ is on sys.path: these run as scripts)

benchenv.prepare()


def in_process(steps: int) -> None:
    from runtime.sim.scenario import prepare_scenario
    from runtime.state import RunState

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


def end_to_end(steps: int, capability: str = "get_ticket_status", dbos_python: str = "") -> None:
    env = {**os.environ}
    var_dir = tempfile.mkdtemp(prefix="agentops-bench-")
    env.setdefault("AGENTOPS_VAR_DIR", var_dir)
    os.environ.update(env)
    benchenv.start_django(ROOT)
    from django.contrib.auth.models import User
    from django.db import connection, transaction
    from django.utils import timezone

    from capabilities.models import Capability, CapabilityVersion, Ticket
    from core.models import WorkerHeartbeat
    from runs import services
    from runs.models import Attempt, Run

    user, _ = User.objects.get_or_create(username="bench", defaults={"is_superuser": True})
    CapabilityVersion.objects.filter(capability__name__in=["get_ticket_status", capability]).update(
        polling_interval_s=0.001, polling_max_attempts=steps * 2)
    ticket = Ticket.objects.create(idempotency_key=f"bench-{time.time_ns()}", title="bench")
    # get_ticket_status reads the database (its own connection, per call, from the executor's
    # thread); get_document is pure, so its figure is the runtime's own cost.
    step = ({"capability": capability, "arguments": {"ticket_id": ticket.pk}} if capability == "get_ticket_status"
            else {"capability": capability, "arguments": {"id": "POL-7"}})
    completion = ({"capability": capability, "path": "status", "equals": "resolved"}
                  if capability == "get_ticket_status" else {"capability": capability, "path": "id", "equals": "-"})

    # A bare insert-and-commit on the same database, for scale.
    bare = []
    for _ in range(50):
        started = time.perf_counter()
        with transaction.atomic():
            WorkerHeartbeat.objects.create(worker=f"bench-{time.time_ns()}", seen_at="2026-01-01T00:00:00Z")
        bare.append(time.perf_counter() - started)
    WorkerHeartbeat.objects.filter(worker__startswith="bench-").delete()

    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "threads",
                               "-c", "2", "-l", "WARNING", "--without-mingle", "--without-gossip",
                               "-I", "bench.selfenqueue"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run = services.run_start(
            owner=user, goal="bench", planner="scripted",
            planner_config={"plans": [[step]]}, completion=completion,
            budgets={"deadline_s": 3600, "max_iterations": steps * 3, "max_tool_calls": steps * 3,
                     "max_calls_per_capability": {capability: steps * 3}})
        deadline = time.monotonic() + 600
        while Run.objects.get(pk=run.pk).tool_calls < steps and time.monotonic() < deadline:
            time.sleep(0.2)
        Ticket.objects.filter(pk=ticket.pk).update(status="resolved")
        # End the polling; touching the capability is what a registry edit does (workers drop cached specs).
        CapabilityVersion.objects.filter(capability__name=capability).update(polling_max_attempts=1)
        Capability.objects.filter(name=capability).update(updated_at=timezone.now())
        while not Run.objects.get(pk=run.pk).is_finished and time.monotonic() < deadline:
            time.sleep(0.1)
        self_enqueue_s = _self_enqueue_step(steps)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    run = Run.objects.get(pk=run.pk)
    ends = list(Attempt.objects.filter(run=run).order_by("started_at").values_list("ended_at", flat=True))
    gaps = [(b - a).total_seconds() for a, b in pairwise(ends)]
    poll_interval = 0.001
    step_s = statistics.median(gaps) - poll_interval
    bare_s = statistics.median(bare)
    print(f"end to end ({connection.vendor}, broker {env.get('CELERY_BROKER_URL') or 'embedded'}, {capability}): "
          f"{len(ends)} steps, run {run.status}/{run.stop_reason}")
    print(f"  per step: AgentOps {step_s * 1000:7.2f} ms   self-enqueueing Celery task {self_enqueue_s * 1000:6.2f} ms"
          f"   bare insert+commit {bare_s * 1000:6.2f} ms")
    print(f"  ratios: {step_s / bare_s:5.1f}x a bare commit, {step_s / self_enqueue_s:4.2f}x the self-enqueueing task")
    if dbos_python and connection.vendor == "postgresql":
        dbos_s = _dbos_step(dbos_python, steps)
        print(f"  DBOS workflow step (one row per step, same database) {dbos_s * 1000:6.2f} ms: "
              f"AgentOps is {step_s / dbos_s:4.2f}x")
    figures = statements_per_pass(ticket.pk, user)
    verbs = ", ".join(f"{n:g} {v}" for v, n in sorted(figures["per_pass"].items()) if n)
    print(f"  statements per pass: {figures['total']:.2f} ({verbs}); once per slice (claim, load, plan, finish): "
          f"{figures['slice']:.0f}; a run with a side-effecting step adds {figures['side_effect_extra']} (its intent: "
          "1 UPDATE of the run in its own transaction, the attempt INSERTed before the call and UPDATEd after; "
          "plus that capability's spec, permission and version looked up once)")


def _dbos_step(python: str, steps: int) -> float:
    from django.db import connection

    db = connection.settings_dict
    url = f"postgresql://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    out = subprocess.run([python, str(ROOT / "bench" / "dbos_step.py"), url, str(steps)], capture_output=True,
                         text=True, timeout=600, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["step_s"]


def _self_enqueue_step(steps: int) -> float:
    """Median seconds per step of a task that writes one row and enqueues itself (same DB, same broker)."""
    from core.models import WorkerHeartbeat

    tag = f"selfenq-{time.time_ns()}"
    sys.path.insert(0, str(ROOT))
    from bench.selfenqueue import self_enqueue

    self_enqueue.delay(steps, tag)
    deadline = time.monotonic() + 300
    while WorkerHeartbeat.objects.filter(worker__startswith=tag).count() < steps and time.monotonic() < deadline:
        time.sleep(0.2)
    seen = list(WorkerHeartbeat.objects.filter(worker__startswith=tag).order_by("-worker")
                .values_list("seen_at", flat=True))
    WorkerHeartbeat.objects.filter(worker__startswith=tag).delete()
    gaps = [(b - a).total_seconds() for a, b in pairwise(seen)]
    return statistics.median(gaps)


def _statements(plan: list, passes: int, user, *, by_table: bool = False) -> Counter:
    """Every SQL statement of one run advanced in-process for `passes` passes, by verb.

    The capability's own queries (the demo ticket and outbox tables) are not the
    runtime's cost and are left out; so are BEGIN/COMMIT/SAVEPOINT.
    """
    from django.db import connection

    from capabilities import egress
    from runs import services
    from runs.worker import engine
    from runs.worker.adapters import SharedSpecs

    run = services.run_start(owner=user, goal="count statements", planner="scripted",
                             planner_config={"plans": [plan]},
                             completion={"capability": "get_ticket_status", "path": "status", "equals": "never"},
                             budgets={"deadline_s": 600, "max_iterations": passes, "max_tool_calls": passes + 5,
                                      "max_calls_per_capability": {"get_ticket_status": passes + 5}})
    counts: Counter = Counter()

    def count(execute, sql, params, many, context):
        words = sql.lstrip().split(None, 1)
        verb = words[0].upper() if words else ""
        # WITH: the common pass is one statement (the run UPDATE with the attempt and decision INSERTs).
        if verb in ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH") and not any(
                t in sql for t in ("capabilities_ticket", "capabilities_outboxmessage")):
            counts[verb] += 1
            if by_table:
                counts[f"{verb} {sql.split(chr(34))[1] if chr(34) in sql else '?'}"] += 1
        return execute(sql, params, many, context)

    # Both counted runs read the registry as a fresh worker process would (it is then shared by every
    # run at that registry version), so the once-per-slice reads cancel out of the per-pass figure.
    SharedSpecs.forget()
    egress.forget_registry_secret_names()
    with connection.execute_wrapper(count):
        engine.run_advance(run_id=run.pk, worker=f"bench-count-{passes}-{time.time_ns()}", slice_seconds=600)
    return counts


def statements_per_pass(ticket_id: int, user) -> dict:
    """Per pass, measured as the difference between a run of 31 and one of 11 passes
    (so the once-per-slice claim, load and release cancel out); and what a
    side-effecting pass adds (its write-ahead intent) over a read."""
    from capabilities.models import CapabilityVersion

    CapabilityVersion.objects.filter(capability__name="get_ticket_status").update(
        polling_interval_s=0.001, polling_max_attempts=1000)
    poll = {"capability": "get_ticket_status", "arguments": {"ticket_id": ticket_id}}
    short, long_ = _statements([poll], 11, user), _statements([poll], 31, user)
    per_pass = {verb: (long_[verb] - short[verb]) / 20 for verb in set(long_) | set(short)}
    # A side-effecting pass: send_notification first (approval switched off in this bench database).
    CapabilityVersion.objects.filter(capability__name="send_notification").update(requires_approval=False)
    notify = {"capability": "send_notification",
              "arguments": {"channel": "email", "recipient": "a@example.com", "message": "bench"}}
    with_write = _statements([notify, poll], 11, user)
    side_effect_extra = sum(with_write.values()) - sum(short.values())
    return {"per_pass": per_pass, "total": sum(per_pass.values()), "slice": sum(short.values()) - 11 * sum(
        per_pass.values()), "side_effect_extra": side_effect_extra}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--in-process-only", action="store_true")
    parser.add_argument("--dbos-python", default="",
                        help="an interpreter with dbos installed: also time a DBOS workflow step (PostgreSQL only)")
    parser.add_argument("--capability", default="get_ticket_status", choices=["get_ticket_status", "get_document"],
                        help="the polled capability: get_document is pure (the runtime's own cost)")
    args = parser.parse_args()
    in_process(args.steps)
    if not args.in_process_only:
        end_to_end(args.steps, args.capability, args.dbos_python)


if __name__ == "__main__":
    main()

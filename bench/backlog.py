#!/usr/bin/env python
"""A backlog: many runs queued at once, drained by real workers while the scheduler sweeps.

Starts --workers Celery worker processes of --concurrency threads and one beat (the orphan
sweep every lease / 2 s, as in production), queues --runs runs of --steps quick steps in one
transaction, samples the broker queue's length (LLEN on Redis) until every run has finished,
and prints: runs, tasks the orphan sweep sent again, the longest the queue grew, time to
drain, and how long the last run waited for its first call. A run waiting its turn is not an
orphan: the sweep re-sends only a task nobody claimed within the broker's visibility timeout.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench CELERY_BROKER_URL=redis://127.0.0.1:6379/9 \\
        .venv/bin/python bench/backlog.py                 # 2,000 runs, 3 workers x 8 threads
    .venv/bin/python bench/backlog.py --runs 300 --workers 1 --concurrency 4 --lease 4 --json   # the slow test

Targets (issue 26): re-sent tasks at most 1 % of the runs; the queue never longer than the runs
queued (plus the scheduler's own tasks, reported). It purges the broker's queue first: give it
a Redis database of its own. Exit status 1 if a run did not complete or a target is missed.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import benchenv  # noqa: E402  (bench/ is on sys.path: these run as scripts)

from runtime.stop import RunStatus  # noqa: E402

benchenv.prepare()
CAPABILITY = "search_documents"  # a bundled python capability: the call costs next to nothing


def start_processes(args, workdir: Path) -> dict[str, subprocess.Popen]:
    env = {**os.environ, "AGENTOPS_RUN_LEASE_SECONDS": str(args.lease), "PYTHONUNBUFFERED": "1"}
    celery = [sys.executable, "-m", "celery", "-A", "agentops"]
    commands = {f"worker{n}": celery + ["worker", "--pool", "threads", "--concurrency", str(args.concurrency),
                                        "--loglevel", "WARNING", "--without-mingle", "--without-gossip",
                                        "--hostname", f"backlog-{os.getpid()}-{n}@bench"]
                for n in range(args.workers)}
    # INFO: beat logs each task it sends, counted as the scheduler's share of the queue.
    commands["beat"] = celery + ["beat", "--loglevel", "INFO", "-s", str(workdir / "beat-schedule")]
    return {name: subprocess.Popen(command, cwd=ROOT, env=env, stdout=open(workdir / f"{name}.log", "w"),
                                   stderr=subprocess.STDOUT)
            for name, command in commands.items()}


def stop(procs: dict[str, subprocess.Popen]) -> None:
    for proc in procs.values():
        proc.terminate()
    for proc in procs.values():
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_ready(hostnames: list[str], timeout: float = 90) -> None:
    from agentops.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answered = {name for reply in app.control.ping(destination=hostnames, timeout=1.0) for name in reply}
        if answered >= set(hostnames):
            return
    raise SystemExit(f"workers did not all start: {hostnames}")


def start_runs(user, count: int, steps: int) -> tuple[list[int], float]:
    """The runs, and when their transaction committed (their tasks are sent from then on)."""
    from django.db import transaction

    from runs import services

    plan = [{"id": f"s{i}", "capability": CAPABILITY, "arguments": {"q": f"travel {i}"}} for i in range(steps)]
    budgets = {"deadline_s": 3600, "max_iterations": steps + 5, "max_tool_calls": steps + 5,
               "max_calls_per_capability": {CAPABILITY: steps + 5}, "max_plan_steps": steps + 1}
    # One transaction: every run's task is sent at the same instant, when it commits.
    committed: list[float] = []
    with transaction.atomic():
        transaction.on_commit(lambda: committed.append(time.time()))  # runs before the runs' sends
        runs = [services.run_start(owner=user, goal=f"bench backlog {i}", planner="scripted",
                                   planner_config={"plans": [plan]}, budgets=budgets,
                                   completion={"capability": CAPABILITY, "path": "documents.0.id", "exists": True})
                for i in range(count)]
    return [r.pk for r in runs], committed[0]


class QueueLength:
    """Samples the broker queue's length (Redis: LLEN of `celery`; embedded: its message files)."""

    def __init__(self, interval: float = 0.2):
        self.interval, self.samples, self._done = interval, [], threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def now(self) -> int:
        from agentops.celery import app

        with app.connection_for_read() as conn:
            # kombu's own count (LLEN over the queue's priority lists; files in the folder), also
            # for a queue no one has declared yet, where a passive declare raises NOT_FOUND.
            return conn.default_channel._size(app.conf.task_default_queue)

    def _sample(self) -> None:
        while not self._done.is_set():
            self.samples.append(self.now())
            self._done.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()


def purge() -> None:
    from agentops.celery import app

    with app.connection_for_write() as conn:
        app.control.purge(connection=conn)


def wait_finished(run_ids: list[int], timeout: float) -> None:
    from core.choices import FINISHED_STATUSES
    from runs.models import Run

    deadline = time.monotonic() + timeout
    while Run.objects.filter(pk__in=run_ids).exclude(status__in=list(FINISHED_STATUSES)).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"runs did not finish within {timeout:.0f} s")
        time.sleep(0.25)


def count_lines(paths, text: str) -> int:
    return sum(line.count(text) for path in paths for line in path.read_text(errors="replace").splitlines())


def measure(args, workdir: Path) -> dict:
    from django.contrib.auth.models import User
    from django.db.models import Max, Min

    from capabilities.kinds.python.sync import python_capabilities_sync
    from runs.models import Attempt, Run

    python_capabilities_sync()
    user, _ = User.objects.get_or_create(username="bench", defaults={"is_superuser": True, "is_staff": True})
    purge()
    procs = start_processes(args, workdir)
    try:
        wait_ready([f"backlog-{os.getpid()}-{n}@bench" for n in range(args.workers)])
        with QueueLength() as queue_length:
            began = time.time()
            run_ids, queued_at = start_runs(user, args.runs, args.steps)
            queued_s, sent_s = queued_at - began, time.time() - queued_at
            wait_finished(run_ids, args.timeout)
        logs = [workdir / f"{name}.log" for name in procs]
    finally:
        stop(procs)
    runs = Run.objects.filter(pk__in=run_ids)
    first_calls = Attempt.objects.filter(run_id__in=run_ids).values("run_id").annotate(first=Min("started_at"))
    last_first_call = max(row["first"] for row in first_calls).timestamp() if first_calls else queued_at
    return {
        "runs": args.runs, "steps": args.steps, "workers": args.workers, "concurrency": args.concurrency,
        "lease_s": args.lease, "runs_completed": runs.filter(status=RunStatus.COMPLETED).count(),
        # Each re-send logs one line (runs.worker.sweeps); a decided approval's wake-up would too (none here).
        "resent_tasks": count_lines(logs, "queued again"),
        "max_queue_length": max(queue_length.samples, default=0),
        "scheduler_tasks_sent": count_lines([workdir / "beat.log"], "Sending due task"),
        "starting_s": round(queued_s, 2), "sending_s": round(sent_s, 2),
        "drain_s": round(runs.aggregate(last=Max("finished_at"))["last"].timestamp() - queued_at, 2),
        "last_run_wait_s": round(last_first_call - queued_at, 2),
        "logs": str(workdir),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease", type=int, default=30, help="AGENTOPS_RUN_LEASE_SECONDS of the workers and beat")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", action="store_true", help="one JSON object on the last line")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="agentops-backlog-"))
    os.environ.setdefault("AGENTOPS_VAR_DIR", str(workdir / "var"))
    benchenv.start_django(ROOT)
    from django.conf import settings
    from django.db import connection

    figures = measure(args, workdir)
    figures["stack"] = f"{connection.vendor} + {settings.CELERY_BROKER_URL.split('://')[0]}"
    figures["failures"] = [failure for failure, missed in (
        ("runs not completed", figures["runs_completed"] != args.runs),
        ("re-sent tasks above 1 % of the runs", figures["resent_tasks"] > args.runs // 100),
        ("queue longer than the runs queued plus the scheduler's tasks",
         figures["max_queue_length"] > args.runs + figures["scheduler_tasks_sent"])) if missed]
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"{figures['runs']} runs of {args.steps} steps queued at once on {figures['stack']} through "
              f"{args.workers} workers x {args.concurrency} threads (lease {args.lease} s)\n"
              f"  completed           {figures['runs_completed']}\n"
              f"  re-sent tasks       {figures['resent_tasks']}\n"
              f"  max queue length    {figures['max_queue_length']} (runs queued {args.runs}, scheduler tasks "
              f"sent meanwhile {figures['scheduler_tasks_sent']})\n"
              f"  time to drain       {figures['drain_s']} s from the commit (the start transaction took "
              f"{figures['starting_s']} s, sending the tasks {figures['sending_s']} s)\n"
              f"  last run's wait     {figures['last_run_wait_s']} s from the commit to its first call\n"
              f"  failures            {', '.join(figures['failures']) or 'none'}")
    sys.exit(1 if figures["failures"] else 0)


if __name__ == "__main__":
    main()

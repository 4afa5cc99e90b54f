#!/usr/bin/env python
"""How fast are the operator pages with production-sized data?

Builds (once per folder) 100,000 runs, one run with 5,000 attempts and 1,000 pending
approvals in a scratch database, then times each page and counts its queries.

    .venv/bin/python bench/pages.py [--runs 100000] [--attempts 5000] [--approvals 1000]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/pages.py
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def build(runs: int, attempts: int, approvals: int) -> dict:
    from django.contrib.auth.models import User
    from django.db.models import F
    from django.utils import timezone

    from runs.models import Approval, Attempt, PlanRevision, Run, Step

    user, _ = User.objects.get_or_create(username="bench", defaults={"is_superuser": True, "is_staff": True})
    if Run.objects.count() >= runs:
        big = Run.objects.filter(goal="big run").first()
        return {"user": user, "big": big}
    now = timezone.now()
    reasons = ["completed", "stalled", "budget_exhausted:deadline", "terminal_failure:timeout", "approval_rejected"]
    batch = []
    for i in range(runs):
        reason = reasons[i % len(reasons)]
        status = "completed" if reason == "completed" else "stopped"
        created = now - timedelta(minutes=i % 43_200)
        batch.append(Run(goal=f"bench run {i}", completion={"capability": "search_documents", "exists": True},
                         budgets={"deadline_s": 600, "max_tool_calls": 100}, planner="rules", owner=user,
                         status=status, stop_reason=reason, stop_detail="bench", trace_id=f"{i:032x}",
                         tool_calls=i % 17, tokens=i % 5000, cost=(i % 100) / 100, created_at=created,
                         started_at=created, finished_at=created + timedelta(seconds=30)))
        if len(batch) == 5000:
            Run.objects.bulk_create(batch)
            batch = []
    Run.objects.bulk_create(batch)
    # created_at is auto_now_add, which bulk_create overrides: spread the runs over 30 days afterwards.
    Run.objects.filter(goal__startswith="bench run").update(created_at=F("started_at"))
    big = Run.objects.create(goal="big run", completion={"capability": "get_ticket_status", "exists": True},
                             budgets={"deadline_s": 86_400}, planner="rules", owner=user, status="stopped",
                             stop_reason="stalled", stop_detail="bench", trace_id="b" * 32, tool_calls=attempts)
    revision = PlanRevision.objects.create(run=big, number=1, accepted=True, reason_code="initial",
                                           steps=[{"id": "s1", "capability": "get_ticket_status",
                                                   "arguments": {"ticket_id": 1}}])
    step = Step.objects.create(run=big, revision=revision, index=0, key="s1", capability_name="get_ticket_status",
                               arguments={"ticket_id": 1}, arguments_hash="h")
    Attempt.objects.bulk_create([
        Attempt(run=big, step=step, uid=f"{n:032x}", number=n + 1, kind="poll" if n else "call",
                capability_name="get_ticket_status", signature='get_ticket_status|{"ticket_id":1}',
                signature_hash="s" * 64, started_at=now + timedelta(seconds=n), ended_at=now + timedelta(seconds=n),
                latency_s=0.01 + (n % 50) / 1000, status="ok", output={"status": "open"}, trace_id="b" * 32,
                span_id=f"{n:016x}") for n in range(attempts)], batch_size=2000)
    pending = Run.objects.filter(goal__startswith="bench run").order_by("pk")[:approvals]
    for run in pending:
        Run.objects.filter(pk=run.pk).update(status="awaiting_approval", stop_reason="", stop_detail="",
                                             finished_at=None)
    waiting = list(Run.objects.filter(status="awaiting_approval").order_by("pk")[:approvals])
    revisions = PlanRevision.objects.bulk_create([
        PlanRevision(run=run, number=1, accepted=True, reason_code="initial",
                     steps=[{"id": "s1", "capability": "create_ticket", "arguments": {"title": "t"}}])
        for run in waiting])
    steps = Step.objects.bulk_create([
        Step(run=rev.run, revision=rev, index=0, key="s1", capability_name="create_ticket",
             arguments={"title": f"ticket {rev.run_id}"}, arguments_hash="a", approval_state="pending")
        for rev in revisions])
    Approval.objects.bulk_create([
        Approval(run=s.run, kind="step", revision=s.revision, step=s, capability_name="create_ticket",
                 arguments=s.arguments, arguments_hash="a", expires_at=now + timedelta(days=1)) for s in steps])
    return {"user": user, "big": big}


def time_pages(user, big) -> None:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    client.force_login(user)
    pages = [
        ("runs list", "/runs/"),
        ("runs list, filtered + sorted", "/runs/?status=stopped&stop_reason=stalled&sort=-tool_calls"),
        ("runs list, page 500", "/runs/?page=500"),
        ("trace of 5,000 attempts", f"/runs/{big.pk}/"),
        ("trace, attempts page 40", f"/runs/{big.pk}/?attempts_page=40"),
        ("trace JSON download", f"/runs/{big.pk}/trace.json"),
        ("approval inbox", "/runs/approvals/"),
        ("dashboard 24h", "/runs/dashboard/?window=24h"),
        ("dashboard 30d", "/runs/dashboard/?window=30d"),
        ("API runs", "/api/runs/"),
        ("API attempts of the big run", f"/api/runs/{big.pk}/attempts/"),
    ]
    print(f"{'page':34} {'median ms':>10} {'max ms':>8} {'queries':>8} {'bytes':>10}")
    for name, url in pages:
        timings = []
        for _ in range(3):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(url)
                body = b"".join(response.streaming_content) if response.streaming else response.content
                timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (url, response.status_code)
        print(f"{name:34} {statistics.median(timings):10.1f} {max(timings):8.1f} {len(queries):8d} {len(body):10d}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--attempts", type=int, default=5_000)
    parser.add_argument("--approvals", type=int, default=1_000)
    parser.add_argument("--var-dir", default=os.path.join(tempfile.gettempdir(), "agentops-bench-pages"))
    args = parser.parse_args()
    os.environ.setdefault("AGENTOPS_VAR_DIR", args.var_dir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentops.settings"
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True)
    import django

    django.setup()
    from django.db import connection

    started = time.perf_counter()
    data = build(args.runs, args.attempts, args.approvals)
    print(f"data on {connection.vendor}: {args.runs:,} runs, {args.attempts:,} attempts in one run, "
          f"{args.approvals:,} pending approvals (ready in {time.perf_counter() - started:.1f} s)")
    time_pages(data["user"], data["big"])


if __name__ == "__main__":
    main()

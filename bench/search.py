#!/usr/bin/env python
"""How fast is searching runs by label, goal text and capability at production size?

Builds (once per folder) 100,000 labelled runs (team x agent, 2 labels each) in a scratch
database, then times the runs list, the runs API and the dashboard with and without
search filters and counts their queries.

    .venv/bin/python bench/search.py [--runs 100000]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_search .venv/bin/python bench/search.py
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import benchenv  # noqa: E402  (bench/ is on sys.path: these run as scripts)

from runtime.budgets import BudgetName  # noqa: E402
from runtime.observation import ErrorCode  # noqa: E402
from runtime.stop import StopKind, StopReason, status_for_stop, stop_kind  # noqa: E402

benchenv.prepare()

TEAMS = ["payments", "search", "support", "billing", "growth", "platform", "risk", "ops", "legal", "data"]
AGENTS = ["triage", "refunds", "research", "summarizer", "router"]


def build(runs: int):
    from django.contrib.auth.models import User
    from django.db.models import F
    from django.utils import timezone

    from runs.models import Run, RunLabel

    user, _ = User.objects.get_or_create(username="bench", defaults={"is_superuser": True, "is_staff": True})
    if Run.objects.count() >= runs:
        return user
    now = timezone.now()
    reasons = [str(r) for r in (StopReason(StopKind.COMPLETED), StopReason(StopKind.STALLED),
                                StopReason(StopKind.BUDGET_EXHAUSTED, BudgetName.DEADLINE),
                                StopReason(StopKind.TERMINAL_FAILURE, ErrorCode.TIMEOUT))]
    for start in range(0, runs, 5000):
        batch = []
        for i in range(start, min(runs, start + 5000)):
            reason = reasons[i % len(reasons)]
            created = now - timedelta(minutes=i % 43_200)
            batch.append(Run(goal=f"bench run {i} about {'refund' if i % 50 == 0 else 'policy'} {i % 997}",
                             completion={"capability": "search_documents", "exists": True},
                             budgets={"deadline_s": 600}, planner="rules", owner=user,
                             status=status_for_stop(stop_kind(reason)).value, stop_reason=reason,
                             stop_detail="bench", trace_id=f"{i:032x}", created_at=created, started_at=created,
                             finished_at=created + timedelta(seconds=30),
                             labels={"team": TEAMS[i % len(TEAMS)], "agent": AGENTS[i % len(AGENTS)]}))
        made = Run.objects.bulk_create(batch)
        RunLabel.objects.bulk_create([RunLabel(run=r, key=k, value=v) for r in made for k, v in r.labels.items()])
    Run.objects.update(created_at=F("started_at"))
    return user


def time_pages(user) -> None:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    client.force_login(user)
    pages = [
        ("runs list", "/runs/"),
        ("runs list, one label (10 %)", "/runs/?labels=team%3Dpayments"),
        ("runs list, two labels (2 %)", "/runs/?labels=team%3Dpayments%2C+agent%3Dtriage"),
        ("runs list, label key only", "/runs/?labels=agent"),
        ("runs list, goal text", "/runs/?goal=refund"),
        ("runs list, label + goal + stop", "/runs/?labels=team%3Dpayments&goal=refund&stop_reason=stalled"),
        ("runs list, label, page 50", "/runs/?labels=team%3Dpayments&page=50"),
        ("API runs, two labels", "/api/runs/?label=team%3Dpayments&label=agent%3Dtriage"),
        ("dashboard 30d", "/runs/dashboard/?window=30d"),
        ("dashboard 30d, one label", "/runs/dashboard/?window=30d&label=team%3Dpayments"),
    ]
    print(f"{'page':36} {'median ms':>10} {'max ms':>8} {'queries':>8}")
    for name, url in pages:
        timings = []
        for _ in range(3):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(url)
                timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (url, response.status_code)
        print(f"{name:36} {statistics.median(timings):10.1f} {max(timings):8.1f} {len(queries):8d}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--var-dir", default=os.path.join(tempfile.gettempdir(), "agentops-bench-search"))
    args = parser.parse_args()
    os.environ.setdefault("AGENTOPS_VAR_DIR", args.var_dir)
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    benchenv.start_django(ROOT)
    from django.db import connection

    started = time.perf_counter()
    user = build(args.runs)
    print(f"data on {connection.vendor}: {args.runs:,} labelled runs (ready in {time.perf_counter() - started:.1f} s)")
    time_pages(user)


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""How fast are a review queue's "next item" and its results table, with a big queue among many runs?

Builds (once per database) --runs finished runs of which --queue stopped `stalled`, makes a queue of
those (timing its INSERT ... SELECT), has two reviewers (four-eyes off) work --reviews items through the
service (next, then done: timed apart), then marks most of the queue done in bulk (the late-queue case,
where "next" must skip what is taken) and times next again. Then the pages and API calls, in process
(server time, no network): the results table (first page, a middle page, done items only), the items
API, the work page, and the whole CSV export. Target (issue 31): next item and the results table under
100 ms each.

    .venv/bin/python bench/review_queue.py --runs 100000 --queue 10000          # SQLite, a scratch folder
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_queue CELERY_BROKER_URL=redis://127.0.0.1:6379/9 \\
        .venv/bin/python bench/review_queue.py --runs 1000000 --queue 10000
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

from runtime.stop import StopKind, StopReason, status_for_stop, stop_kind  # noqa: E402

benchenv.prepare()
BATCH = 10_000
TARGET_MS = 100.0


def build(runs: int, queued: int):
    """`runs` finished runs, every (runs / queued)-th of them stalled (the queue's), the rest completed."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from runs.models import Run

    owner, _ = User.objects.get_or_create(username="bench", defaults={"is_superuser": True, "is_staff": True})
    have = Run.objects.count()
    if have >= runs:
        return owner
    stalled, completed = str(StopReason(StopKind.STALLED)), str(StopReason(StopKind.COMPLETED))
    every = max(1, runs // queued)
    now = timezone.now()
    for start in range(have, runs, BATCH):
        batch = []
        for i in range(start, min(runs, start + BATCH)):
            reason = stalled if i % every == 0 and i // every < queued else completed
            created = now - timedelta(seconds=runs - i)
            batch.append(Run(goal=f"bench run {i}", completion={"capability": "search_documents", "exists": True},
                             budgets={"deadline_s": 600}, planner="rules", owner=owner,
                             status=status_for_stop(stop_kind(reason)).value, stop_reason=reason, stop_detail="bench",
                             trace_id=f"{i:032x}", created_at=created, started_at=created,
                             finished_at=created + timedelta(seconds=30)))
        Run.objects.bulk_create(batch)
        if (start // BATCH) % 10 == 0:
            print(f"  {start + len(batch):,} runs", flush=True)
    return owner


def _ms(fn, repeat: int = 1):
    timings, value = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        value = fn()
        timings.append((time.perf_counter() - started) * 1000)
    return timings, value


def _row(name: str, timings: list[float], queries: int | None = None, target: bool = False) -> None:
    timings = sorted(timings)
    p95 = timings[min(len(timings) - 1, int(len(timings) * 0.95))]
    mark = ("ok" if statistics.median(timings) < TARGET_MS else "OVER") if target else ""
    print(f"{name:44} {statistics.median(timings):9.1f} {p95:8.1f} {timings[-1]:8.1f} "
          f"{'' if queries is None else queries:>8} {mark:>5}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000, help="finished runs in the database")
    parser.add_argument("--queue", type=int, default=10_000, help="runs the queue's filter matches")
    parser.add_argument("--reviews", type=int, default=200, help="items reviewed through the service")
    parser.add_argument("--var-dir", default=os.path.join(tempfile.gettempdir(), "agentops-bench-review-queue"))
    args = parser.parse_args()
    if args.queue > args.runs:
        parser.error("--queue must not be more than --runs")
    os.environ.setdefault("AGENTOPS_VAR_DIR", args.var_dir)
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    benchenv.start_django(ROOT)

    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from core.project_access import grant_role
    from review import queues
    from review.models import QueueItem, ReviewQueue, ScoreConfig

    started = time.perf_counter()
    owner = build(args.runs, args.queue)
    from runs.models import Run

    print(f"data on {connection.vendor}: {Run.objects.count():,} finished runs "
          f"(ready in {time.perf_counter() - started:.1f} s)")
    if connection.vendor == "postgresql":   # fresh statistics, as autovacuum keeps them in production
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    grant_role(owner, "lead operator")
    reviewers = []
    for name in ("bench-rene", "bench-rosa"):
        user, _ = User.objects.get_or_create(username=name)
        grant_role(user, "reviewer")
        reviewers.append(User.objects.get(pk=user.pk))
    ScoreConfig.objects.get_or_create(name="verdict", defaults={"kind": "categorical",
                                                                "categories": ["good", "bad", "unclear"]})
    ScoreConfig.objects.get_or_create(name="helpful", defaults={"kind": "numeric", "min_value": 1, "max_value": 5})
    ReviewQueue.objects.filter(name="bench").delete()

    print(f"\n{'what':44} {'median ms':>9} {'p95':>8} {'max':>8} {'queries':>8} {'<100':>5}")
    timings, (queue, queued) = _ms(lambda: queues.queue_save(
        user=User.objects.get(pk=owner.pk), name="bench", filter_query="stop_reason=stalled",
        score_configs=["verdict", "helpful"]))
    assert queued == args.queue, (queued, args.queue)
    _row(f"create the queue ({queued:,} runs queued)", timings)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE review_queueitem")

    next_ms, done_ms = [], []
    for n in range(args.reviews):
        user = reviewers[n % 2]
        with CaptureQueriesContext(connection) as next_queries:
            t, item = _ms(lambda user=user: queues.queue_next(user=user, queue=queue))
        next_ms += t
        scores = {"verdict": ["good", "bad"][n % 2], "helpful": 1 + n % 5}
        comment = "looked" if n % 10 == 0 else ""
        t, _ = _ms(lambda user=user, item=item, scores=scores, comment=comment: queues.item_done(
            user=user, queue=queue, item_id=item.pk, scores=scores, comment=comment))
        done_ms += t
    _row("next item (service), early in the queue", next_ms, len(next_queries), target=True)
    _row("done: 2 scores + claim (service)", done_ms)

    # Late in the queue: all but the last 1 % done or held, so "next" passes over what is taken.
    left = max(10, args.queue // 100)
    keep = list(QueueItem.objects.filter(queue=queue, taken=0).order_by("-id").values_list("pk", flat=True)[:left])
    QueueItem.objects.filter(queue=queue, taken=0).exclude(pk__in=keep).update(
        taken=1, done_count=1, done_at=timezone.now())
    late = []
    for n in range(min(left, 50)):
        user = reviewers[n % 2]
        t, item = _ms(lambda user=user: queues.queue_next(user=user, queue=queue))
        late += t
        queues.item_skip(user=user, queue=queue, item_id=item.pk)
    _row(f"next item (service), {left} items left", late, target=True)

    client = Client()
    client.force_login(reviewers[0])
    api = Client()
    api.force_login(reviewers[0])
    middle = max(1, args.queue // 50 // 2)
    pages = [
        ("results table, page 1", f"/review/queues/{queue.pk}/", True),
        (f"results table, page {middle}", f"/review/queues/{queue.pk}/?page={middle}", True),
        ("results table, done only", f"/review/queues/{queue.pk}/?state=done", True),
        ("results table, open only", f"/review/queues/{queue.pk}/?state=open", True),
        ("API items, page 1 (50)", f"/api/review/queues/{queue.pk}/items/", True),
        ("API queue + progress", f"/api/review/queues/{queue.pk}/", False),
        ("work page (held item)", f"/review/queues/{queue.pk}/work/", False),
        ("queues list", "/review/queues/", False),
    ]
    queues.queue_next(user=reviewers[0], queue=queue)
    for name, url, target in pages:
        timings = []
        for _ in range(5):
            with CaptureQueriesContext(connection) as queries:
                t, response = _ms(lambda url=url: client.get(url))
            assert response.status_code == 200, (url, response.status_code)
            timings += t
        _row(name, timings, len(queries), target=target)
    with CaptureQueriesContext(connection) as queries:
        timings = []
        for _ in range(5):
            t, response = _ms(lambda: api.post(f"/api/review/queues/{queue.pk}/next/"))
            timings += t
    _row("API next item (held: the same back)", timings, len(queries) // 5, target=True)

    def export():
        response = api.get(f"/api/review/queues/{queue.pk}/export/?file=csv")
        return sum(len(chunk) for chunk in response.streaming_content)

    timings, size = _ms(export)
    _row(f"CSV export, whole queue ({size / 1e6:.1f} MB)", timings)


if __name__ == "__main__":
    main()

"""The baseline task for bench/step_overhead.py: one row per step, each step enqueues the next.

It is what a hand-rolled durable loop on the same database and broker costs: one
INSERT + commit and one broker round trip per step. The worker imports it with
`-I bench.selfenqueue`.
"""
from celery import shared_task


@shared_task(name="bench.self_enqueue", ignore_result=True)
def self_enqueue(remaining: int, tag: str) -> None:
    from django.db import transaction
    from django.utils import timezone

    from core.models import WorkerHeartbeat

    with transaction.atomic():
        WorkerHeartbeat.objects.create(worker=f"{tag}-{remaining:06d}", seen_at=timezone.now())
    if remaining > 1:
        self_enqueue.delay(remaining - 1, tag)

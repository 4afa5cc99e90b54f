"""Bulk actions on real Celery workers: a job of 30 re-runs completes; a worker SIGKILLed in the middle
of a job is replaced, the sweep re-sends the job, and every run is acted on exactly once (counted by
forks per source, a fork being the action that is not idempotent).

Runs on whichever stack the environment selects (SQLite + embedded broker, or DATABASE_URL /
CELERY_BROKER_URL for PostgreSQL + Redis).
"""
from __future__ import annotations

import os
import signal
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from core.models import AuditEvent
from runs import bulk
from runs.models import BulkAction, Run
from tests.conftest import running_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCRIPT = {"plans": [[{"id": "s1", "capability": "search_documents", "arguments": {"query": "travel"}}]]}


def _sources(make_run, owner, n):
    return [make_run(owner=owner, status="stopped", planner_config=SCRIPT, goal=f"bulk source {i}") for i in range(n)]


def _forks_per_source(sources) -> Counter:
    return Counter(Run.objects.filter(forked_from__in=sources).values_list("forked_from", flat=True))


def _finished(job_id):
    job = BulkAction.objects.get(pk=job_id)
    return job if job.is_finished else None


def test_a_job_of_30_reruns_completes_on_the_worker(celery_worker, make_run, operator, wait_until):
    sources = _sources(make_run, operator, 30)
    job = bulk.bulk_start(user=operator, action="fork", query="goal=bulk source&status=stopped")
    job = wait_until(lambda: _finished(job.pk), timeout=90, message="the bulk job to finish")
    assert (job.total, job.done, job.skipped, job.failed) == (30, 30, 0, 0), job.problems
    assert _forks_per_source(sources) == {run.pk: 1 for run in sources}
    assert AuditEvent.objects.filter(action="run.forked").count() == 30


def test_a_worker_killed_mid_job_is_resumed_by_the_sweep_and_acts_on_each_run_once(own_task_queue, make_run,
                                                                                     operator, wait_until):
    sources = _sources(make_run, operator, 80)
    with running_worker(own_task_queue.env, hostname="bulk-first", concurrency=1) as first:
        job = bulk.bulk_start(user=operator, action="fork", query="goal=bulk source&status=stopped")
        wait_until(lambda: BulkAction.objects.get(pk=job.pk).done >= 5, timeout=60, message="the job to start")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
    job.refresh_from_db()
    assert job.handled < job.total, "the job finished before the worker was killed: kill it sooner"
    killed_at = job.handled
    assert _forks_per_source(sources) == {run.pk: 1 for run in sources if run.pk <= job.cursor}

    # The scheduler's sweep, once the job has shown no progress for long enough, sends it again.
    later = timezone.now() + timedelta(seconds=bulk.stall_after_s() + 1)
    with running_worker(own_task_queue.env, hostname="bulk-second", concurrency=2):
        assert bulk.requeue_stalled_bulk_actions(now=later) == 1
        job = wait_until(lambda: _finished(job.pk), timeout=120, message="the resumed job to finish")
    assert (job.total, job.done, job.skipped, job.failed) == (80, 80, 0, 0), (killed_at, job.problems)
    assert _forks_per_source(sources) == {run.pk: 1 for run in sources}
    assert AuditEvent.objects.filter(action="run.forked").count() == 80

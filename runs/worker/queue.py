"""Queueing a run's next pass, by task name: services and the engine never import runs.tasks.

Every send is recorded on the run (task_sent_at, the time the task becomes due), so the
orphan sweep can tell a run waiting its turn in the broker from one whose task was lost.
"""
from __future__ import annotations

import logging
from datetime import timedelta

from celery import current_app
from django.db.models import Q
from django.utils import timezone

from core import queue
from runs.models import Run
from runs.worker.leases import INFRASTRUCTURE_ERRORS

log = logging.getLogger(__name__)

ADVANCE_RUN = "runs.advance_run"
# kombu's Redis default, for a broker configured without one.
DEFAULT_VISIBILITY_TIMEOUT_S = 3600.0


def advance_later(run_id: int, countdown: float | None = None) -> None:
    _record_send(run_id, due=timezone.now() + timedelta(seconds=countdown or 0))
    queue.send(ADVANCE_RUN, (run_id,), countdown=countdown)


def _record_send(run_id: int, due) -> None:
    """Written before the send: after it, the write waited on the row lock of the worker that had
    already taken the task (sending 2,000 starts took twice as long). A send the broker then
    refuses is found by the sweep as a lost task is, a visibility timeout later."""
    try:
        # Never moved back: a later-due task sent by someone else meanwhile still counts.
        Run.objects.filter(Q(task_sent_at__isnull=True) | Q(task_sent_at__lt=due), pk=run_id).update(task_sent_at=due)
    except INFRASTRUCTURE_ERRORS:  # the database is down: the task is still worth sending
        log.warning("run %s: could not record its task's send; the sweep may send it again early", run_id)


def visibility_timeout_s() -> float:
    """How long a sent task may go unclaimed before it counts as lost.

    Redis redelivers a task its worker took and never acknowledged after this; a task waiting
    in the queue is never redelivered, and is claimed well within it unless the backlog takes
    longer than this to drain. The embedded broker never redelivers: settings give it one too.
    """
    options = current_app.conf.broker_transport_options or {}
    return float(options.get("visibility_timeout", DEFAULT_VISIBILITY_TIMEOUT_S))

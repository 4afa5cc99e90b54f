"""Queueing a run's next pass, by task name: services and the engine never import runs.tasks."""
from __future__ import annotations

from core import queue

ADVANCE_RUN = "runs.advance_run"


def advance_later(run_id: int, countdown: float | None = None) -> None:
    queue.send(ADVANCE_RUN, (run_id,), countdown=countdown)

"""A thread's database session checked before it is used again, where no request does it.

Django checks a session at each request's start and end (close_old_connections). ORM code outside
requests checks it here, with the same check, or a database restart leaves it failing on its old
session for ever:
- a Celery task's start and end, and each round of the lease renewer;
- the event loop's pool threads (the gateway's and the planning long poll's ORM calls), which keep
  their session between calls: `pooled` checks it before each call;
- a worker that waited on a long capability or planner call, during which the database may have
  ended its idle session: it checks it before writing what the call returned, so the outcome is
  written on a new session instead of being lost with the old one (the next worker would find it
  unknown).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections

# A call (or a pass) that took longer than this left the worker thread's session idle meanwhile.
SESSION_CHECK_AFTER_S = 1.0


def check_session() -> None:
    """Check this thread's sessions as a request's are: one obsolete or broken is closed, and with
    CONN_HEALTH_CHECKS the next query pings first and opens a new one if the database ended it.
    Never inside a transaction (a caller's): checking there would end it."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


def pooled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn as a coroutine function run in the loop's pool (not thread-sensitive: callers do not queue
    on one thread), on a session checked first."""
    def call(*args, **kwargs):
        check_session()
        return fn(*args, **kwargs)
    return sync_to_async(call, thread_sensitive=False)

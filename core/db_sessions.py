"""Blocking ORM work from the event loop, in its shared thread pool, on a session checked first.

A pool thread keeps its own database connection between calls, and nothing there runs Django's
request signals, which drop a broken or too old session. So each call checks its thread's session
as a request's is checked (close_old_connections, then CONN_HEALTH_CHECKS on its first query): after
the database restarted, the thread's next call opens a new session instead of failing on the old one
for ever.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections


def pooled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn as a coroutine function run in the loop's pool (not thread-sensitive: callers do not queue
    on one thread), on a connection checked as a request's is."""
    def call(*args, **kwargs):
        close_old_connections()
        return fn(*args, **kwargs)
    return sync_to_async(call, thread_sensitive=False)

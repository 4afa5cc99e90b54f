"""Calls still running in this process after their caller stopped waiting.

A Python thread cannot be killed: a python capability that outlived its timeout goes on
and may still commit. Until it ends, a status lookup's "not committed" could be overtaken
by it (design.md "A lookup's 'not committed' is believed only once the call can no longer
land"), so the runtime asks `in_flight(key)` before it believes one, and the worker keeps
the run's lease until the call ends (`when_closed`), so no other process looks it up early.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class OpenCalls:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, int] = {}
        self._by_run: dict[int, int] = {}
        self._waiting: dict[int, list[Callable[[], None]]] = {}

    def opened(self, run_id: int | None, key: str | None) -> None:
        with self._lock:
            if key is not None:
                self._by_key[key] = self._by_key.get(key, 0) + 1
            if run_id is not None:
                self._by_run[run_id] = self._by_run.get(run_id, 0) + 1

    def closed(self, run_id: int | None, key: str | None) -> None:
        """The call's thread ended: wake whoever waits for the run's last open call."""
        with self._lock:
            if key is not None:
                _decrement(self._by_key, key)
            callbacks: list[Callable[[], None]] = []
            if run_id is not None and not _decrement(self._by_run, run_id):
                callbacks = self._waiting.pop(run_id, [])
        for callback in callbacks:
            try:
                callback()
            except Exception:   # the call's own thread: never let a wake-up kill it
                log.exception("waking run %s after its open call ended failed", run_id)

    def in_flight(self, key: str | None) -> bool:
        with self._lock:
            return key is not None and key in self._by_key

    def when_closed(self, run_id: int, callback: Callable[[], None]) -> bool:
        """Call `callback` once the run has no open call; False (and no call) if it has none now."""
        with self._lock:
            if run_id not in self._by_run:
                return False
            self._waiting.setdefault(run_id, []).append(callback)
            return True


def _decrement(counts: dict, key) -> int:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
    return max(0, left)


OPEN_CALLS = OpenCalls()

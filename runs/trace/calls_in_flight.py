"""A call that takes a while shows on the trace while it runs (capability, arguments, elapsed, timeout).

A read leaves no row before it returns (only side effects are written ahead), so a 20 s
read used to show "Pending · 0 attempts". A call still running after ANNOUNCE_AFTER_S is
written on its run (`Run.call_in_flight`) by a timer thread, and cleared when it returns:
fast calls, the common case, cost no write at all.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connections

from core.outages import outage_of
from runs.models import Run

log = logging.getLogger(__name__)

ANNOUNCE_AFTER_S = 1.0


class AnnouncedCalls:
    """Wraps a run's executor: a call running past ANNOUNCE_AFTER_S is shown on the run until it returns."""

    def __init__(self, inner, run_id: int, announce_after_s: float = ANNOUNCE_AFTER_S):
        self.inner = inner
        self.run_id = run_id
        self.announce_after_s = announce_after_s

    def __getattr__(self, name):  # lookup_status, in_flight: as the inner executor has them
        return getattr(self.inner, name)

    def execute(self, spec, arguments: dict, **kw):
        shown = {"call": {"capability": spec.name, "arguments": arguments, "attempt": kw.get("attempt"),
                          "timeout_s": kw.get("timeout_s"), "started_at": datetime.now(UTC).isoformat()}}
        timer = threading.Timer(self.announce_after_s, self._announce, args=(shown,))
        timer.daemon = True
        timer.start()
        try:
            return self.inner.execute(spec, arguments, **kw)
        finally:
            timer.cancel()
            timer.join()  # an announcement being written lands before it is cleared
            if shown.get("written"):
                self._show(None)

    def _announce(self, shown: dict) -> None:
        """In the timer's thread, on that thread's own database connection (closed after)."""
        try:
            shown["written"] = self._show(shown["call"])
        finally:
            connections.close_all()

    def _show(self, call: dict | None) -> bool:
        try:
            Run.objects.filter(pk=self.run_id).update(call_in_flight=call)
            return True
        except Exception as exc:  # showing the call is a courtesy: it never fails the call
            outage = outage_of(exc)
            if outage is None:
                log.exception("run %s: could not show the call in flight", self.run_id)
            else:   # nothing to debug: the call goes on, and the database is back or the pass says so
                log.warning("run %s: could not show the call in flight: %s", self.run_id, outage.summary)
            return False


@dataclass(frozen=True)
class CallShown:
    capability: str
    arguments: dict
    attempt: int | None
    timeout_s: float | None
    elapsed_s: float


def call_shown(run: Run, now: float | None = None) -> CallShown | None:
    """The call the trace shows as running: only while the run is live."""
    call = run.call_in_flight
    if not call or run.is_finished:
        return None
    started = datetime.fromisoformat(call["started_at"]).timestamp()
    return CallShown(call["capability"], call.get("arguments") or {}, call.get("attempt"), call.get("timeout_s"),
                     max(0.0, (now or time.time()) - started))

"""Holding a planning long poll (GET /api/runs/<id>/planning/?wait=N) until the run changes.

One wait for both servers: under ASGI the front (runs.api.planning_front) awaits it on the event
loop, where one watcher checks every run being waited on in one read per interval (a short hop on
the loop's shared thread pool); under WSGI the DRF view runs it in its own thread. Either way the
wait holds one of the user's long-poll slots (runs.long_polls).
"""
from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar

from core.errors import TooBusy
from runs.long_polls import long_poll_close, long_poll_open
from runs.planning_needs import PlanningMoment, planning_moment_of, planning_moments_of

log = logging.getLogger(__name__)
POLL_INTERVAL_S = 0.25
# The ASGI scope key the DRF view reads: present means the front has held the wait (and maybe refused it).
HELD_BY_FRONT = "agentops.planning_long_poll"


@dataclass
class FrontOutcome:
    """What the front decided, for the DRF view: refused holds the 429 to answer."""

    refused: TooBusy | None = None


async def hold_until_change(*, user_id: int, run_id: int, wait_s: int, db: Callable[..., Callable[..., Awaitable]],
                            gone: asyncio.Future | None = None) -> None:
    """Return when the run's planning moment changes, after `wait_s`, or when `gone` (the client left)
    is done. Takes one of the user's long-poll slots while waiting (TooBusy when none is left).
    db(fn) makes a sync database function awaitable (which thread it runs in is the caller's choice)."""
    first = await db(planning_moment_of)(run_id)
    if first is None or first.settled:
        return
    slot_id = await db(long_poll_open)(user_id=user_id, run_id=run_id, wait_s=wait_s)
    try:
        await RunWatch.of_this_loop(db).until_changed(run_id, first, wait_s, gone)
    finally:
        await db(long_poll_close)(slot_id=slot_id)


class RunWatch:
    """One watcher per event loop for all the long polls it holds: every POLL_INTERVAL_S, one batch read
    of the runs watched (planning_moments_of), and each poll whose run has changed is woken. So 40
    polls cost the database one read per interval, not 40."""

    _of_loop: ClassVar[weakref.WeakKeyDictionary] = weakref.WeakKeyDictionary()

    def __init__(self, db: Callable[..., Callable[..., Awaitable]]):
        self.db = db
        self.waiting: dict[int, list[tuple[PlanningMoment, asyncio.Future]]] = {}
        self.poller: asyncio.Task | None = None

    @classmethod
    def of_this_loop(cls, db) -> RunWatch:
        loop = asyncio.get_running_loop()
        watch = cls._of_loop.get(loop)
        if watch is None:
            watch = cls._of_loop[loop] = cls(db)
        return watch

    async def until_changed(self, run_id: int, first: PlanningMoment, timeout_s: float,
                            gone: asyncio.Future | None = None) -> None:
        woken = asyncio.get_running_loop().create_future()
        entry = (first, woken)
        self.waiting.setdefault(run_id, []).append(entry)
        if self.poller is None or self.poller.done():
            self.poller = asyncio.ensure_future(self._poll())
        try:
            await asyncio.wait({woken} if gone is None else {woken, gone}, timeout=timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            entries = self.waiting.get(run_id, [])
            entries.remove(entry)
            if not entries:
                self.waiting.pop(run_id, None)
            if not self.waiting and self.poller is not None:   # nobody left to watch for
                self.poller.cancel()
                self.poller = None

    async def _poll(self) -> None:
        while self.waiting:
            await asyncio.sleep(POLL_INTERVAL_S)
            run_ids = list(self.waiting)
            try:
                now = await self.db(planning_moments_of)(run_ids)
            except Exception:   # any failure: every poll answers now, through Django (503 while the database is down)
                log.warning("Long polls answered early: reading their runs failed.", exc_info=True)
                now = {}
            for run_id in run_ids:
                for first, woken in self.waiting.get(run_id, ()):
                    if not woken.done() and now.get(run_id) != first:
                        woken.set_result(None)

"""Holding a planning long poll (GET /api/runs/<id>/planning/?wait=N) until the run changes.

One wait for both servers: under ASGI the front (runs.api.planning_front) awaits it on the event
loop, with each check a short hop on the loop's shared thread pool; under WSGI the DRF view runs it
in its own thread. Either way the wait holds one of the user's long-poll slots (runs.long_polls).
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from core.errors import TooBusy
from runs.long_polls import long_poll_close, long_poll_open
from runs.planning_needs import planning_moment_of

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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while (left := deadline - loop.time()) > 0:
            if gone is None:
                await asyncio.sleep(min(POLL_INTERVAL_S, left))
            elif (await asyncio.wait({gone}, timeout=min(POLL_INTERVAL_S, left)))[0]:
                return
            if await db(planning_moment_of)(run_id) != first:
                return
    finally:
        await db(long_poll_close)(slot_id=slot_id)

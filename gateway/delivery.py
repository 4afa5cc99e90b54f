"""Whether a tools/call's answer reached its client, so a call whose client went away is owed, not lost.

A client may close its HTTP stream while its call is in flight. The call goes on (a worker
runs it), but its answer is written to a stream nobody reads (uvicorn drops it silently), and
the handler cannot tell from its return. So the endpoint watches the request itself
(gateway.asgi): a disconnect seen before the response completed marks it lost. The handler,
once the call concluded, says what to do if it is lost (hold the call: gateway.services.call_hold,
so the same call in that session picks up its outcome instead of running it again); whichever
of the two learns last acts. Both run on the web process's one event loop, and each checks the
other's flag and sets its own with no await in between, so at least one of them sees both.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

Action = Callable[[], Awaitable[None]]


class Delivery:
    """One HTTP request's fate as the endpoint sees it, and what its call asked for each outcome."""

    def __init__(self):
        self.lost = False        # the client disconnected before the response completed
        self.completed = False   # the response's last byte was handed to the server
        self.settled = False     # the request is over: an answer produced from now on cannot reach it
        self._on_lost: Action | None = None

    def wrap(self, receive, send):
        """The request's receive and send, watched."""

        async def watched_receive():
            message = await receive()
            if message["type"] == "http.disconnect" and not self.completed:
                self.lost = True
            return message

        async def watched_send(message):
            await send(message)
            # After a disconnect the server drops what is sent: that never counts as delivered.
            if message["type"] == "http.response.body" and not message.get("more_body", False) and not self.lost:
                self.completed = True

        return watched_receive, watched_send

    async def concluded(self, *, on_lost: Action) -> None:
        """The call concluded and its answer is about to be sent: act now if the client is already
        gone (or its request already over), else leave it to settle() once the request is over."""
        if self.lost or self.settled:
            await _shielded(on_lost)
            return
        self._on_lost = on_lost

    async def settle(self) -> None:
        """The request is over (the endpoint's handling returned): act on how it ended."""
        self.settled = True
        action, self._on_lost = self._on_lost, None
        if action is not None and (self.lost or not self.completed):
            await _shielded(action)


async def _shielded(action: Action) -> None:
    with anyio.CancelScope(shield=True):   # bookkeeping for a call that ran: never cut short
        await action()

"""A scheme an admin allowed by name (AGENTOPS_NOTIFY_EXTRA_SCHEMES): Apprise sends it itself.

Where the URL names the host, the guard checks that host first (as Apprise reads it); Apprise
then resolves it again through requests, so this path is not pinned (docs/integrations.md "Notifications").
"""
from __future__ import annotations

import logging
from typing import Any

from capabilities.netguard import NetGuard, URLRefused
from notifications.errors import ChannelError
from notifications.senders.base import Destination, Sender, refused
from notifications.targets import takes_host


class AppriseSender(Sender):
    def destination(self, plugin: Any) -> Destination | None:
        if not takes_host(plugin):
            return None
        default = 443 if plugin.secure else 80
        return Destination(plugin.host or "", plugin.port if isinstance(plugin.port, int) else default)

    def send(self, plugin: Any, *, title: str, body: str, guard: NetGuard) -> None:
        import apprise

        where = self.destination(plugin)
        if where is not None:
            try:
                guard.check_host(where.host, where.port, scheme=str(plugin.schema))
            except URLRefused as exc:
                raise refused(exc) from None
        with apprise.LogCapture(level=logging.WARNING) as logs:
            sent = plugin.notify(title=title, body=body)
        if not sent:
            said = " ".join(line.split(" - ", 2)[-1] for line in logs.getvalue().strip().splitlines()[-3:])
            raise ChannelError(said[:1000] or "the channel refused the notification")


APPRISE = AppriseSender()

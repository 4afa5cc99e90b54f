"""Reading a channel URL exactly as Apprise reads it: its own parser, not urllib.

Apprise takes the host after the *first* `@` (`json://a@INTERNAL@ALLOWED/x` posts to
INTERNAL); urllib reads the last. Every decision about where a notification goes is made
on the plugin Apprise builds from the URL, so the host we check is the host it names.
"""
from __future__ import annotations

from functools import cache
from typing import Any

from notifications.errors import ChannelError


def asset():
    import apprise

    # A redirect would take the POST to a host the egress guard never saw: never follow one.
    try:  # keep Apprise's persistent cache in memory: workers share no local disk
        return apprise.AppriseAsset(storage_mode="memory", http_redirects=False)
    except TypeError:
        return apprise.AppriseAsset(http_redirects=False)


def read(url: str) -> Any:
    """The Apprise plugin for `url` (nothing is sent), or a permanent ChannelError."""
    import apprise

    plugin = apprise.Apprise.instantiate(url, asset=asset())
    if plugin is None:
        raise ChannelError("Apprise does not understand this URL", permanent=True)
    plugin.redirects = False  # also when the URL itself asks for them (?redirect=yes)
    return plugin


def scheme(url: str) -> str:
    """The scheme Apprise picks the service by (a plugin's own `schema` may differ: kodi:// says http)."""
    return url.split("://", 1)[0].strip().lower()


def takes_host(plugin: Any) -> bool:
    return "host" in getattr(plugin, "template_tokens", {})


@cache
def host_taking_schemes() -> frozenset[str]:
    """The schemes whose URL names the host Apprise connects to (57 of 189 services in Apprise 2.3)."""
    from apprise.manager_plugins import NotificationManager

    manager = NotificationManager()
    return frozenset(s for s in manager.schemas() if "host" in getattr(manager[s], "template_tokens", {}))

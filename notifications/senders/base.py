"""One base for every sender: where it connects (as Apprise read the URL), then the send itself."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from capabilities.egress import guarded_client
from capabilities.netguard import NetGuard, URLRefused
from notifications import targets
from notifications.errors import ChannelError

TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Destination:
    host: str
    port: int


def refused(exc: URLRefused) -> ChannelError:
    return ChannelError(f"egress refused: {exc}", permanent=True)


class Sender(ABC):
    vendor_hosts: tuple[str, ...] = ()  # a fixed host the sender posts to, admitted besides the allowlist

    def read(self, url: str) -> Any:
        """The channel's settings from its URL: Apprise's own plugin, unless the scheme is our own."""
        return targets.read(url)

    @abstractmethod
    def destination(self, plugin: Any) -> Destination | None:
        """The host and port this channel connects to (None: a vendor Apprise reaches by itself)."""

    @abstractmethod
    def send(self, plugin: Any, *, title: str, body: str, guard: NetGuard) -> None:
        """Deliver one message, or raise ChannelError."""


class ApprovalSender(ABC):
    """A sender that can ask for a decision itself (Slack buttons, e-mailed links), not only link to the inbox."""

    @abstractmethod
    def send_approval(self, plugin: Any, *, approval: Any, title: str, body: str, guard: NetGuard) -> None:
        """Deliver the request for `approval` with its decision controls, or raise ChannelError."""


@dataclass(frozen=True)
class Outgoing:
    method: str
    url: str
    content: bytes
    headers: dict[str, str]
    params: dict[str, str] | None = None
    auth: tuple[str, str] | None = None


class HttpSender(Sender):
    """Posts through the egress guard's pinned httpx transport: the request goes to the address
    the guard checked, never to a second DNS answer; no redirects, no environment proxies."""

    @abstractmethod
    def url(self, plugin: Any) -> str:
        """Where the request goes, as the channel's URL says."""

    @abstractmethod
    def outgoing(self, plugin: Any, *, title: str, body: str) -> Outgoing:
        """The request to send."""

    def destination(self, plugin: Any) -> Destination:
        parts = urlsplit(self.url(plugin))
        try:
            port = parts.port
        except ValueError:   # Apprise keeps any number (:99999, :-1); urllib refuses it
            raise ChannelError("the channel's port must be from 1 to 65535", permanent=True) from None
        return Destination(parts.hostname or "", port or (443 if parts.scheme == "https" else 80))

    def send(self, plugin: Any, *, title: str, body: str, guard: NetGuard) -> None:
        out = self.outgoing(plugin, title=title, body=body)
        try:
            with guarded_client(guard, timeout=TIMEOUT_S) as client:
                response = client.request(out.method, out.url, content=out.content, headers=out.headers,
                                          params=out.params, auth=out.auth)
        except URLRefused as exc:
            raise refused(exc) from None
        except httpx.HTTPError as exc:
            raise ChannelError(f"connection failed ({type(exc).__name__})") from None
        if not 200 <= response.status_code < 300:
            # 4xx other than 408/429 will not get better by retrying; a redirect is never followed.
            permanent = 300 <= response.status_code < 500 and response.status_code not in (408, 429)
            raise ChannelError(f"HTTP {response.status_code} from {urlsplit(out.url).hostname}", permanent=permanent)


def same_host(url: str, apprise_host: str) -> str:
    """`url`, after making sure httpx will read the host Apprise read (else the guard would judge another)."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:   # urllib refuses what Apprise took for a host (a bracketed text that is no IPv6 address)
        host = None
    if host != (apprise_host or "").lower().strip("[]"):
        raise ChannelError(f"the channel's host {apprise_host!r} is ambiguous", permanent=True)
    return url

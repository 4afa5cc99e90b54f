"""The provider: its endpoints (discovered or configured) and every call to it, through the egress guard.

The guard admits the issuer's host, the hosts of endpoints configured explicitly, and the host
names the issuer's own discovery document gives (Google keeps its token and key endpoints on other
hosts than accounts.google.com), never an IP address only the document names. Each address is
still resolved, checked and pinned like any other egress: a name resolving to a private or
loopback address only with AGENTOPS_OIDC_ALLOW_PRIVATE (an address configured as such is named by
the operator, as on AGENTOPS_HTTP_ALLOWED_HOSTS), cloud credential ranges never."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings

from capabilities.egress import guarded_client
from capabilities.netguard import NetGuard, URLRefused, is_address

# How long a discovery document is kept before it is fetched again (providers rotate endpoints rarely).
DISCOVERY_TTL_S = 3600
ENDPOINTS = ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri", "end_session_endpoint")


class ProviderError(Exception):
    """The provider could not be reached or answered something unusable; the message is safe to show."""


@dataclass(frozen=True)
class Provider:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str = ""
    end_session_endpoint: str = ""
    configured: tuple[str, ...] = ()  # the endpoints the operator gave (the rest were discovered)

    def hosts(self) -> list[str]:
        """What the guard admits: every configured host; of the discovered ones, host names only."""
        named = {urlsplit(url).hostname or "" for url in (self.issuer, *self.configured)}
        discovered = {urlsplit(getattr(self, name)).hostname or "" for name in ENDPOINTS}
        return sorted((named | {host for host in discovered if not _is_address(host)}) - {""})


def _is_address(host: str) -> bool:
    return is_address(host)  # as the guard reads it: 2130706433 and 10.0.0.5%x are addresses too


def guard(hosts: list[str]) -> NetGuard:
    # credential_entries=False: an identity provider has no business in a cloud credential range.
    return NetGuard(hosts, allow_private=settings.AGENTOPS_OIDC_ALLOW_PRIVATE, credential_entries=False)


def client(hosts: list[str]) -> httpx.Client:
    return guarded_client(guard(hosts), timeout=settings.AGENTOPS_OIDC_TIMEOUT_S)


_cache: dict[str, tuple[float, Provider]] = {}
_lock = threading.Lock()


def forget() -> None:
    """Drop the cached discovery document (tests; a provider that moved)."""
    with _lock:
        _cache.clear()


def provider() -> Provider:
    """The configured provider, its discovery document fetched at most once an hour."""
    issuer = settings.AGENTOPS_OIDC_ISSUER
    explicit = {name: url for name, url in settings.AGENTOPS_OIDC_ENDPOINTS.items() if url}
    key = repr((issuer, sorted(explicit.items())))
    with _lock:
        cached = _cache.get(key)
        if cached is not None and time.monotonic() - cached[0] < DISCOVERY_TTL_S:
            return cached[1]
    found: dict[str, Any] = {}
    if not all(explicit.get(name) for name in ("authorization_endpoint", "token_endpoint", "jwks_uri")):
        found = _discover(issuer, explicit)
    endpoints = {name: str(explicit.get(name) or found.get(name) or "") for name in ENDPOINTS}
    missing = [name for name in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not endpoints[name]]
    if missing:
        raise ProviderError(f"The provider's discovery document names no {missing[0]}.")
    result = Provider(issuer=issuer, **endpoints, configured=tuple(explicit.values()))
    with _lock:
        _cache[key] = (time.monotonic(), result)
    return result


def _discover(issuer: str, explicit: dict[str, str]) -> dict[str, Any]:
    url = issuer + "/.well-known/openid-configuration"
    document = get_json(url, [urlsplit(issuer).hostname or ""])
    # OpenID Connect Discovery 1.0 §4.3: the document's issuer must be the one asked for, exactly.
    if str(document.get("issuer", "")).rstrip("/") != issuer:
        raise ProviderError("The provider's discovery document names another issuer than AGENTOPS_OIDC_ISSUER.")
    for name in ENDPOINTS:
        value = document.get(name)
        if value is not None and (not isinstance(value, str) or urlsplit(value).scheme not in ("http", "https")):
            raise ProviderError(f"The provider's discovery document has an unusable {name}.")
    return document


def get_json(url: str, hosts: list[str], **kw: Any) -> dict[str, Any]:
    return _json(_send("GET", url, hosts, **kw))


def post_json(url: str, hosts: list[str], **kw: Any) -> dict[str, Any]:
    return _json(_send("POST", url, hosts, **kw))


def _send(method: str, url: str, hosts: list[str], **kw: Any) -> httpx.Response:
    host = urlsplit(url).hostname or url
    try:
        with client(hosts) as http:
            return http.request(method, url, **kw)
    except URLRefused as exc:
        raise ProviderError(f"The egress guard refused the provider's address {exc.host}: {exc.reason}.") from None
    except httpx.HTTPError as exc:
        raise ProviderError(f"The provider at {host} could not be reached ({type(exc).__name__}).") from None


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code != 200 or not isinstance(body, dict):
        # Only the OAuth error code is shown: a body may echo what was sent.
        error = body.get("error") if isinstance(body, dict) else None
        code = f" ({str(error)[:60]})" if error else ""
        raise ProviderError(f"The provider answered HTTP {response.status_code}{code}.")
    return body

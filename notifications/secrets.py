"""`${AGENTOPS_NOTIFY_...}` secrets in channel URLs: filled in at send time, only where an admin bound them.

Only that prefix, so a channel can never carry another secret of the process (DATABASE_URL);
and each one only to the hosts (and channels) AGENTOPS_NOTIFY_SECRET_BINDINGS names, so an
operator who may add channels cannot send the SMTP password set for one to a host of theirs.
"""
from __future__ import annotations

import os
import re

from django.conf import settings

from notifications.errors import ChannelError

SECRET_PREFIX = "AGENTOPS_NOTIFY_"
PLACEHOLDER = re.compile(r"\$\{([A-Z0-9_]+)\}")
BINDINGS_SETTING = "AGENTOPS_NOTIFY_SECRET_BINDINGS"


def names(url: str) -> list[str]:
    return PLACEHOLDER.findall(url)


def expand(url: str, environ=None) -> str:
    environ = os.environ if environ is None else environ

    def value(match: re.Match) -> str:
        name = match.group(1)
        if not name.startswith(SECRET_PREFIX):
            raise ChannelError(f"${{{name}}}: only variables named {SECRET_PREFIX}* may be used", permanent=True)
        if name not in environ:
            raise ChannelError(f"${{{name}}} is not set in the environment")
        return environ[name]

    return PLACEHOLDER.sub(value, url)


def binding_problems(url: str, *, channel: str, host: str | None) -> list[str]:
    """Why these secrets may not go to `host` for `channel` (host None: not known yet, checked at send)."""
    problems = []
    for name in dict.fromkeys(names(url)):
        if not name.startswith(SECRET_PREFIX):
            problems.append(f"${{{name}}}: only variables named {SECRET_PREFIX}* may be used")
            continue
        binding = settings.AGENTOPS_NOTIFY_SECRET_BINDINGS.get(name)
        if binding is None:
            problems.append(f"${{{name}}} is bound to no host: an admin names its hosts in {BINDINGS_SETTING}")
        elif binding["channels"] and channel not in binding["channels"]:
            problems.append(f"${{{name}}} may not be used by the channel {channel!r} ({BINDINGS_SETTING})")
        elif host is not None and not host_matches(host, binding["hosts"]):
            problems.append(f"${{{name}}} may not be sent to {host!r} ({BINDINGS_SETTING})")
    return problems


def host_matches(host: str, patterns: list[str]) -> bool:
    """An exact name or address, or `*.example.com` for its subdomains (as the egress allowlist)."""
    host = host.lower().rstrip(".")
    return any(host == p or (p.startswith("*.") and host.endswith(p[1:])) for p in patterns)


def scrub(text: str, url: str) -> str:
    """Never store a secret's value in an error message."""
    for name in names(url):
        secret = os.environ.get(name, "")
        if secret:
            text = text.replace(secret, "***")
    return text

"""Sending one notification to one channel, through Apprise.

A channel is an Apprise URL. Secrets stay in the environment: the URL names them as
`${AGENTOPS_NOTIFY_...}` and they are filled in only at send time (only that prefix,
so a channel can never carry another secret of the process, such as DATABASE_URL, to
a webhook). Webhook-style URLs that reach a host of the operator's choosing go
through the project's egress guard first, like every outbound HTTP request.
"""
from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

from capabilities.egress import capability_guard
from capabilities.netguard import URLRefused, validate_url

SECRET_PREFIX = "AGENTOPS_NOTIFY_"
_PLACEHOLDER = re.compile(r"\$\{([A-Z0-9_]+)\}")
# Apprise schemes that POST to a host named in the URL: (http scheme, default port).
_HTTP_SCHEMES = {
    "json": "http", "jsons": "https", "form": "http", "forms": "https", "xml": "http", "xmls": "https",
    "ntfy": "http", "ntfys": "https", "gotify": "http", "gotifys": "https", "apprise": "http", "apprises": "https",
    "mmost": "http", "mmosts": "https", "rocket": "http", "rockets": "https", "matrix": "http", "matrixs": "https",
}


class ChannelError(Exception):
    """A send that failed; permanent when retrying cannot help (a malformed URL, a refused host)."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


def expand(url: str, environ=None) -> str:
    environ = os.environ if environ is None else environ

    def value(match: re.Match) -> str:
        name = match.group(1)
        if not name.startswith(SECRET_PREFIX):
            raise ChannelError(f"${{{name}}}: only variables named {SECRET_PREFIX}* may be used", permanent=True)
        if name not in environ:
            raise ChannelError(f"${{{name}}} is not set in the environment")
        return environ[name]

    return _PLACEHOLDER.sub(value, url)


def egress_url(url: str) -> str | None:
    """The http(s) URL a webhook-style channel will contact, or None for other kinds."""
    parts = urlsplit(url)
    scheme = _HTTP_SCHEMES.get(parts.scheme.lower())
    if scheme is None:
        return None
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return f"{scheme}://{netloc}{parts.path or '/'}"


def check_egress(url: str) -> None:
    """Refuse a channel whose host the egress guard refuses (allowlist, private addresses)."""
    target = egress_url(url)
    if target is None:
        return
    try:
        # Apprise sends through requests, so the connection is not pinned to the checked
        # address (capabilities.egress.guarded_client is httpx): the check runs right before.
        capability_guard().check(target)
    except URLRefused as exc:
        raise ChannelError(f"egress refused: {exc}", permanent=True) from None


def url_problems(url: str) -> list[str]:
    """For the channel form: what is wrong with the URL, without sending anything."""
    import apprise


    if not isinstance(url, str) or not url.strip():
        return ["enter an Apprise URL, e.g. mailto://... or jsons://hooks.example.com/path"]
    problems = [f"${{{n}}}: only variables named {SECRET_PREFIX}* may be used"
                for n in _PLACEHOLDER.findall(url) if not n.startswith(SECRET_PREFIX)]
    trial = _PLACEHOLDER.sub("placeholder", url)
    if apprise.Apprise.instantiate(trial, asset=_asset()) is None:
        problems.append("Apprise does not understand this URL (see the Apprise wiki for each service's form)")
    target = egress_url(trial)
    if target is not None:
        try:
            validate_url(target, capability_guard(), resolve=False)
        except URLRefused as exc:
            problems.append(f"the egress guard refuses it: {exc}")
    return problems


def masked(url: str) -> str:
    """The URL for display: a password written inline (instead of a ${...} name) is hidden."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password or "${" in password:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return parts._replace(netloc=f"{user}:***@{hostport}").geturl()


def _asset():
    import apprise

    # A redirect would take the POST to a host the egress guard never saw: never follow one.
    try:  # keep Apprise's persistent cache in memory: workers share no local disk
        return apprise.AppriseAsset(storage_mode="memory", http_redirects=False)
    except TypeError:
        return apprise.AppriseAsset(http_redirects=False)


def send(url: str, *, title: str, body: str) -> None:
    """Send or raise ChannelError (with Apprise's own words on why)."""
    import logging

    import apprise

    expanded = expand(url)
    check_egress(expanded)
    notifier = apprise.Apprise(asset=_asset())
    if not notifier.add(expanded):
        raise ChannelError("Apprise does not understand this URL", permanent=True)
    for server in notifier:
        server.redirects = False  # also when the URL itself asks for them (?redirect=yes)
    with apprise.LogCapture(level=logging.WARNING) as logs:
        sent = notifier.notify(title=title, body=body)
    if not sent:
        said = " ".join(line.split(" - ", 2)[-1] for line in logs.getvalue().strip().splitlines()[-3:])
        for name in _PLACEHOLDER.findall(url):  # never store a secret in an error message
            secret = os.environ.get(name, "")
            if secret:
                said = said.replace(secret, "***")
        raise ChannelError(said[:1000] or "the channel refused the notification")

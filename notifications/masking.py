"""A channel URL for display: every credential hidden, wherever the service puts it.

Apprise URLs carry secrets in the password, in the "host" of services that take none
(Telegram's bot token, Slack's and Discord's first token), in the path (webhook tokens)
and in the query (?token=, +Authorization headers), and in a user with no password beside
it (rockets://WEBHOOK@host, matrix://token@host). Shown are the scheme, a user beside a password, a real
host, the non-secret query (to=, from=, mode=) and `${AGENTOPS_NOTIFY_...}` names.
"""
from __future__ import annotations

import re
from urllib.parse import unquote

from notifications.secrets import PLACEHOLDER
from notifications.targets import host_taking_schemes

HIDDEN = "***"
_SECRET_PARAM = re.compile(r"token|key|secret|pass|pwd|auth|sig|cred|session|webhook|apikey|^bot|^code$", re.I)


def _hide(value: str) -> str:
    """Keep a value that is only a ${...} name; hide anything else."""
    return value if value and PLACEHOLDER.fullmatch(value) else HIDDEN


def masked(url: str) -> str:
    if not isinstance(url, str) or "://" not in url:
        return HIDDEN
    scheme, rest = url.split("://", 1)
    rest, _, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    userinfo, at, hostport = netloc.rpartition("@")  # Apprise reads the first @: hide all before the last
    user, colon, password = userinfo.partition(":")
    shown = ""
    if at:
        # A user beside a password is an account's name; alone it is often the token (rockets://WEBHOOK@host).
        shown = (user if colon and "@" not in user else _hide(user)) + (":" + _hide(password) if colon else "") + "@"
    takes_host = scheme.lower() in host_taking_schemes()
    shown += hostport if takes_host else _hide(hostport)
    if slash:
        shown += "/" + "/".join(_hide(part) if part else "" for part in path.split("/"))
    if query:
        # Raw pairs, not parse_qsl: a "+Header" would read as " Header". Headers (+) and params (-) are hidden.
        pairs = [pair.partition("=") for pair in query.split("&")]
        shown += "?" + "&".join(k + eq + (_hide(unquote(v)) if _SECRET_PARAM.search(k) or k[:1] in "+-" else v)
                                for k, eq, v in pairs)
    return f"{scheme}://{shown}"

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

from notifications import secrets
from notifications.errors import ChannelError
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


# A piece of a URL between its delimiters; one this long that the masked form hides is a secret's.
_PIECE = re.compile(r"[^/:@?&=#+]{6,}")


def scrubbed(text: str, url: str) -> str:
    """`text` (an error a send raised) without any secret of the channel's URL: the values of its
    ${AGENTOPS_NOTIFY_...} secrets, and every piece the masked URL hides (a token in the path, the
    password, a token for a user or a host), as written and percent-decoded."""
    text = secrets.scrub(text, url)
    try:
        expanded = secrets.expand(url)
    except ChannelError:   # a secret not set: nothing of it can be in the text
        expanded = url
    shown = masked(expanded)
    for piece in sorted(set(_PIECE.findall(expanded)) | set(_PIECE.findall(unquote(expanded))), key=len, reverse=True):
        if piece not in shown:
            text = text.replace(piece, HIDDEN)
    return text

"""Credentials written into URLs (scheme://user:password@host, scheme://token@host), wherever text holds them."""
from __future__ import annotations

import re

# The userinfo runs to the last @ before the host ends (/, ? or #): urllib, redis-py and kombu read a
# password holding an unencoded @ so, and a query's @ (?to=x@example.com) is not one.
URL_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.\-]*://)(?P<userinfo>[^/?#\s]+)@", re.IGNORECASE)


def without_userinfo(text: str, substitute: str, *, keep_user: bool = False) -> str:
    """`text` with each URL's userinfo replaced by `substitute`; keep_user: only the password
    (scheme://user:<substitute>@host), a userinfo without one kept as it is."""
    def replaced(match: re.Match) -> str:
        if not keep_user:
            return f"{match['scheme']}{substitute}@"
        user, colon, _password = match["userinfo"].partition(":")
        return f"{match['scheme']}{user}{colon}{substitute if colon else ''}@"

    return URL_USERINFO.sub(replaced, text)

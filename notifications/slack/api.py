"""The Slack Web API methods we call, through the egress guard's pinned client (never slack_sdk's urllib).

The token is the Slack app's bot token (AGENTOPS_SLACK_BOT_TOKEN); the base URL is a setting so a
test (or a proxy) can stand in for slack.com. Slack answers HTTP 200 with `ok: false` for most errors.
"""
from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings

from capabilities.egress import capability_guard, guarded_client
from capabilities.netguard import NetGuard, URLRefused
from notifications.errors import ChannelError

VENDOR_HOSTS = ("slack.com",)
# Errors that a retry will not fix (Slack's documented method errors).
PERMANENT_ERRORS = {"not_authed", "invalid_auth", "account_inactive", "token_revoked", "no_permission",
                    "missing_scope", "channel_not_found", "not_in_channel", "is_archived", "invalid_blocks",
                    "msg_too_long", "user_not_found", "message_not_found", "cant_update_message"}


TIMEOUT_S = 10.0  # Slack wants an interaction answered within 3 s; a reply that takes longer is dropped


def host_and_port() -> tuple[str, int]:
    parts = urlsplit(settings.AGENTOPS_SLACK_API_URL)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def call(method: str, payload: dict[str, Any], *, guard: NetGuard | None = None) -> dict[str, Any]:
    """POST one Web API method as JSON; the answer's fields, or ChannelError (`ok: false`, HTTP, refused)."""
    token = settings.AGENTOPS_SLACK_BOT_TOKEN
    if not token:
        raise ChannelError("AGENTOPS_SLACK_BOT_TOKEN is not set: the Slack app's bot token is needed",
                           permanent=True)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json; charset=utf-8"}
    try:
        with guarded_client(guard or capability_guard(VENDOR_HOSTS), timeout=TIMEOUT_S) as client:
            response = client.post(settings.AGENTOPS_SLACK_API_URL + method, content=json.dumps(payload).encode(),
                                   headers=headers)
    except URLRefused as exc:
        raise ChannelError(f"egress refused: {exc}", permanent=True) from None
    except httpx.HTTPError as exc:
        raise ChannelError(f"Slack {method}: connection failed ({type(exc).__name__})") from None
    if response.status_code != 200:
        permanent = 300 <= response.status_code < 500 and response.status_code not in (408, 429)
        raise ChannelError(f"Slack {method}: HTTP {response.status_code}", permanent=permanent)
    try:
        answer = response.json()
    except ValueError:
        raise ChannelError(f"Slack {method}: the answer is not JSON") from None
    if not isinstance(answer, dict) or not answer.get("ok"):
        error = str(answer.get("error", "unknown_error"))[:100] if isinstance(answer, dict) else "unknown_error"
        raise ChannelError(f"Slack {method}: {error}", permanent=error in PERMANENT_ERRORS)
    return answer

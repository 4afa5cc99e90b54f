"""Slack's request signatures, checked as Slack documents them, and replays refused.

v0: HMAC-SHA256 of `v0:{X-Slack-Request-Timestamp}:{raw body}` with the app's signing secret,
compared in constant time (slack_sdk's SignatureVerifier), the timestamp within five minutes of
our clock. A signed request is taken once: the same signature again is a replay.
"""
from __future__ import annotations

import re
import time
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from slack_sdk.signature import SignatureVerifier

from notifications.models import SlackRequestSeen

MAX_AGE_S = 300  # Slack's own advice


class Refused(Exception):
    """The request is not one Slack signed for us now (said in the 401's body, never a secret)."""


def verify(*, body: bytes, timestamp: str | None, signature: str | None, now: float | None = None) -> None:
    secret = settings.AGENTOPS_SLACK_SIGNING_SECRET
    if not secret:
        raise Refused("Slack is not set up here (AGENTOPS_SLACK_SIGNING_SECRET)")
    # ASCII digits, a few of them: str.isdigit() also takes "²", and int() no number of 5,000 digits.
    if not timestamp or not re.fullmatch(r"[0-9]{1,15}", timestamp) or not signature:
        raise Refused("missing or malformed X-Slack-Request-Timestamp / X-Slack-Signature")
    now = time.time() if now is None else now
    if abs(now - int(timestamp)) > MAX_AGE_S:
        raise Refused("the request is too old (or its timestamp is in the future)")
    if not SignatureVerifier(secret).is_valid(body=body, timestamp=timestamp, signature=signature):
        raise Refused("the signature does not match")
    try:
        with transaction.atomic():
            SlackRequestSeen.objects.create(signature=signature[:80])
    except IntegrityError:
        raise Refused("this signed request was taken already (a replay)") from None


def forget_old(now=None) -> int:
    """Signatures older than the age a request may have can never come back valid: drop them."""
    now = now or timezone.now()
    deleted, _ = SlackRequestSeen.objects.filter(received_at__lt=now - timedelta(seconds=2 * MAX_AGE_S)).delete()
    return deleted

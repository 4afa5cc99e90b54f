"""@mentions in comments on runs (the review app): the enabled "mentioned" rules' channels are told.

Written when the comment is saved, not found by the scheduler's tick: the caller (in its
transaction) hands the notices over, one per mentioned user, keyed by comment and user so
editing a comment notifies only the users it newly mentions. Sending is queued on commit; a
failing channel is retried by the outbox like any other delivery.
"""
from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from notifications import outbox
from notifications.models import Rule, RuleEvent
from notifications.rules import Notice
from notifications.tasks import send_due
from runs.labels import runs_with_labels
from runs.models import Run

log = logging.getLogger(__name__)


def mentions_notify(*, run_id: int, comment_key: str, usernames: list[str], author: str, excerpt: str,
                    path: str) -> int:
    """Write the deliveries for `usernames` mentioned by `author` on run `run_id`; returns how many were new."""
    if not usernames:
        return 0
    written = 0
    now, link = timezone.now(), settings.AGENTOPS_BASE_URL + path
    for rule in Rule.objects.filter(enabled=True, event=RuleEvent.MENTIONED).prefetch_related("channels"):
        targets = [c for c in rule.channels.all() if c.enabled]
        labelled = runs_with_labels(Run.objects.filter(pk=run_id), tuple((rule.labels or {}).items()))
        if not targets or not labelled.exists():
            continue
        notices = [Notice(f"mention:{comment_key}:{name}", f"{author} mentioned @{name} on run #{run_id}",
                          f"@{name}: {author} wrote on run #{run_id}:\n\n{excerpt[:1000]}", link, run_id)
                   for name in usernames]
        written += outbox.write_deliveries(rule, targets, notices, now)
    if written:
        transaction.on_commit(_send_soon)
    return written


def _send_soon() -> None:
    try:
        send_due.delay()
    except Exception:  # the deliveries are written; the scheduler's next tick sends them
        log.exception("could not queue sending mention notices")

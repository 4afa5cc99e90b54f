"""The outbox: one tick of the scheduler finds events, writes deliveries, sends what is due.

Sending is claimed row by row with a conditional UPDATE, so two schedulers (or a tick
that overlaps the next) never send the same delivery twice; a sender that died while
holding a row gives it back when its claim runs out. A failing channel is retried
with exponential backoff and never holds up the other deliveries, or any run.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.projects import project_scope
from notifications import channels, rules
from notifications.models import Delivery, Rule
from notifications.slack import messages as slack_messages
from notifications.slack import signing as slack_signing
from runtime.retry import exponential_backoff_s

log = logging.getLogger(__name__)

CLAIM_SECONDS = 300
SEND_BATCH = 100


def tick(now: datetime | None = None) -> dict[str, int]:
    now = now or timezone.now()
    queued = enqueue_events(now)
    sent, failed = drain(now)
    # Slack messages of requests decided elsewhere or expired lose their buttons.
    slack_messages.refresh_all(now)
    slack_signing.forget_old(now)
    return {"queued": queued, "sent": sent, "failed": failed}


def enqueue_events(now: datetime) -> int:
    """One delivery per (rule, channel, event) not seen before; returns how many were added."""
    added = 0
    for rule in Rule.objects.filter(enabled=True).prefetch_related("channels"):
        targets = [c for c in rule.channels.all() if c.enabled]
        if not targets:
            continue
        try:
            with project_scope(rule.project_id):   # a rule sees its own project's runs and approvals only
                notices = rules.find_events(rule, now)
        except Exception:  # one broken rule must not stop the others
            log.exception("notification rule %s could not be evaluated", rule.pk)
            continue
        added += write_deliveries(rule, targets, notices, now)
    return added


def write_deliveries(rule, targets, notices, now: datetime) -> int:
    """One outbox row per (notice, channel); returns how many were new."""
    rows = [Delivery(project_id=rule.project_id, rule=rule, channel=channel, rule_name=rule.name, channel_name=channel.name,
                     event_key=n.key[:200], run_id=n.run_id, approval_id=n.approval_id, subject=n.subject[:300],
                     body=n.body + (f"\n\n{n.link}" if n.link else ""), link=n.link[:500], next_attempt_at=now)
            for n in notices for channel in targets]
    if not rows:
        return 0
    before = Delivery.objects.filter(rule=rule).count()
    # The unique (rule, channel, event_key) turns an event found again into a no-op.
    Delivery.objects.bulk_create(rows, ignore_conflicts=True)
    return Delivery.objects.filter(rule=rule).count() - before


def backoff_s(attempts: int) -> float:
    return exponential_backoff_s(settings.AGENTOPS_NOTIFY_BACKOFF_S, settings.AGENTOPS_NOTIFY_BACKOFF_CAP_S, attempts)


def drain(now: datetime | None = None, limit: int = SEND_BATCH) -> tuple[int, int]:
    """Send the deliveries that are due; returns (sent, failed for good)."""
    now = now or timezone.now()
    Delivery.objects.filter(status=Delivery.Status.SENDING, claimed_until__lt=now).update(
        status=Delivery.Status.PENDING)
    due = list(Delivery.objects.filter(status=Delivery.Status.PENDING, next_attempt_at__lte=now)
               .order_by("next_attempt_at", "id").values_list("pk", flat=True)[:limit])
    sent = failed = 0
    for pk in due:
        claimed = Delivery.objects.filter(pk=pk, status=Delivery.Status.PENDING).update(
            status=Delivery.Status.SENDING, claimed_until=now + timedelta(seconds=CLAIM_SECONDS))
        if not claimed:
            continue  # another sender took it
        outcome = deliver(pk, now)
        sent += outcome == Delivery.Status.SENT
        failed += outcome == Delivery.Status.FAILED
    return sent, failed


def deliver(pk: int, now: datetime | None = None) -> str:
    """Send one claimed delivery and record the outcome; returns its new status.

    `now` is the tick's time: the next try is scheduled from it.
    """
    now = now or timezone.now()
    delivery = Delivery.objects.select_related("channel", "rule", "approval__run__owner", "approval__revision",
                                               "approval__step").get(pk=pk)
    # Sent in the rule's project: who may decide an approval by mail is asked there.
    with project_scope(delivery.project_id):
        return _deliver(delivery, pk, now)


def _deliver(delivery: Delivery, pk: int, now: datetime) -> str:
    try:
        if delivery.channel is None:
            raise channels.ChannelError("the channel was deleted", permanent=True)
        # A request still waiting is asked with decision controls where the channel has them.
        asking = delivery.approval if delivery.approval and delivery.approval.state == "pending" else None
        channels.send(delivery.channel.url, title=delivery.subject, body=delivery.body,
                      channel=delivery.channel.name, approval=asking)
    except Exception as exc:  # ChannelError, or a library bug: either way the row records it
        permanent = isinstance(exc, channels.ChannelError) and exc.permanent
        attempts = delivery.attempts + 1
        give_up = permanent or attempts >= settings.AGENTOPS_NOTIFY_MAX_ATTEMPTS
        status = Delivery.Status.FAILED if give_up else Delivery.Status.PENDING
        message = str(exc) if isinstance(exc, channels.ChannelError) else f"{type(exc).__name__}: {exc}"
        with transaction.atomic():
            Delivery.objects.filter(pk=pk).update(
                status=status, attempts=attempts, last_error=message[:2000], claimed_until=None,
                next_attempt_at=now + timedelta(seconds=backoff_s(attempts)))
        log.warning("notification %s to %s failed (try %s%s): %s", pk, delivery.channel_name, attempts,
                    ", giving up" if give_up else "", message)
        return status
    Delivery.objects.filter(pk=pk).update(status=Delivery.Status.SENT, attempts=delivery.attempts + 1,
                                          sent_at=timezone.now(), claimed_until=None, last_error="")
    return Delivery.Status.SENT

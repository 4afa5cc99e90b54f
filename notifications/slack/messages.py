"""What a posted request message says once the request is decided or expired, wherever that happened.

A decision from Slack updates its message at once; one made in the browser, the API or from
e-mail queues notifications.slack_refresh (notifications.tasks); an expiry, and anything a lost
task missed, are picked up by the notification scheduler's next tick (`refresh_all`).
"""
from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from core.choices import ApprovalState, DecisionChannel
from core.models import AuditEvent
from notifications.errors import ChannelError
from notifications.models import SlackMessage
from notifications.slack import api, blocks
from runtime.stop import StopKind

log = logging.getLogger(__name__)

WHERE = {DecisionChannel.INBOX: "in the browser", DecisionChannel.API: "through the API",
         DecisionChannel.SLACK: "in Slack", DecisionChannel.EMAIL: "from an e-mailed link"}
REFRESH_BATCH = 100


def inbox_url(approval) -> str:
    return f"{settings.AGENTOPS_BASE_URL}/runs/approvals/#approval-{approval.pk}"


def decided_channel(approval) -> str:
    """The channel named by the decision's audit row ("" when the system decided)."""
    row = (AuditEvent.objects.filter(target_type="approval", target_id=str(approval.pk), details__has_key="channel")
           .order_by("-id").first())
    return str(row.details.get("channel", "")) if row else ""


def shown_state(approval, now: datetime) -> str:
    if approval.state == ApprovalState.PENDING and approval.expires_at <= now:
        return ApprovalState.EXPIRED
    return approval.state


def outcome_text(approval, now: datetime) -> str:
    state = shown_state(approval, now)
    if state == ApprovalState.EXPIRED:
        at = approval.decided_at or approval.expires_at
        return f":hourglass: *Expired* undecided at {at:%Y-%m-%d %H:%M} UTC: the run stops `{StopKind.APPROVAL_EXPIRED}`."
    who = approval.decided_by.get_username() if approval.decided_by else "the system"
    where = WHERE.get(decided_channel(approval), "")
    mark = ":white_check_mark:" if state == ApprovalState.APPROVED else ":no_entry:"
    text = f"{mark} *{state.capitalize()}* by {who} at {approval.decided_at:%Y-%m-%d %H:%M} UTC {where}".rstrip()
    return text + (f": “{approval.comment[:500]}”" if approval.comment else ".")


def refresh(message: SlackMessage, now: datetime | None = None) -> bool:
    """Show the request's outcome in its message; False while it is still pending (nothing to show)."""
    now = now or timezone.now()
    approval = message.approval
    state = shown_state(approval, now)
    if state == ApprovalState.PENDING or state == message.shown_state:
        return state != ApprovalState.PENDING
    api.call("chat.update", {"channel": message.slack_channel, "ts": message.ts,
                             "text": f"Run #{approval.run_id}: {state}",
                             "blocks": blocks.outcome_blocks(approval, inbox_url=inbox_url(approval),
                                                             outcome=outcome_text(approval, now))})
    SlackMessage.objects.filter(pk=message.pk).update(shown_state=state, updated_at=now)
    return True


def refresh_all(now: datetime | None = None, *, approval_id: int | None = None) -> int:
    """Update every message (of one approval, or all) that still shows buttons for a request no
    longer pending; returns how many."""
    now = now or timezone.now()
    pending = SlackMessage.objects.filter(shown_state=ApprovalState.PENDING)
    if approval_id is not None:
        pending = pending.filter(approval_id=approval_id)
    messages = (pending
                .exclude(approval__state=ApprovalState.PENDING, approval__expires_at__gt=now)
                .select_related("approval__run__owner", "approval__revision", "approval__step",
                                "approval__decided_by").order_by("id")[:REFRESH_BATCH])
    updated = 0
    for message in messages:
        try:
            updated += refresh(message, now)
        except ChannelError as exc:  # the next tick tries again; a message deleted in Slack stays as it is
            log.warning("Slack message %s of approval %s not updated: %s", message.pk, message.approval_id, exc)
            if exc.permanent:
                SlackMessage.objects.filter(pk=message.pk).update(shown_state="unreachable")
    return updated

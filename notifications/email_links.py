"""Decision links in an approval request mail: signed, single-use, expiring, bound to one approver.

Each approver who receives the mail gets their own links (Approve and Reject share one row, so
using either spends both). A link opens a confirmation page behind the sign-in, and decides only
for the user it was sent to: a forwarded mail decides nothing. The link carries the arguments
hash and revision the mail showed; the decision goes through runs.services.approval_decide.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.choices import DecisionChannel
from core.errors import Conflict, InvalidInput, NotAllowed
from core.permissions import allowed
from notifications.models import EmailDecisionLink
from runs import services as run_services
from runs.models import Approval

SALT = "agentops.notifications.email-decision"


@dataclass(frozen=True)
class Opened:
    link: EmailDecisionLink
    approval_id: int
    bound_hash: str
    revision: int


def approvers_for(address: str):
    """The active users with this e-mail address who may decide approvals (usually one)."""
    users = get_user_model().objects.filter(email__iexact=address.strip(), is_active=True).exclude(email="")
    return [user for user in users.order_by("pk") if allowed(user, "runs.decide_approval")]


def link_expiry(approval: Approval, now: datetime) -> datetime:
    """A link works until the request expires (its TTL or the run's deadline), at most the link TTL."""
    ends = [now + timedelta(seconds=settings.AGENTOPS_EMAIL_LINK_TTL_S), approval.expires_at]
    if approval.run.deadline_at is not None:
        ends.append(approval.run.deadline_at)
    return min(ends)


def issue(*, approval: Approval, user, now: datetime | None = None) -> dict[str, str]:
    """The Approve and Reject URLs for `user` (a new single-use row)."""
    now = now or timezone.now()
    link = EmailDecisionLink.objects.create(nonce=secrets.token_urlsafe(24), approval=approval, user=user,
                                            expires_at=link_expiry(approval, now))
    token = signing.dumps({"n": link.nonce, "a": approval.pk, "h": approval.arguments_hash or approval.plan_hash,
                           "r": approval.revision.number}, salt=SALT, compress=True)
    base = f"{settings.AGENTOPS_BASE_URL}/notifications/decide/{token}/"
    return {"approve": base + "?decision=approve", "reject": base + "?decision=reject",
            "expires_at": f"{link.expires_at:%Y-%m-%d %H:%M} UTC"}


def open_link(token: str) -> Opened:
    """The link a token names, or InvalidInput (forged, mangled, unknown)."""
    try:
        found = signing.loads(token, salt=SALT)
        nonce, approval_id, bound_hash, revision = found["n"], found["a"], found["h"], found["r"]
    except (signing.BadSignature, TypeError, KeyError, ValueError):
        raise InvalidInput("This decision link is not valid (it may be cut short by the mail program).") from None
    link = (EmailDecisionLink.objects.select_related("user").filter(nonce=nonce, approval_id=approval_id).first())
    if link is None:
        raise InvalidInput("This decision link is not valid.")
    return Opened(link, approval_id, bound_hash, revision)


def refusal(opened: Opened, *, user, now: datetime | None = None) -> str | None:
    """Why `user` may not decide with this link now (None: they may try; the service has the last word)."""
    now = now or timezone.now()
    link = opened.link
    if link.user_id != user.pk:
        return (f"This link was sent to another person: it decides only for them, signed in as themselves. "
                f"You are signed in as {user.get_username()}; open the request in the inbox instead.")
    if link.used_at is not None:
        return f"This link was used already, at {link.used_at:%Y-%m-%d %H:%M} UTC: each link decides once."
    if link.expires_at <= now:
        return f"This link expired at {link.expires_at:%Y-%m-%d %H:%M} UTC."
    return None


@transaction.atomic
def decide(*, token: str, user, approve: bool, comment: str = "") -> Approval:
    """Spend the link and decide, in one transaction: a refused decision leaves the link unused."""
    opened = open_link(token)
    now = timezone.now()
    why = refusal(opened, user=user, now=now)
    if why:
        raise (NotAllowed if opened.link.user_id != user.pk else Conflict)(why)
    spent = EmailDecisionLink.objects.filter(Q(pk=opened.link.pk) & Q(used_at__isnull=True) & Q(expires_at__gt=now))
    if not spent.update(used_at=now):
        raise Conflict("This link was used already: each link decides once.")
    return run_services.approval_decide(approval_id=opened.approval_id, user=user, approve=approve, comment=comment,
                                        expected_hash=opened.bound_hash, expected_revision=opened.revision,
                                        channel=DecisionChannel.EMAIL)

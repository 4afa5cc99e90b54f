"""Linking a Slack account to an AgentOps user: a one-time code from the profile page, sent from Slack.

The profile page issues a code (shown once, stored as a hash, valid ten minutes); the person
types `/agentops link CODE` in Slack, whose signed request names their Slack user. The code is
spent at once, so a code read over someone's shoulder links nobody after it was used.
"""
from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from core.audit import audit
from core.errors import Conflict, InvalidInput
from core.models import AuditAction
from notifications.errors import ChannelError
from notifications.models import SlackLink, SlackLinkCode
from notifications.slack import api

CODE_TTL = timedelta(minutes=10)
ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud and typed


def _hash(code: str) -> str:
    return hashlib.sha256(code.strip().upper().encode()).hexdigest()


@transaction.atomic
def link_code_issue(*, user) -> str:
    """A new one-time code for `user` (earlier unused ones stop working)."""
    now = timezone.now()
    SlackLinkCode.objects.filter(user=user, used_at__isnull=True).update(used_at=now)
    code = "".join(secrets.choice(ALPHABET) for _ in range(4)) + "-" + "".join(secrets.choice(ALPHABET)
                                                                          for _ in range(4))
    SlackLinkCode.objects.create(user=user, code_hash=_hash(code), expires_at=now + CODE_TTL)
    return code


@transaction.atomic
def link_by_code(*, team_id: str, slack_user_id: str, code: str) -> SlackLink:
    """Link the Slack user who sent `code` to the user it was issued to; InvalidInput or Conflict if not."""
    now = timezone.now()
    found = SlackLinkCode.objects.select_related("user").filter(code_hash=_hash(code)).first()
    if found is None or found.used_at is not None or found.expires_at <= now or not found.user.is_active:
        raise InvalidInput("That code is unknown, used or expired: get a new one on your AgentOps profile page.")
    if not SlackLinkCode.objects.filter(pk=found.pk, used_at__isnull=True).update(used_at=now):
        raise InvalidInput("That code has just been used.")
    other = SlackLink.objects.filter(team_id=team_id, slack_user_id=slack_user_id).exclude(user=found.user).first()
    if other is not None:
        raise Conflict("This Slack account is linked to another AgentOps user: unlink it there first.")
    try:
        info = api.call("users.info", {"user": slack_user_id}).get("user") or {}
    except ChannelError as exc:
        raise Conflict(f"Slack could not confirm your account ({exc}); try again.") from None
    if info.get("deleted") or info.get("is_bot"):
        raise InvalidInput("Only a person's active Slack account can be linked.")
    name = str(info.get("name") or (info.get("profile") or {}).get("display_name") or slack_user_id)[:120]
    link, _ = SlackLink.objects.update_or_create(user=found.user, defaults={
        "team_id": team_id, "slack_user_id": slack_user_id, "slack_name": name})
    audit(actor=found.user, action=AuditAction.SLACK_ACCOUNT_LINKED, target=link,
          summary=f"Slack account {name} linked to {found.user.get_username()}",
          details={"team_id": team_id, "slack_user_id": slack_user_id})
    return link


@transaction.atomic
def unlink(*, user) -> None:
    link = SlackLink.objects.filter(user=user).first()
    if link is None:
        return
    audit(actor=user, action=AuditAction.SLACK_ACCOUNT_UNLINKED, target=link,
          summary=f"Slack account {link.slack_name} unlinked from {user.get_username()}",
          details={"team_id": link.team_id, "slack_user_id": link.slack_user_id})
    link.delete()


def command(*, team_id: str, slack_user_id: str, text: str) -> str:
    """The answer to `/agentops ...` (shown only to whoever typed it)."""
    words = (text or "").split()
    if len(words) == 2 and words[0].lower() == "link":
        try:
            link = link_by_code(team_id=team_id, slack_user_id=slack_user_id, code=words[1])
        except (InvalidInput, Conflict) as exc:
            return exc.message
        return f"Linked: your clicks on AgentOps approval requests now decide as {link.user.get_username()}."
    return "Type `/agentops link CODE` with the code from your AgentOps profile page (Account → Slack)."

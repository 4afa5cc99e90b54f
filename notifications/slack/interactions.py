"""A click on Approve or Reject in Slack: the decision, as the linked AgentOps user, through the one service.

The request has been verified (signing) before it gets here. Who clicked is the Slack user
Slack names in the signed payload; it decides only as the AgentOps user it is linked to, and
only if that user may decide. Everything else gets an ephemeral refusal, visible to the clicker.
"""
from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from core import jsonlimits
from core.choices import DecisionChannel
from core.errors import ServiceError
from core.permissions import allowed
from core.projects import project_scope
from notifications.errors import ChannelError
from notifications.models import SlackLink, SlackMessage
from notifications.slack import api, blocks, messages
from runs import services as run_services
from runs.selectors import approval_project_id

log = logging.getLogger(__name__)

DECIDED, UNLINKED, NOT_ALLOWED, REFUSED, IGNORED = "decided", "unlinked", "not_allowed", "refused", "ignored"


def _binding(value: Any) -> tuple[int, str, int] | None:
    try:
        found = jsonlimits.loads(value)
        approval_id, bound_hash, revision = found["a"], found["h"], found["r"]
    except (TypeError, ValueError, KeyError):
        return None
    if not (isinstance(approval_id, int) and isinstance(bound_hash, str) and isinstance(revision, int)):
        return None
    return approval_id, bound_hash, revision


def _object(value: Any) -> dict:
    """A part of the payload that should be an object, as one ({} when it is anything else)."""
    return value if isinstance(value, dict) else {}


def _comment(payload: dict) -> str:
    values = _object(_object(payload.get("state")).get("values"))
    value = _object(_object(values.get(blocks.COMMENT_BLOCK)).get(blocks.COMMENT_INPUT)).get("value")
    return value[:5000] if isinstance(value, str) else ""


def ephemeral(*, channel: str, user: str, text: str) -> None:
    """A reply only the clicker sees; a Slack failure is logged (the refusal stands either way)."""
    try:
        api.call("chat.postEphemeral", {"channel": channel, "user": user, "text": text})
    except ChannelError as exc:
        log.warning("Slack ephemeral reply not sent: %s", exc)


def _refresh(channel: str, ts: str) -> None:
    message = SlackMessage.objects.select_related("approval__run__owner", "approval__revision", "approval__step",
                                                  "approval__decided_by").filter(slack_channel=channel, ts=ts).first()
    if message is None:
        return
    try:
        messages.refresh(message)
    except ChannelError as exc:  # the scheduler's next tick tries again
        log.warning("Slack message %s not updated: %s", message.pk, exc)


def handle(payload: dict) -> str:
    """Take one block_actions interaction; returns what happened (for logs and tests)."""
    actions = payload.get("actions")
    if payload.get("type") != "block_actions" or not isinstance(actions, list) or not actions \
            or not isinstance(actions[0], dict):
        return IGNORED
    action = actions[0]
    if action.get("action_id") not in (blocks.APPROVE, blocks.REJECT):
        return IGNORED
    slack_user, container = _object(payload.get("user")), _object(payload.get("container"))
    team = str(_object(payload.get("team")).get("id") or slack_user.get("team_id") or "")
    user_id = str(slack_user.get("id") or "")
    channel = str(_object(payload.get("channel")).get("id") or container.get("channel_id") or "")
    ts = str(container.get("message_ts") or _object(payload.get("message")).get("ts") or "")
    binding = _binding(action.get("value"))
    if binding is None:
        ephemeral(channel=channel, user=user_id, text="This button is not an AgentOps approval request.")
        return REFUSED
    link = SlackLink.objects.select_related("user").filter(team_id=team, slack_user_id=user_id).first()
    if link is None or not link.user.is_active:
        ephemeral(channel=channel, user=user_id, text=(
            "Your Slack account is not linked to an AgentOps user, so it cannot decide. Link it on your "
            f"AgentOps profile page ({settings.AGENTOPS_BASE_URL}/account/slack/), then try again."))
        return UNLINKED
    approval_id, bound_hash, revision = binding
    # The click decides in the request's project, with the roles the linked user holds there.
    with project_scope(approval_project_id(approval_id)):
        return _decide(payload, action, link, channel, user_id, ts, approval_id, bound_hash, revision)


def _decide(payload, action, link, channel, user_id, ts, approval_id, bound_hash, revision) -> str:
    if not allowed(link.user, "runs.decide_approval"):
        ephemeral(channel=channel, user=user_id, text=(
            f"Your AgentOps user {link.user.get_username()} may not approve or reject requests in this "
            "request's project (it needs the operator role there). Nothing was decided."))
        return NOT_ALLOWED
    try:
        run_services.approval_decide(approval_id=approval_id, user=link.user,
                                     approve=action["action_id"] == blocks.APPROVE, comment=_comment(payload),
                                     expected_hash=bound_hash, expected_revision=revision,
                                     channel=DecisionChannel.SLACK)
    except ServiceError as exc:
        ephemeral(channel=channel, user=user_id, text=f"Not decided: {exc.message}")
        _refresh(channel, ts)  # it may have been decided elsewhere, or expired: show that
        return REFUSED
    _refresh(channel, ts)
    return DECIDED

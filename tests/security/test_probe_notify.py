"""Hostile input on Slack's endpoints: a malformed timestamp header (before any signature is
checked) and signed payloads of the wrong shape are refused or ignored, never a 500, and decide nothing."""
from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import timedelta
from urllib.parse import urlencode

import pytest

pytestmark = pytest.mark.django_db
SECRET = "test-signing-secret"
URL = "/notifications/slack/interactions/"


@pytest.fixture
def approval(operator, settings):
    from django.utils import timezone

    from notifications.models import SlackLink
    from runs.models import Approval, PlanRevision, Run, Step

    settings.AGENTOPS_SLACK_SIGNING_SECRET = SECRET
    settings.AGENTOPS_SLACK_API_URL = "http://127.0.0.1:9/api/"   # ephemeral replies fail (and are logged)
    SlackLink.objects.create(user=operator, team_id="T", slack_user_id="U", slack_name="otto")
    now = timezone.now()
    run = Run.objects.create(goal="g", completion={"capability": "x", "path": "id", "exists": True},
                             budgets={"deadline_s": 600}, planner="scripted", owner=operator,
                             status="awaiting_approval", trace_id="n" * 32, started_at=now)
    revision = PlanRevision.objects.create(run=run, number=1, accepted=True, reason_code="initial", steps=[])
    step = Step.objects.create(run=run, revision=revision, index=0, key="s1", capability_name="create_ticket",
                               arguments={"t": 1}, arguments_hash="h1", approval_state="pending")
    return Approval.objects.create(run=run, kind="step", revision=revision, step=step, capability_name="create_ticket",
                                   arguments={"t": 1}, arguments_hash="h1", expires_at=now + timedelta(hours=1))


def _signed_post(client, body: bytes):
    timestamp = str(int(time.time()))
    signature = "v0=" + hmac.new(SECRET.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256).hexdigest()
    return client.post(URL, body, content_type="application/x-www-form-urlencoded",
                       HTTP_X_SLACK_REQUEST_TIMESTAMP=timestamp, HTTP_X_SLACK_SIGNATURE=signature)


@pytest.mark.parametrize("timestamp", ["\u00b2", "9" * 5000, "\u0663" * 10], ids=["superscript", "5000-digits", "arabic"])
def test_a_timestamp_that_is_not_a_few_ascii_digits_is_a_401(client, settings, timestamp):
    """Before: "²".isdigit() held and int("²") raised (a 500 to anyone, unsigned); so did 5,000 digits."""
    settings.AGENTOPS_SLACK_SIGNING_SECRET = SECRET
    response = client.post(URL, b"payload=%7B%7D", content_type="application/x-www-form-urlencoded",
                           HTTP_X_SLACK_REQUEST_TIMESTAMP=timestamp, HTTP_X_SLACK_SIGNATURE="v0=abc")
    assert response.status_code == 401
    assert b"malformed X-Slack-Request-Timestamp" in response.content


def _click(**changes):
    payload = {"type": "block_actions", "team": {"id": "T"}, "user": {"id": "U", "team_id": "T"},
               "channel": {"id": "C"}, "container": {"type": "message", "channel_id": "C", "message_ts": "1.2"},
               "actions": [{"action_id": "agentops_approve", "value": json.dumps({"a": 0, "h": "h1", "r": 1})}],
               "state": {"values": {}}}
    payload.update(changes)
    return payload


SHAPES = {
    "user": {"user": "U"}, "team": {"team": "T"}, "container": {"container": "x", "channel": None},
    "channel": {"channel": "C"}, "actions-object": {"actions": {"a": 1}},
    "value-deep": {"actions": [{"action_id": "agentops_approve", "value": "[" * 100_000 + "]" * 100_000}]},
    "value-past-64-bits": {"actions": [{"action_id": "agentops_approve",
                                        "value": json.dumps({"a": 2**64, "h": "h1", "r": 1})}]},
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_signed_payload_of_the_wrong_shape_decides_nothing(client, approval, shape):
    """Before: a string where Slack sends an object raised AttributeError, a deep button value RecursionError."""
    body = urlencode({"payload": json.dumps(_click(**SHAPES[shape]))}).encode()
    assert _signed_post(client, body).status_code == 200
    approval.refresh_from_db()
    assert approval.state == "pending"


def test_a_comment_state_of_the_wrong_shape_still_decides_with_no_comment(client, approval):
    value = json.dumps({"a": approval.pk, "h": "h1", "r": 1})
    body = urlencode({"payload": json.dumps(_click(
        actions=[{"action_id": "agentops_approve", "value": value}], state={"values": "x"}))}).encode()
    assert _signed_post(client, body).status_code == 200
    approval.refresh_from_db()
    assert (approval.state, approval.comment) == ("approved", "")

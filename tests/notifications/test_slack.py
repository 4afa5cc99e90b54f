"""Approvals in Slack: interactive requests on a local Slack Web API, clicks signed as Slack signs them."""
from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from core.models import AuditEvent
from core.project_access import grant_role
from core.projects import project_scope
from notifications import outbox, services
from notifications.models import Rule, SlackLink, SlackMessage, SlackRequestSeen
from notifications.slack import linking
from runs import services as run_services
from runs.models import Approval, Run
from tests.notifications.conftest import slack_click

INTERACTIONS, COMMANDS = "/notifications/slack/interactions/", "/notifications/slack/commands/"


@pytest.fixture
def posted(slack, operator, waiting_approval):
    """The waiting request, posted to #C0APPROVALS through a rule made before it was asked."""
    channel = services.channel_save(user=operator, name="slack approvals", url="slackapp://C0APPROVALS")
    rule = services.rule_save(user=operator, name="ask in slack", event="approval_requested", channel_ids=[channel.pk])
    Rule.objects.filter(pk=rule.pk).update(created_at=waiting_approval.requested_at - timedelta(seconds=1))
    assert outbox.tick()["sent"] == 1
    message = slack.of("chat.postMessage")[0]
    return {**message, "ts": SlackMessage.objects.get(approval=waiting_approval).ts}


@pytest.fixture
def linked(second_operator, viewer, operator):
    for user, slack_id in ((second_operator, "U_OLGA"), (viewer, "U_VERA"), (operator, "U_OTTO")):
        SlackLink.objects.create(user=user, team_id="T_TEAM", slack_user_id=slack_id, slack_name=user.username)


def click(slack, client, payload: dict, **sign_kw):
    return slack.post(client, INTERACTIONS, {"payload": json.dumps(payload)}, **sign_kw)


class TestTheRequestMessage:
    def test_it_shows_the_capability_the_exact_arguments_the_goal_and_budgets_with_buttons(
            self, posted, waiting_approval, slack):
        text = json.dumps(posted["blocks"])
        assert posted["channel"] == "C0APPROVALS"
        assert "create_ticket" in text and '\\"title\\": \\"Printer\\"' in text
        assert "Open a ticket for the printer" in text and "max_tool_calls 20" in text
        buttons = [e for b in posted["blocks"] if b["type"] == "actions" for e in b["elements"]]
        assert [b["text"]["text"] for b in buttons] == ["Approve", "Reject"]
        assert json.loads(buttons[0]["value"]) == {"a": waiting_approval.pk, "h": "h1", "r": 1}
        assert buttons[1]["confirm"]["confirm"]["text"] == "Reject"
        assert slack.calls[0]["auth"] == "Bearer xoxb-test-token"

    def test_arguments_too_long_to_show_get_no_buttons(self, slack, operator, waiting_approval):
        Approval.objects.filter(pk=waiting_approval.pk).update(arguments={"body": "x" * 4000})
        channel = services.channel_save(user=operator, name="slack", url="slackapp://C0APPROVALS")
        rule = services.rule_save(user=operator, name="r", event="approval_requested", channel_ids=[channel.pk])
        Rule.objects.filter(pk=rule.pk).update(created_at=waiting_approval.requested_at)
        outbox.tick()
        blocks = slack.of("chat.postMessage")[0]["blocks"]
        assert not [b for b in blocks if b["type"] == "actions"] and "decide in the inbox" in json.dumps(blocks)

    def test_a_bad_slackapp_url_is_refused_with_the_reason(self, operator, slack):
        from core.errors import InvalidInput

        with pytest.raises(InvalidInput, match="slackapp://CHANNEL_ID"):
            services.channel_save(user=operator, name="bad", url="slackapp://#general")


class TestAClickDecides:
    def test_a_linked_operator_approves_and_the_message_says_who_and_when(
            self, posted, linked, slack, client, waiting_approval, second_operator):
        response = click(slack, client, slack_click(posted, user="U_OLGA", comment="ok from slack"))
        assert response.status_code == 200
        approval = Approval.objects.get(pk=waiting_approval.pk)
        assert approval.state == "approved" and approval.decided_by == second_operator
        assert approval.comment == "ok from slack"
        assert Run.objects.get(pk=approval.run_id).status == "queued"
        row = AuditEvent.objects.get(action="step.approved")
        assert row.details["channel"] == "slack" and row.details["hash"] == "h1" and "(from Slack)" in row.summary
        update = slack.of("chat.update")[-1]
        assert update["ts"] == posted["ts"] and update["channel"] == "C0APPROVALS"
        text = json.dumps(update["blocks"])
        assert "Approved* by olga" in text and "in Slack" in text and "actions" not in text
        assert SlackMessage.objects.get().shown_state == "approved"

    def test_a_reject_click_rejects(self, posted, linked, slack, client, waiting_approval):
        click(slack, client, slack_click(posted, user="U_OLGA", action="agentops_reject", comment="no"))
        assert Approval.objects.get(pk=waiting_approval.pk).state == "rejected"
        assert "Rejected* by olga" in json.dumps(slack.of("chat.update")[-1]["blocks"])


class TestRefusals:
    def _nothing_decided(self, waiting_approval):
        assert Approval.objects.get(pk=waiting_approval.pk).state == "pending"
        assert not AuditEvent.objects.filter(action__in=["step.approved", "step.rejected"]).exists()

    def test_a_wrong_signature_is_refused(self, posted, linked, slack, client, waiting_approval):
        response = click(slack, client, slack_click(posted, user="U_OLGA"), secret="not-the-secret")
        assert response.status_code == 401 and b"signature" in response.content
        self._nothing_decided(waiting_approval)

    def test_an_unsigned_request_is_refused(self, posted, linked, client, waiting_approval):
        body = {"payload": json.dumps(slack_click(posted, user="U_OLGA"))}
        assert client.post(INTERACTIONS, body).status_code == 401
        self._nothing_decided(waiting_approval)

    @pytest.mark.parametrize("payload", ["[" * 10_000 + "]" * 10_000, "not json", "[1]", '{"a": NaN}'],
                             ids=["deep", "not-json", "not-an-object", "non-finite"])
    def test_a_signed_but_bad_payload_is_a_400(self, posted, linked, slack, client, waiting_approval, payload):
        response = slack.post(client, INTERACTIONS, {"payload": payload})
        assert response.status_code == 400
        self._nothing_decided(waiting_approval)

    def test_an_old_timestamp_is_refused(self, posted, linked, slack, client, waiting_approval):
        response = click(slack, client, slack_click(posted, user="U_OLGA"), timestamp=int(time.time()) - 301)
        assert response.status_code == 401 and b"too old" in response.content
        self._nothing_decided(waiting_approval)

    def test_a_malformed_timestamp_is_refused(self, posted, slack, client):
        body = b"payload=%7B%7D"
        headers = {"HTTP_X_SLACK_REQUEST_TIMESTAMP": "soon", "HTTP_X_SLACK_SIGNATURE": "v0=00"}
        response = client.post(INTERACTIONS, body, content_type="application/x-www-form-urlencoded", **headers)
        assert response.status_code == 401

    def test_a_replay_is_refused(self, posted, linked, slack, client, waiting_approval):
        from urllib.parse import urlencode

        body = urlencode({"payload": json.dumps(slack_click(posted, user="U_OLGA", action="agentops_reject"))}).encode()
        headers = slack.sign(body)
        first = client.post(INTERACTIONS, body, content_type="application/x-www-form-urlencoded", **headers)
        assert first.status_code == 200 and Approval.objects.get(pk=waiting_approval.pk).state == "rejected"
        again = client.post(INTERACTIONS, body, content_type="application/x-www-form-urlencoded", **headers)
        assert again.status_code == 401 and b"replay" in again.content
        assert SlackRequestSeen.objects.count() == 1 and len(slack.of("chat.update")) == 1

    def test_an_unlinked_slack_user_gets_an_ephemeral_refusal(self, posted, slack, client, waiting_approval):
        assert click(slack, client, slack_click(posted, user="U_STRANGER")).status_code == 200
        self._nothing_decided(waiting_approval)
        [reply] = slack.of("chat.postEphemeral")
        assert reply["user"] == "U_STRANGER" and reply["channel"] == "C0APPROVALS"
        assert "not linked" in reply["text"] and "/account/slack/" in reply["text"]
        assert not slack.of("chat.update")

    def test_a_linked_user_without_the_permission_gets_an_ephemeral_refusal(
            self, posted, linked, slack, client, waiting_approval):
        click(slack, client, slack_click(posted, user="U_VERA"))
        self._nothing_decided(waiting_approval)
        [reply] = slack.of("chat.postEphemeral")
        assert reply["user"] == "U_VERA" and "may not approve" in reply["text"]

    def test_a_link_of_another_workspace_is_not_the_same_person(self, posted, linked, slack, client, waiting_approval):
        click(slack, client, slack_click(posted, user="U_OLGA", team="T_OTHER"))
        self._nothing_decided(waiting_approval)
        assert "not linked" in slack.of("chat.postEphemeral")[0]["text"]

    def test_the_four_eyes_rule_holds_in_slack(self, posted, linked, slack, client, waiting_approval, settings):
        settings.AGENTOPS_FOUR_EYES = True
        click(slack, client, slack_click(posted, user="U_OTTO"))  # otto owns the run
        self._nothing_decided(waiting_approval)
        assert "Four-eyes" in slack.of("chat.postEphemeral")[0]["text"]

    def test_a_click_for_other_arguments_is_refused(self, posted, linked, slack, client, waiting_approval):
        # The message showed hash h1; a value naming another binding (as if the arguments changed) is refused.
        forged = json.dumps({"a": waiting_approval.pk, "h": "h2", "r": 1})
        click(slack, client, slack_click(posted, user="U_OLGA", value=forged))
        self._nothing_decided(waiting_approval)
        assert "changed since you opened it" in slack.of("chat.postEphemeral")[0]["text"]

    def test_a_click_on_a_request_decided_in_the_browser_is_refused_and_the_message_says_so(
            self, posted, linked, slack, client, waiting_approval, roles):
        from django.contrib.auth.models import User

        third = User.objects.create_user("theo", password="pw-theo")
        grant_role(third, "operator")
        run_services.approval_decide(approval_id=waiting_approval.pk, user=third, approve=True, expected_hash="h1",
                                     channel="inbox")
        click(slack, client, slack_click(posted, user="U_OLGA", action="agentops_reject"))
        assert Approval.objects.get(pk=waiting_approval.pk).state == "approved"
        assert "Already approved by theo" in slack.of("chat.postEphemeral")[0]["text"]
        assert "in the browser" in json.dumps(slack.of("chat.update")[-1]["blocks"])


class TestMessagesFollowTheRequest:
    def test_a_decision_in_the_browser_updates_the_message_at_the_next_tick(
            self, posted, slack, waiting_approval, second_operator):
        run_services.approval_decide(approval_id=waiting_approval.pk, user=second_operator, approve=False,
                                     expected_hash="h1", channel="inbox", comment="not now")
        outbox.tick()
        text = json.dumps(slack.of("chat.update")[-1]["blocks"])
        assert "Rejected* by olga" in text and "in the browser" in text and "not now" in text
        outbox.tick()
        assert len(slack.of("chat.update")) == 1  # once

    def test_a_decision_elsewhere_queues_the_refresh_once_it_commits(
            self, posted, slack, waiting_approval, second_operator, try_inline, django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks(execute=True):
            run_services.approval_decide(approval_id=waiting_approval.pk, user=second_operator, approve=True,
                                         expected_hash="h1", channel="api")
        text = json.dumps(slack.of("chat.update")[-1]["blocks"])  # no tick: the task ran
        assert "Approved* by olga" in text and "through the API" in text
        assert SlackMessage.objects.get().shown_state == "approved"

    def test_an_expired_request_says_expired(self, posted, slack, waiting_approval):
        Approval.objects.filter(pk=waiting_approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        outbox.tick()
        assert "Expired* undecided" in json.dumps(slack.of("chat.update")[-1]["blocks"])
        assert SlackMessage.objects.get().shown_state == "expired"


class TestLinkingAccounts:
    def test_the_profile_page_gives_a_one_time_code_that_links_the_slack_user_who_sends_it(
            self, slack, client_for, second_operator, client):
        page = client_for(second_operator).post("/account/slack/", {"action": "code"})
        assert page.status_code == 200
        code = page.content.decode().split("/agentops link ")[1].split("<")[0]
        client.logout()
        answer = slack.post(client, COMMANDS, {"command": "/agentops", "text": f"link {code}", "team_id": "T_TEAM",
                                               "user_id": "U_OLGA"})
        assert answer.status_code == 200 and answer.json()["response_type"] == "ephemeral"
        assert "decide as olga" in answer.json()["text"]
        link = SlackLink.objects.get(user=second_operator)
        assert (link.team_id, link.slack_user_id, link.slack_name) == ("T_TEAM", "U_OLGA", "olga")
        assert slack.of("users.info") == [{"user": "U_OLGA"}]
        with project_scope(None):   # a change to the user, not to a project: in no project's log
            assert AuditEvent.objects.filter(action="slack_account.linked", project=None).exists()
        again = slack.post(client, COMMANDS, {"command": "/agentops", "text": f"link {code}", "team_id": "T_TEAM",
                                              "user_id": "U_STRANGER"})
        assert "unknown, used or expired" in again.json()["text"]
        assert not SlackLink.objects.filter(slack_user_id="U_STRANGER").exists()
        shown = client_for(second_operator).get("/account/slack/").content.decode()
        assert "U_OLGA" in shown and "Unlink" in shown

    def test_an_expired_code_links_nobody(self, slack, second_operator):
        from notifications.models import SlackLinkCode

        code = linking.link_code_issue(user=second_operator)
        SlackLinkCode.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
        assert "expired" in linking.command(team_id="T", slack_user_id="U_OLGA", text=f"link {code}")
        assert not SlackLink.objects.exists()

    def test_a_bot_account_is_not_linked(self, slack, second_operator):
        code = linking.link_code_issue(user=second_operator)
        assert "person" in linking.command(team_id="T", slack_user_id="U_BOT", text=f"link {code}")
        assert not SlackLink.objects.exists()

    def test_a_command_with_a_bad_signature_is_refused(self, slack, client, second_operator):
        code = linking.link_code_issue(user=second_operator)
        answer = slack.post(client, COMMANDS, {"text": f"link {code}", "team_id": "T", "user_id": "U_OLGA"},
                            secret="wrong")
        assert answer.status_code == 401 and not SlackLink.objects.exists()

    def test_unlinking(self, client_for, second_operator, linked):
        client_for(second_operator).post("/account/slack/", {"action": "unlink"})
        assert not SlackLink.objects.filter(user=second_operator).exists()


class TestPlanRequests:
    def test_a_plan_request_shows_its_steps_and_binds_to_the_plan_hash(self, slack, operator, make_run):
        from notifications.slack import blocks
        from runs.models import PlanRevision

        run = make_run(status="awaiting_approval")
        steps = [{"id": "s1", "capability": "create_ticket", "arguments": {"title": "Door"}}]
        revision = PlanRevision.objects.create(run=run, number=2, accepted=True, reason_code="new_information",
                                               steps=steps)
        approval = Approval.objects.create(run=run, kind="plan", revision=revision, arguments={"steps": steps},
                                           plan_hash="p2", expires_at=timezone.now() + timedelta(hours=1))
        shown = blocks.request_blocks(approval, inbox_url="https://agentops.example.com/x")
        text = json.dumps(shown)
        assert "the plan of revision 2" in text and "Door" in text
        value = next(b for b in shown if b["type"] == "actions")["elements"][0]["value"]
        assert json.loads(value) == {"a": approval.pk, "h": "p2", "r": 2}

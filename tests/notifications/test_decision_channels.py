"""One binding on every channel: inbox, API, Slack and e-mail decide through runs.services.approval_decide."""
from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.db import connection

from core.errors import ServiceError
from core.models import AuditEvent
from core.project_access import grant_role
from core.projects import project_scope
from notifications import email_links, outbox, services
from notifications.models import Rule, SlackLink, SlackMessage
from notifications.slack import interactions
from runs import services as run_services
from runs.models import Approval, Run
from tests.notifications.conftest import slack_click
from tests.notifications.test_email_links import links_in

DECISIONS = ["step.approved", "step.rejected", "plan.approved", "plan.rejected"]


class TestTheApiAndTheInbox:
    def test_the_api_requires_expected_hash(self, api_for, second_operator, waiting_approval):
        url = f"/api/approvals/{waiting_approval.pk}/decide/"
        response = api_for(second_operator).post(url, {"decision": "approve"}, format="json")
        assert response.status_code == 400 and "expected_hash" in response.content.decode()
        assert Approval.objects.get(pk=waiting_approval.pk).state == "pending"

    def test_the_api_refuses_arguments_it_did_not_see(self, api_for, second_operator, waiting_approval):
        url = f"/api/approvals/{waiting_approval.pk}/decide/"
        response = api_for(second_operator).post(url, {"decision": "approve", "expected_hash": "not-h1"},
                                                  format="json")
        assert response.status_code == 409, response.content
        assert Approval.objects.get(pk=waiting_approval.pk).state == "pending"
        assert not AuditEvent.objects.filter(action__in=DECISIONS).exists()

    def test_the_api_refuses_another_revision_and_names_itself_in_the_audit_row(
            self, api_for, second_operator, waiting_approval):
        url = f"/api/approvals/{waiting_approval.pk}/decide/"
        api = api_for(second_operator)
        stale = api.post(url, {"decision": "approve", "expected_hash": "h1", "expected_revision": 2}, format="json")
        assert stale.status_code == 409
        assert api.post(url, {"decision": "approve", "expected_hash": "h1", "expected_revision": 1},
                        format="json").status_code == 200
        row = AuditEvent.objects.get(action="step.approved")
        assert row.details["channel"] == "api" and row.details["revision"] == 1

    def test_a_decision_made_outside_any_project_scope_is_audited_in_the_runs_project(
            self, waiting_approval):
        # A thread starts with no project in scope (a script, as the chaos bench's 100 deciders): the
        # audit row still belongs to the run's project, where its auditors look for it.
        from django.contrib.auth.models import User

        from core.projects import project_scope

        root = User.objects.create_superuser("root-outside", password="x")
        with project_scope(None):
            run_services.approval_decide(approval_id=waiting_approval.pk, user=root, approve=True,
                                         expected_hash="h1", channel="api")
        row = AuditEvent.objects.get(action="step.approved")
        assert row.project_id == waiting_approval.run.project_id is not None

    def test_the_inbox_names_itself_and_refuses_a_post_without_the_hash(
            self, client_for, second_operator, waiting_approval):
        url = f"/runs/approvals/{waiting_approval.pk}/decide/"
        olga = client_for(second_operator)
        assert olga.post(url, {"decision": "approve"}, HTTP_HX_REQUEST="true").status_code == 400
        assert olga.post(url, {"decision": "approve", "expected_hash": "h1"}, HTTP_HX_REQUEST="true").status_code == 200
        assert AuditEvent.objects.get(action="step.approved").details["channel"] == "inbox"

    def test_an_unknown_channel_is_refused(self, second_operator, waiting_approval):
        with pytest.raises(ServiceError, match="channel"):
            run_services.approval_decide(approval_id=waiting_approval.pk, user=second_operator, approve=True,
                                         expected_hash="h1", channel="carrier pigeon")


@pytest.mark.django_db(transaction=True)
class TestARaceBetweenChannels:
    def test_slack_email_inbox_and_api_at_once_exactly_one_wins(
            self, slack, inbox, operator, second_operator, waiting_approval, roles, settings):
        from django.contrib.auth.models import Group, User

        operators = Group.objects.get(name="operator")
        theo, una = (User.objects.create_user(name, password="pw-" + name) for name in ("theo", "una"))
        for user in (theo, una):
            grant_role(user, operators.name)
        channel = services.channel_save(user=operator, name="slack", url="slackapp://C0APPROVALS")
        rule = services.rule_save(user=operator, name="ask", event="approval_requested", channel_ids=[channel.pk])
        Rule.objects.filter(pk=rule.pk).update(created_at=waiting_approval.requested_at - timedelta(seconds=1))
        outbox.tick()
        message = {**slack.of("chat.postMessage")[0], "ts": SlackMessage.objects.get().ts}
        SlackLink.objects.create(user=second_operator, team_id="T_TEAM", slack_user_id="U_OLGA")
        settings.AGENTOPS_BASE_URL = "http://testserver"
        token = email_links.issue(approval=waiting_approval, user=theo)["approve"].split("/decide/")[1].split("/")[0]
        outcomes: dict[str, str] = {}
        barrier = threading.Barrier(4)

        project_id = waiting_approval.run.project_id

        def attempt(name, decide):
            try:
                barrier.wait()
                with project_scope(project_id):   # as a request in the project does (a thread starts in none)
                    outcomes[name] = str(decide())
            except ServiceError as exc:
                outcomes[name] = "refused: " + exc.message
            finally:
                connection.close()

        contenders = {
            "slack": lambda: interactions.handle(slack_click(message, user="U_OLGA", action="agentops_reject")),
            "email": lambda: email_links.decide(token=token, user=theo, approve=True).state,
            "api": lambda: run_services.approval_decide(approval_id=waiting_approval.pk, user=una, approve=True,
                                                        expected_hash="h1", channel="api").state,
            "inbox": lambda: run_services.approval_decide(approval_id=waiting_approval.pk, user=una, approve=False,
                                                          expected_hash="h1", channel="inbox").state,
        }
        threads = [threading.Thread(target=attempt, args=item) for item in contenders.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        won = [name for name, outcome in outcomes.items() if outcome in ("approved", "rejected", "decided")]
        assert len(outcomes) == 4 and len(won) == 1, outcomes
        [row] = AuditEvent.objects.filter(action__in=DECISIONS)
        assert row.details["channel"] == won[0]
        approval = Approval.objects.get(pk=waiting_approval.pk)
        assert approval.state == ("rejected" if won[0] in ("slack", "inbox") else "approved")
        losers = [o for name, o in outcomes.items() if name != won[0] and name != "slack"]
        assert all(o.startswith("refused: Already") for o in losers), outcomes


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
class TestThroughARealWorker:
    @pytest.fixture
    def registry(self, db):
        from capabilities.kinds.python.sync import python_capabilities_sync

        python_capabilities_sync()

    def _paused_run(self, operator, wait_until):
        run = run_services.run_start(
            owner=operator, goal="Open a ticket", planner="scripted",
            planner_config={"plans": [[{"capability": "create_ticket", "arguments": {"title": "Printer on fire"}}]]},
            completion={"capability": "create_ticket", "path": "ticket_id", "exists": True},
            budgets={"deadline_s": 120})
        wait_until(lambda: Run.objects.get(pk=run.pk).status == "awaiting_approval", message="the approval request")
        return run, Approval.objects.get(run=run, state="pending")

    def test_a_run_paused_at_approval_resumes_after_a_slack_click(
            self, celery_worker, registry, slack, operator, second_operator, client, wait_until):
        from capabilities.models import Ticket

        channel = services.channel_save(user=operator, name="slack", url="slackapp://C0APPROVALS")
        services.rule_save(user=operator, name="ask", event="approval_requested", channel_ids=[channel.pk])
        SlackLink.objects.create(user=second_operator, team_id="T_TEAM", slack_user_id="U_OLGA")
        run, approval = self._paused_run(operator, wait_until)
        outbox.tick()
        message = {**slack.of("chat.postMessage")[0], "ts": SlackMessage.objects.get().ts}
        assert json.loads(next(b for b in message["blocks"] if b["type"] == "actions")["elements"][0]["value"])["h"] \
            == approval.arguments_hash
        response = slack.post(client, "/notifications/slack/interactions/",
                              {"payload": json.dumps(slack_click(message, user="U_OLGA"))})
        assert response.status_code == 200
        wait_until(lambda: Run.objects.get(pk=run.pk).status == "completed", message="completion after the click")
        assert Ticket.objects.filter(title="Printer on fire").count() == 1

    def test_a_run_paused_at_approval_resumes_after_an_emailed_link(
            self, celery_worker, registry, inbox, operator, second_operator, client_for, wait_until, settings):
        settings.AGENTOPS_BASE_URL = "http://testserver"
        second_operator.email = "olga@example.com"
        second_operator.save()
        channel = services.channel_save(user=operator, name="mail",
                                        url=inbox.url.replace("to=ops@example.com", "to=olga@example.com"))
        services.rule_save(user=operator, name="ask", event="approval_requested", channel_ids=[channel.pk])
        run, _approval = self._paused_run(operator, wait_until)
        outbox.tick()

        link = links_in(inbox.messages[0]["content"])["approve"].removeprefix("http://testserver")
        assert client_for(second_operator).post(link, {"decision": "approve"}).status_code == 200
        wait_until(lambda: Run.objects.get(pk=run.pk).status == "completed", message="completion after the link")
        assert AuditEvent.objects.get(action="step.approved").details["channel"] == "email"

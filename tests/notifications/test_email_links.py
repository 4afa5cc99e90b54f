"""Decision links in approval mails: aiosmtpd receives the mail; the links are signed, single-use, expiring."""
from __future__ import annotations

import email
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from core.models import AuditEvent
from core.project_access import grant_role
from notifications import outbox, services
from notifications.models import EmailDecisionLink, Rule
from runs.models import Approval


@pytest.fixture
def mailed(inbox, operator, second_operator, waiting_approval, settings):
    """The request mailed to olga (an approver) and to a list no user has; returns olga's links."""
    settings.AGENTOPS_BASE_URL = "http://testserver"
    second_operator.email = "olga@example.com"
    second_operator.save()
    url = inbox.url.replace("to=ops@example.com", "to=olga@example.com,list@example.com")
    channel = services.channel_save(user=operator, name="mail", url=url)
    rule = services.rule_save(user=operator, name="ask", event="approval_requested", channel_ids=[channel.pk])
    Rule.objects.filter(pk=rule.pk).update(created_at=waiting_approval.requested_at)
    assert outbox.tick()["sent"] == 1
    return links_in(next(m for m in inbox.messages if m["to"] == ["olga@example.com"])["content"])


def text_of(mail: str) -> str:
    return email.message_from_string(mail).get_payload(decode=True).decode()


def links_in(mail: str) -> dict[str, str]:
    text = text_of(mail)
    return {d: re.search(rf"{d.capitalize()}: (http://testserver\S+)", text).group(1) for d in ("approve", "reject")}


def path(url: str) -> str:
    return url.removeprefix("http://testserver")


class TestTheMail:
    def test_each_approver_gets_links_of_their_own_and_others_the_inbox_link(self, mailed, inbox, waiting_approval):
        assert sorted(m["to"][0] for m in inbox.messages) == ["list@example.com", "olga@example.com"]
        plain = text_of(next(m for m in inbox.messages if m["to"] == ["list@example.com"])["content"])
        assert "/notifications/decide/" not in plain and f"#approval-{waiting_approval.pk}" in plain
        olga = text_of(next(m for m in inbox.messages if m["to"] == ["olga@example.com"])["content"])
        assert "signed in as olga" in olga and "works once" in olga
        link = EmailDecisionLink.objects.get()
        assert link.user.username == "olga" and link.expires_at <= waiting_approval.expires_at
        assert mailed["approve"].split("?")[0] == mailed["reject"].split("?")[0]  # one row: either spends both


class TestDecidingByLink:
    def test_the_link_asks_for_a_sign_in_first(self, mailed, client):
        response = client.get(path(mailed["approve"]))
        assert response.status_code == 302 and response["Location"].startswith("/login/")

    def test_opening_the_link_decides_nothing_and_the_post_decides_once(
            self, mailed, client_for, second_operator, waiting_approval):
        olga = client_for(second_operator)
        page = olga.get(path(mailed["approve"]))
        assert page.status_code == 200 and b"Approve create_ticket?" in page.content and b"Printer" in page.content
        assert Approval.objects.get(pk=waiting_approval.pk).state == "pending"
        done = olga.post(path(mailed["approve"]), {"decision": "approve", "comment": "from my phone"})
        assert done.status_code == 200 and b"The run continues" in done.content
        approval = Approval.objects.get(pk=waiting_approval.pk)
        assert approval.state == "approved" and approval.decided_by == second_operator
        assert approval.comment == "from my phone"
        assert AuditEvent.objects.get(action="step.approved").details["channel"] == "email"
        again = olga.post(path(mailed["reject"]), {"decision": "reject"})
        assert again.status_code == 403 and b"used already" in again.content
        assert Approval.objects.get(pk=waiting_approval.pk).state == "approved"

    def test_a_link_used_by_another_user_is_refused(self, mailed, client_for, roles, waiting_approval):
        from django.contrib.auth.models import User

        theo = User.objects.create_user("theo", password="pw-theo")
        grant_role(theo, "operator")
        forwarded = client_for(theo)
        page = forwarded.get(path(mailed["approve"]))
        assert page.status_code == 403 and b"sent to another person" in page.content
        assert b'name="decision"' not in page.content
        assert forwarded.post(path(mailed["approve"]), {"decision": "approve"}).status_code == 403
        assert Approval.objects.get(pk=waiting_approval.pk).state == "pending"
        assert EmailDecisionLink.objects.get().used_at is None

    def test_an_expired_link_is_refused(self, mailed, client_for, second_operator, waiting_approval):
        EmailDecisionLink.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
        response = client_for(second_operator).post(path(mailed["approve"]), {"decision": "approve"})
        assert response.status_code == 403 and b"expired" in response.content
        assert Approval.objects.get(pk=waiting_approval.pk).state == "pending"

    def test_a_tampered_link_is_refused(self, mailed, client_for, second_operator):
        token = path(mailed["approve"]).split("/")[3]
        response = client_for(second_operator).get(f"/notifications/decide/{token[:-3]}abc/")
        assert response.status_code == 400 and b"not valid" in response.content

    def test_changed_arguments_are_refused(self, mailed, client_for, second_operator, waiting_approval):
        # The mail showed hash h1; the request now binds to something else.
        Approval.objects.filter(pk=waiting_approval.pk).update(arguments_hash="h2")
        response = client_for(second_operator).post(path(mailed["approve"]), {"decision": "approve"})
        assert response.status_code == 409 and b"changed since you opened it" in response.content
        assert Approval.objects.get(pk=waiting_approval.pk).state == "pending"
        assert EmailDecisionLink.objects.get().used_at is None  # a refused decision does not spend the link

    def test_the_four_eyes_rule_is_shown_before_the_click(self, inbox, operator, waiting_approval, settings,
                                                           client_for):
        from notifications import email_links

        settings.AGENTOPS_FOUR_EYES = True
        settings.AGENTOPS_BASE_URL = "http://testserver"
        links = email_links.issue(approval=waiting_approval, user=operator)  # otto owns the run
        page = client_for(operator).get(path(links["approve"]))
        assert page.status_code == 403 and b"Four-eyes rule" in page.content and b'name="decision"' not in page.content

"""The approval inbox: pending requests with their policy, decided in place."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core.project_access import grant_role
from runs.models import Approval
from tests.binding import bound_hash


@pytest.fixture
def pending_step(make_run, make_revision, make_step, make_attempt, make_approval, make_capability, second_operator):
    """A run by Olga paused before a side-effecting create_ticket step."""
    version = make_capability("create_ticket", side_effect="write", requires_approval=True, idempotent=True,
                              permission="capabilities.create_ticket", timeout_s=5, retry_max_attempts=2)
    run = make_run(owner=second_operator, goal="Open a ticket for the broken VPN", status="awaiting_approval")
    rev = make_revision(run, steps=[{"id": "s1", "capability": "search_documents", "arguments": {"q": "vpn"}},
                                    {"id": "s2", "capability": "create_ticket", "arguments": {"title": "VPN"}}])
    first = make_step(rev, index=0, key="s1", status="succeeded")
    make_attempt(first)
    step = make_step(rev, index=1, key="s2", capability="create_ticket", version=version,
                     arguments={"title": "VPN down", "labels": {"team": "net", "tags": ["p1"]}},
                     arguments_hash="hash-vpn", status="awaiting_approval", approval_state="pending")
    return make_approval(run, revision=rev, step=step)


class TestApprovalInbox:
    url = "/runs/approvals/"

    def test_it_redirects_anonymous_users_to_login(self, client, db):
        response = client.get(self.url)
        assert response.status_code == 302 and response["Location"].startswith("/login/")

    def test_it_shows_an_empty_state(self, client_for, viewer):
        assert b"Nothing is waiting for approval." in client_for(viewer).get(self.url).content

    def test_it_shows_a_step_request_with_policy_arguments_and_prior_steps(self, client_for, operator,
                                                                           pending_step):
        body = client_for(operator).get(self.url).content.decode()
        assert "Open a ticket for the broken VPN" in body
        assert f'href="/runs/{pending_step.run_id}/"' in body
        for text in ("create_ticket", "write", "capabilities.create_ticket", "5.0 s", "2 attempts",
                     "VPN down", "&quot;team&quot;: &quot;net&quot;", "succeeded", "waiting"):
            assert text in body, text
        prior = body[body.index("Steps before it"):]
        assert "<code>s1</code> search_documents" in prior
        assert 'name="expected_hash" value="hash-vpn"' in body
        assert "Approve" in body and "Reject" in body

    def test_it_shows_viewers_the_inbox_read_only(self, client_for, viewer, pending_step):
        body = client_for(viewer).get(self.url).content.decode()
        assert "VPN down" in body
        assert 'value="approve"' not in body
        assert "Read-only" in body

    def test_it_shows_a_plan_request_with_side_effecting_steps_marked(self, client_for, operator, make_run,
                                                                      make_revision, make_approval,
                                                                      make_capability):
        make_capability("send_notification", side_effect="external")
        make_capability("search_documents", side_effect="none")
        run = make_run(status="awaiting_approval", require_plan_approval=True)
        rev = make_revision(run, needs_approval=True, steps=[
            {"id": "s1", "capability": "search_documents", "arguments": {"q": "x"}},
            {"id": "s2", "capability": "send_notification", "arguments": {"to": "ops"}, "depends_on": ["s1"]}])
        make_approval(run, revision=rev, kind="plan", plan_hash="plan-h")
        body = client_for(operator).get(self.url).content.decode()
        assert "Plan (revision 1)" in body
        assert "side effect: external" in body
        assert body.count("side effect:") == 1
        assert 'name="expected_hash" value="plan-h"' in body

    def test_it_lists_oldest_first_and_paginates(self, client_for, viewer, make_run, make_revision, make_step,
                                                 make_approval):
        for i in range(25):
            run = make_run(goal=f"goal-{i:02d}", status="awaiting_approval")
            rev = make_revision(run)
            approval = make_approval(run, revision=rev, step=make_step(rev))
            Approval.objects.filter(pk=approval.pk).update(requested_at=timezone.now() - timedelta(minutes=100 - i))
        body = client_for(viewer).get(self.url).content.decode()
        assert body.index("goal-00") < body.index("goal-01") and "goal-24" not in body
        assert "Page 1 of 2" in body
        assert "goal-24" in client_for(viewer).get(self.url, {"page": 2}).content.decode()

    def test_it_escapes_arguments(self, client_for, viewer, make_run, make_revision, make_step, make_approval):
        run = make_run(status="awaiting_approval")
        rev = make_revision(run)
        make_approval(run, revision=rev, step=make_step(rev, arguments={"title": "<script>alert(1)</script>"}))
        body = client_for(viewer).get(self.url).content.decode()
        assert "<script>alert(1)" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body

    @pytest.mark.parametrize("count", [1, 30])
    def test_it_issues_a_bounded_number_of_queries(self, client_for, operator, make_run, make_revision,
                                                   make_step, make_approval, count,
                                                   django_assert_max_num_queries):
        for i in range(count):
            run = make_run(status="awaiting_approval")
            rev = make_revision(run, steps=[{"id": "s1", "capability": "search_documents"}])
            if i % 2:
                make_approval(run, revision=rev, kind="plan")
            else:
                make_approval(run, revision=rev, step=make_step(rev))
        client = client_for(operator)
        with django_assert_max_num_queries(12):
            assert client.get(self.url).status_code == 200


class TestApprovalDecide:
    def url(self, approval):
        return f"/runs/approvals/{approval.pk}/decide/"

    def post(self, client, approval, decision="approve", **extra):
        data = {"decision": decision, "comment": "looks right", "expected_hash": approval.arguments_hash, **extra}
        return client.post(self.url(approval), data, headers={"HX-Request": "true"})

    def test_it_approves_in_place_and_updates_the_badge(self, client_for, operator, pending_step):
        response = self.post(client_for(operator), pending_step)
        body = response.content.decode()
        assert response.status_code == 200
        assert body.lstrip().startswith(f'<article class="card approval" id="approval-{pending_step.pk}"')
        assert "Approved</strong> by otto" in body and "looks right" in body
        assert 'id="approval-badge"' in body and 'hx-swap-oob="true"' in body and ">0</span>" in body
        assert "approvals-changed" in response["HX-Trigger"]
        pending_step.refresh_from_db()
        assert pending_step.state == "approved" and pending_step.decided_by.username == "otto"
        assert pending_step.step.approval_state == "approved"

    def test_it_asks_to_confirm_a_rejection_first(self, client_for, operator, pending_step):
        response = self.post(client_for(operator), pending_step, "reject", comment="wrong team")
        body = response.content.decode()
        assert response.status_code == 200 and "Yes, reject step s2 (create_ticket)" in body
        assert 'name="confirm" value="yes"' in body
        assert 'value="wrong team"' in body
        pending_step.refresh_from_db()
        assert pending_step.state == "pending"

    def test_it_asks_to_confirm_a_rejection_without_javascript(self, client_for, operator, pending_step):
        response = client_for(operator).post(self.url(pending_step), {
            "decision": "reject", "expected_hash": pending_step.arguments_hash})
        assert response.status_code == 200 and b"Confirm the rejection" in response.content
        assert response.content.count(b'id="approval-badge"') == 1

    def test_it_names_the_step_in_the_buttons(self, client_for, operator, pending_step):
        body = client_for(operator).get("/runs/approvals/").content.decode()
        assert f"Approve<span class=\"visually-hidden\"> step s2 (create_ticket) of run #{pending_step.run_id}" in body

    def test_it_rejects_with_a_comment(self, client_for, operator, pending_step):
        response = self.post(client_for(operator), pending_step, "reject", comment="wrong team", confirm="yes")
        assert b"Rejected</strong> by otto" in response.content and b"wrong team" in response.content
        pending_step.refresh_from_db()
        assert pending_step.state == "rejected" and pending_step.comment == "wrong team"

    def test_it_redirects_without_htmx(self, client_for, operator, pending_step):
        response = client_for(operator).post(self.url(pending_step), {
            "decision": "approve", "expected_hash": "hash-vpn"}, follow=True)
        assert response.redirect_chain[-1][0] == "/runs/approvals/"
        assert b"Request approved." in response.content

    def test_it_refuses_a_forged_post_from_a_viewer(self, client_for, viewer, pending_step):
        response = self.post(client_for(viewer), pending_step)
        assert response.status_code == 403
        assert b"You do not have permission to approve or reject requests." in response.content
        response = client_for(viewer).post(self.url(pending_step), {"decision": "approve"})
        assert response.status_code == 403
        pending_step.refresh_from_db()
        assert pending_step.state == "pending"

    def test_it_names_who_decided_first_on_a_concurrent_decision(self, client_for, operator, registry_admin,
                                                                 pending_step, roles):

        from runs import services

        third = registry_admin
        grant_role(third, "operator")
        services.approval_decide(approval_id=pending_step.pk, user=third, approve=False, comment="no",
                                 channel="api", expected_hash=bound_hash(pending_step.pk))
        response = self.post(client_for(operator), pending_step)
        body = response.content.decode()
        assert response.status_code == 409
        assert "Already rejected by rita at" in body
        assert 'role="alert"' in body
        assert 'value="approve"' not in body  # the card now shows the outcome, not the form

    def test_it_refuses_when_the_arguments_changed_since_shown(self, client_for, operator, pending_step):
        response = self.post(client_for(operator), pending_step, expected_hash="what-i-saw-before")
        assert response.status_code == 409
        assert b"The request changed since you opened it" in response.content
        pending_step.refresh_from_db()
        assert pending_step.state == "pending"

    def test_it_enforces_four_eyes(self, client_for, second_operator, pending_step, settings):
        settings.AGENTOPS_FOUR_EYES = True
        response = self.post(client_for(second_operator), pending_step)  # Olga owns the run
        assert response.status_code == 403
        assert b"Four-eyes rule" in response.content
        pending_step.refresh_from_db()
        assert pending_step.state == "pending"

    def test_it_lets_another_operator_decide_under_four_eyes(self, client_for, operator, pending_step, settings):
        settings.AGENTOPS_FOUR_EYES = True
        assert self.post(client_for(operator), pending_step).status_code == 200

    def test_it_requires_a_decision(self, client_for, operator, pending_step):
        response = self.post(client_for(operator), pending_step, decision="maybe")
        assert response.status_code == 400 and b"Choose approve or reject." in response.content

    def test_it_requires_a_csrf_token(self, operator, pending_step):
        from django.test import Client

        client = Client(enforce_csrf_checks=True)
        client.force_login(operator)
        response = client.post(self.url(pending_step), {"decision": "approve"}, headers={"HX-Request": "true"})
        assert response.status_code == 403
        pending_step.refresh_from_db()
        assert pending_step.state == "pending"


class TestApprovalBadge:
    def test_it_counts_pending_requests(self, client_for, viewer, pending_step):
        response = client_for(viewer).get("/runs/approvals/badge/")
        assert response.status_code == 200
        assert b'id="approval-badge"' in response.content and b">1</span>" in response.content


@pytest.mark.django_db
class TestApprovalCards:
    def test_a_card_shows_the_earlier_of_ttl_and_the_runs_deadline(self, client_for, operator, pending_step):
        from django.utils import timezone

        from runs.models import Run

        deadline = timezone.now() + timezone.timedelta(minutes=3)
        Run.objects.filter(pk=pending_step.run_id).update(deadline_at=deadline)
        body = client_for(operator).get("/runs/approvals/").content.decode()
        assert f'data-countdown="{timezone.localtime(deadline):%Y-%m-%dT%H:%M:%S}' in body
        assert "(at the run&#x27;s deadline)" in body

    def test_the_inbox_and_badge_refresh_themselves(self, client_for, operator, pending_step):
        body = client_for(operator).get("/runs/approvals/").content.decode()
        assert 'hx-trigger="every 4s, approvals-changed from:body" hx-swap="morph:outerHTML"' in body
        assert 'hx-get="/runs/approvals/badge/" hx-trigger="every 5s' in body
        assert "hx-on" not in body and "<script>" not in body

    def test_approving_a_plan_says_which_steps_will_ask_again(
            self, client_for, operator, make_run, make_revision, make_approval, make_capability):
        make_capability("create_ticket", side_effect="write", requires_approval=True)
        run = make_run(status="awaiting_approval")
        rev = make_revision(run, steps=[{"id": "s1", "capability": "create_ticket", "arguments": {"title": "x"}}])
        approval = make_approval(run, revision=rev, kind="plan", plan_hash="plan-h")
        response = client_for(operator).post(f"/runs/approvals/{approval.pk}/decide/", {
            "decision": "approve", "expected_hash": "plan-h"}, headers={"HX-Request": "true"})
        body = response.content.decode()
        assert "Approving the plan does not approve its steps" in body and "<code>s1</code> (create_ticket)" in body

    def test_keep_it_waiting_returns_the_card(self, client_for, operator, pending_step):
        response = client_for(operator).get(f"/runs/approvals/{pending_step.pk}/", headers={"HX-Request": "true"})
        assert response.status_code == 200 and b"Approve<span" in response.content
        assert client_for(operator).get(f"/runs/approvals/{pending_step.pk}/").status_code == 302

"""Escalation (approval_undecided rules) and rules that start when they are made."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core.errors import InvalidInput
from notifications import outbox, services
from notifications.models import Delivery, Rule
from runs.models import Approval, RunLabel


@pytest.fixture
def channels(operator, inbox):
    first = services.channel_save(user=operator, name="on call", url=inbox.url)
    leads = services.channel_save(user=operator, name="leads",
                                  url=inbox.url.replace("to=ops@example.com", "to=leads@example.com"))
    return first, leads


def _rule(operator, channel, event, *, made_at, **kw):
    rule = services.rule_save(user=operator, name=kw.pop("name", event), event=event, channel_ids=[channel.pk], **kw)
    Rule.objects.filter(pk=rule.pk).update(created_at=made_at)
    return rule


class TestEscalation:
    def test_an_undecided_request_asks_the_next_group_after_n_minutes(
            self, operator, channels, inbox, waiting_approval, client_for, second_operator):
        first, leads = channels
        made = waiting_approval.requested_at - timedelta(seconds=1)
        _rule(operator, first, "approval_requested", made_at=made)
        _rule(operator, leads, "approval_undecided", made_at=made, params={"after_minutes": 30})
        asked = waiting_approval.requested_at
        assert outbox.tick(asked + timedelta(seconds=5))["sent"] == 1  # the first group only
        assert outbox.tick(asked + timedelta(minutes=29))["queued"] == 0
        assert outbox.tick(asked + timedelta(minutes=31))["sent"] == 1
        assert outbox.tick(asked + timedelta(minutes=45))["queued"] == 0  # once
        mail = next(m for m in inbox.messages if m["to"] == ["leads@example.com"])["content"]
        assert f"Still undecided after 30 min: run #{waiting_approval.run_id}" in mail
        # The inbox shows who was asked and when.
        card = client_for(second_operator).get("/runs/approvals/").content.decode()
        assert "Asked 2 times" in card and "on call (approval_requested)" in card
        assert "leads (approval_undecided, escalation)" in card

    def test_rules_per_capability(self, operator, channels, waiting_approval):
        _first, leads = channels
        made = waiting_approval.requested_at
        _rule(operator, leads, "approval_undecided", made_at=made, params={"after_minutes": 5,
                                                                          "capabilities": ["delete_everything"]})
        assert outbox.tick(made + timedelta(minutes=6))["queued"] == 0
        _rule(operator, leads, "approval_undecided", made_at=made, name="tickets",
              params={"after_minutes": 5, "capabilities": ["create_ticket"]})
        assert outbox.tick(made + timedelta(minutes=6))["queued"] == 1

    def test_rules_per_label(self, operator, channels, waiting_approval):
        _first, leads = channels
        made = waiting_approval.requested_at
        _rule(operator, leads, "approval_undecided", made_at=made, params={"after_minutes": 5},
              labels={"team": "payments"})
        assert outbox.tick(made + timedelta(minutes=6))["queued"] == 0
        RunLabel.objects.create(run=waiting_approval.run, key="team", value="payments")
        assert outbox.tick(made + timedelta(minutes=6))["queued"] == 1

    def test_a_decided_or_expired_request_is_not_escalated(self, operator, channels, waiting_approval):
        _first, leads = channels
        made = waiting_approval.requested_at
        _rule(operator, leads, "approval_undecided", made_at=made, params={"after_minutes": 5})
        Approval.objects.filter(pk=waiting_approval.pk).update(expires_at=made + timedelta(minutes=4))
        assert outbox.tick(made + timedelta(minutes=6))["queued"] == 0

    @pytest.mark.parametrize("params,field", [({"after_minutes": 0}, "after_minutes"),
                                              ({"after_minutes": "soon"}, "after_minutes"),
                                              ({"capabilities": "create_ticket"}, "capabilities"),
                                              ({"within_s": 5}, "within_s")])
    def test_bad_settings_are_refused(self, operator, channels, params, field):
        with pytest.raises(InvalidInput) as caught:
            services.rule_save(user=operator, name="x", event="approval_undecided", params=params,
                               channel_ids=[channels[0].pk])
        assert f"params.{field}" in caught.value.fields

    def test_the_rule_form_offers_escalation(self, client_for, operator, channels):
        page = client_for(operator).post("/notifications/", {
            "form": "rule", "rule-name": "escalate", "rule-event": "approval_undecided",
            "rule-channels": [channels[1].pk], "rule-after_minutes": "15", "rule-capabilities": "create_ticket"})
        assert page.status_code == 302
        assert Rule.objects.get(name="escalate").params == {"after_minutes": 15, "capabilities": ["create_ticket"]}


class TestRulesStartWhenMade:
    def test_a_request_asked_before_the_rule_is_not_sent(self, operator, channels, waiting_approval):
        _rule(operator, channels[0], "approval_requested", made_at=waiting_approval.requested_at + timedelta(seconds=1))
        assert outbox.tick()["queued"] == 0

    def test_a_request_already_expiring_when_the_rule_was_made_is_not_sent(self, operator, channels,
                                                                            waiting_approval):
        now = timezone.now()
        Approval.objects.filter(pk=waiting_approval.pk).update(expires_at=now + timedelta(minutes=5))
        _rule(operator, channels[0], "approval_expiring", made_at=now, params={"within_s": 600})
        assert outbox.tick(now + timedelta(seconds=1))["queued"] == 0

    def test_a_request_coming_within_the_window_after_the_rule_is_sent(self, operator, channels, waiting_approval):
        now = timezone.now()
        Approval.objects.filter(pk=waiting_approval.pk).update(expires_at=now + timedelta(minutes=30))
        _rule(operator, channels[0], "approval_expiring", made_at=now, params={"within_s": 600})
        assert outbox.tick(now + timedelta(minutes=21))["queued"] == 1

    def test_a_stall_rate_counts_only_runs_finished_after_the_rule(self, operator, channels, make_run):
        for _ in range(5):
            make_run(status="stopped", stop_reason="stalled", finished_at=timezone.now() - timedelta(minutes=2))
        _rule(operator, channels[0], "stall_rate", made_at=timezone.now() - timedelta(minutes=1),
              params={"threshold": 0.1, "window_s": 3600, "min_runs": 1})
        assert outbox.tick()["queued"] == 0
        make_run(status="stopped", stop_reason="stalled")
        assert outbox.tick()["queued"] == 1

    def test_a_budget_passed_by_a_run_started_before_the_rule_is_not_sent(self, operator, channels, make_run):
        make_run(status="running", tool_calls=19, budgets={"max_tool_calls": 20, "deadline_s": 600})
        _rule(operator, channels[0], "budget_threshold", made_at=timezone.now(), params={"percent": 50})
        assert outbox.tick()["queued"] == 0
        assert not Delivery.objects.exists()

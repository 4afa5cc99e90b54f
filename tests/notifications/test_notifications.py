"""Notification rules, the outbox and its channels: against a real SMTP server and a real webhook receiver."""
from __future__ import annotations

import threading
from datetime import timedelta
from http.server import ThreadingHTTPServer

import pytest
from django.utils import timezone

from core.errors import InvalidInput, NotAllowed
from core.models import AuditEvent
from notifications import outbox, services
from notifications.models import Channel, Delivery, Rule
from runs.models import RunLabel
from tests.notifications.conftest import Hook


@pytest.fixture
def channel(operator, inbox):
    return services.channel_save(user=operator, name="ops mail", url=inbox.url)


def _rule(operator, channel, event, *, made_ago=timedelta(hours=1), **kw):
    """A rule made `made_ago` (a rule notifies only what happens after it was made)."""
    rule = services.rule_save(user=operator, name=kw.pop("name", event), event=event,
                              channel_ids=[channel.pk], **kw)
    Rule.objects.filter(pk=rule.pk).update(created_at=timezone.now() - made_ago)
    rule.refresh_from_db()
    return rule


class TestRulesAndChannels:
    def test_saving_is_audited(self, operator, channel):
        rule = _rule(operator, channel, "run_stopped", params={"stop_reasons": ["stalled"]})
        assert rule.channels.get() == channel
        actions = set(AuditEvent.objects.values_list("action", flat=True))
        assert {"notification_channel.saved", "notification_rule.saved"} <= actions
        services.rule_delete(user=operator, rule_id=rule.pk)
        assert AuditEvent.objects.filter(action="notification_rule.deleted", target_id=str(rule.pk)).exists()

    def test_only_managers_may_change_them(self, viewer, channel):
        with pytest.raises(NotAllowed):
            services.channel_save(user=viewer, name="x", url="json://hooks.example.com/x")
        with pytest.raises(NotAllowed):
            _rule(viewer, channel, "approval_requested")

    @pytest.mark.parametrize("event, params, field", [
        ("budget_threshold", {"percent": 150}, "params.percent"),
        ("budget_threshold", {"budgets": ["nope"]}, "params.budgets"),
        ("run_stopped", {"stop_reasons": ["exploded"]}, "params.stop_reasons"),
        ("stall_rate", {"threshold": 2}, "params.threshold"),
        ("stall_rate", {"window_s": 5}, "params.window_s"),
        ("approval_expiring", {"within_s": -1}, "params.within_s"),
        ("approval_requested", {"surprise": 1}, "params.surprise"),
        ("no_such_event", {}, "event"),
    ])
    def test_bad_settings_are_refused_field_by_field(self, operator, channel, event, params, field):
        with pytest.raises(InvalidInput) as caught:
            _rule(operator, channel, event, params=params)
        assert field in caught.value.fields

    @pytest.mark.parametrize("url, message", [
        ("mailto://${DATABASE_URL}@example.com", "only variables named AGENTOPS_NOTIFY_"),
        ("notaservice://whatever", "Apprise does not understand"),
        ("json://127.0.0.1:9/hook", "egress guard refuses"),
        ("", "enter an Apprise URL"),
    ])
    def test_bad_channel_urls_are_refused_with_the_reason(self, operator, url, message, settings):
        settings.AGENTOPS_HTTP_ALLOW_PRIVATE = False
        with pytest.raises(InvalidInput) as caught:
            services.channel_save(user=operator, name="bad", url=url)
        assert message in caught.value.fields["url"]


class TestEventsReachPeople:
    def test_an_approval_request_is_emailed_once_with_a_link_to_its_page(self, operator, channel, inbox,
                                                                         waiting_approval, settings):
        settings.AGENTOPS_BASE_URL = "https://agentops.example.com"
        _rule(operator, channel, "approval_requested")
        assert outbox.tick() == {"queued": 1, "sent": 1, "failed": 0}
        assert outbox.tick() == {"queued": 0, "sent": 0, "failed": 0}  # the same event is not sent twice
        assert len(inbox.messages) == 1
        mail = inbox.messages[0]
        assert mail["to"] == ["ops@example.com"]
        assert f"Approval needed: run #{waiting_approval.run_id}" in mail["content"]
        assert f"https://agentops.example.com/runs/approvals/#approval-{waiting_approval.pk}" in mail["content"]
        assert "decide" not in mail["content"]  # a link to the page, never an approve action
        delivery = Delivery.objects.get()
        assert delivery.status == "sent" and delivery.attempts == 1 and delivery.run_id == waiting_approval.run_id

    def test_an_approval_about_to_expire(self, operator, channel, inbox, waiting_approval):
        _rule(operator, channel, "approval_expiring", params={"within_s": 600})
        assert outbox.tick()["queued"] == 0  # expires in an hour
        waiting_approval.expires_at = timezone.now() + timedelta(minutes=5)
        waiting_approval.save(update_fields=["expires_at"])
        assert outbox.tick()["sent"] == 1
        assert "Approval expires soon" in inbox.messages[0]["content"]

    def test_runs_stopped_for_the_chosen_reasons_reach_a_webhook(self, operator, webhook, make_run):
        hook = services.channel_save(user=operator, name="hook", url=webhook.url)
        rule = _rule(operator, hook, "run_stopped", params={"stop_reasons": ["stalled", "budget_exhausted"]})
        Rule.objects.filter(pk=rule.pk).update(created_at=timezone.now() - timedelta(minutes=1))
        stalled = make_run(goal="stuck", status="stopped", stop_reason="stalled")
        make_run(goal="fine", status="completed")
        over = make_run(goal="costly", status="stopped", stop_reason="budget_exhausted:cost")
        assert outbox.tick()["sent"] == 2
        titles = sorted(p["title"] for p in webhook.payloads())
        assert titles == [f"Run #{stalled.pk} stopped: stalled", f"Run #{over.pk} stopped: budget_exhausted:cost"]
        assert f"/runs/{stalled.pk}/" in next(p["message"] for p in webhook.payloads() if "stalled" in p["title"])

    def test_runs_older_than_the_rule_are_not_replayed(self, operator, webhook, make_run):
        make_run(goal="long ago", status="stopped", stop_reason="stalled",
                 finished_at=timezone.now() - timedelta(minutes=5))
        hook = services.channel_save(user=operator, name="hook", url=webhook.url)
        _rule(operator, hook, "run_stopped", made_ago=timedelta(0))
        assert outbox.tick()["queued"] == 0

    def test_a_budget_past_its_share_on_an_active_run(self, operator, channel, inbox, make_run):
        _rule(operator, channel, "budget_threshold", params={"percent": 75, "budgets": ["tool_calls"]})
        run = make_run(status="running", tool_calls=10, budgets={"max_tool_calls": 20, "deadline_s": 600})
        assert outbox.tick()["queued"] == 0
        run.tool_calls = 16
        run.save(update_fields=["tool_calls"])
        assert outbox.tick()["sent"] == 1
        assert f"Run #{run.pk} used 75% of its tool_calls budget" in inbox.messages[0]["content"]

    def test_a_stall_rate_over_its_threshold_in_the_window(self, operator, channel, inbox, make_run):
        _rule(operator, channel, "stall_rate", params={"threshold": 0.3, "window_s": 3600, "min_runs": 4})
        for reason in ("stalled", "completed", "completed", "completed"):
            make_run(status="stopped" if reason == "stalled" else "completed", stop_reason=reason)
        assert outbox.tick()["queued"] == 0  # 25 %
        make_run(status="stopped", stop_reason="stalled")
        assert outbox.tick()["sent"] == 1  # 40 %
        assert outbox.tick()["queued"] == 0  # once per window
        assert "Stall rate 40%" in inbox.messages[0]["content"]

    def test_a_rule_with_labels_watches_only_those_runs(self, operator, channel, inbox, make_run):
        _rule(operator, channel, "budget_threshold", params={"percent": 50}, labels={"team": "payments"})
        budgets = {"max_tool_calls": 10, "deadline_s": 600}
        theirs = make_run(status="running", tool_calls=9, budgets=budgets, labels={"team": "payments"})
        RunLabel.objects.create(run=theirs, key="team", value="payments")
        make_run(status="running", tool_calls=9, budgets=budgets)
        assert outbox.tick()["sent"] == 1
        assert f"Run #{theirs.pk}" in inbox.messages[0]["content"]

    def test_secrets_come_from_the_environment(self, operator, inbox, waiting_approval, monkeypatch, settings):
        monkeypatch.setenv("AGENTOPS_NOTIFY_TO", "secret-team@example.com")
        settings.AGENTOPS_NOTIFY_SECRET_BINDINGS = {"AGENTOPS_NOTIFY_TO": {"hosts": ["127.0.0.1"], "channels": []}}
        url = inbox.url.replace("to=ops@example.com", "to=${AGENTOPS_NOTIFY_TO}")
        mail = services.channel_save(user=operator, name="env mail", url=url)
        assert "secret-team" not in Channel.objects.get(pk=mail.pk).url
        _rule(operator, mail, "approval_requested")
        outbox.tick()
        assert inbox.messages[0]["to"] == ["secret-team@example.com"]


class TestFailingChannels:
    def test_a_failing_webhook_is_retried_with_backoff_until_it_answers(self, operator, webhook, waiting_approval,
                                                                         settings):
        settings.AGENTOPS_NOTIFY_BACKOFF_S = 30
        webhook.statuses[:] = [500, 503]
        hook = services.channel_save(user=operator, name="hook", url=webhook.url)
        _rule(operator, hook, "approval_requested")
        now = timezone.now()
        assert outbox.tick(now) == {"queued": 1, "sent": 0, "failed": 0}
        delivery = Delivery.objects.get()
        assert delivery.status == "pending" and delivery.attempts == 1 and delivery.last_error
        assert timedelta(seconds=25) < delivery.next_attempt_at - now < timedelta(seconds=40)
        assert outbox.drain(now + timedelta(seconds=5)) == (0, 0)  # not due yet
        outbox.drain(now + timedelta(seconds=35))
        delivery.refresh_from_db()
        assert delivery.attempts == 2 and delivery.next_attempt_at - now > timedelta(seconds=85)  # 30 s, then 60 s
        outbox.drain(now + timedelta(seconds=200))
        delivery.refresh_from_db()
        assert delivery.status == "sent" and delivery.attempts == 3 and delivery.last_error == ""
        assert len(webhook.requests) == 3

    def test_a_dead_channel_gives_up_after_its_tries_and_does_not_hold_up_the_others(
            self, operator, inbox, channel, waiting_approval, settings):
        settings.AGENTOPS_NOTIFY_MAX_ATTEMPTS = 2
        dead = services.channel_save(user=operator, name="dead", url=inbox.url.replace(str(inbox.port), "9"))
        both = services.rule_save(user=operator, name="both", event="approval_requested",
                                  channel_ids=[dead.pk, channel.pk])
        Rule.objects.filter(pk=both.pk).update(created_at=waiting_approval.requested_at)
        now = timezone.now()
        outbox.tick(now)
        assert Delivery.objects.get(channel=channel).status == "sent"
        outbox.drain(now + timedelta(hours=1))
        failed = Delivery.objects.get(channel=dead)
        assert failed.status == "failed" and failed.attempts == 2 and failed.last_error

    def test_a_webhook_the_egress_guard_refuses_fails_at_once(self, operator, webhook, waiting_approval, settings):
        hook = services.channel_save(user=operator, name="hook", url=webhook.url)
        _rule(operator, hook, "approval_requested")
        settings.AGENTOPS_HTTP_ALLOWED_HOSTS = []  # the allowlist changed after the channel was saved
        assert outbox.tick()["failed"] == 1
        delivery = Delivery.objects.get()
        assert delivery.status == "failed" and "egress refused" in delivery.last_error
        assert webhook.requests == []

    @pytest.mark.parametrize("suffix", ["", "?redirect=yes"])
    def test_a_webhook_that_redirects_is_not_followed(self, operator, webhook, waiting_approval, suffix):
        # The guard checked the channel's host, not wherever its answer points: a redirect
        # (here to another receiver) must never carry the notification on.
        elsewhere = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
        elsewhere.requests, elsewhere.statuses, elsewhere.lock, elsewhere.redirect_to = [], [], threading.Lock(), ""
        threading.Thread(target=elsewhere.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        try:
            webhook.redirect_to = f"http://127.0.0.1:{elsewhere.server_address[1]}/stolen"
            hook = services.channel_save(user=operator, name="hook", url=webhook.url + suffix)
            _rule(operator, hook, "approval_requested")
            outbox.tick()
            assert len(webhook.requests) == 1 and elsewhere.requests == []
            assert Delivery.objects.get().status != "sent"
        finally:
            elsewhere.shutdown()
            elsewhere.server_close()

    def test_a_sender_that_died_mid_send_gives_the_delivery_back(self, operator, channel, inbox, waiting_approval):
        _rule(operator, channel, "approval_requested")
        outbox.enqueue_events(timezone.now())
        Delivery.objects.update(status="sending", claimed_until=timezone.now() - timedelta(seconds=1))
        assert outbox.drain() == (1, 0)


class TestPages:
    def test_an_operator_adds_a_channel_and_a_rule_in_the_browser_forms(self, client_for, operator, inbox):
        client = client_for(operator)
        response = client.post("/notifications/", {"form": "channel", "channel-name": "mail",
                                                   "channel-url": inbox.url})
        assert response.status_code == 302
        channel = Channel.objects.get(name="mail")
        response = client.post("/notifications/", {
            "form": "rule", "rule-name": "stalls", "rule-event": "run_stopped", "rule-channels": [channel.pk],
            "rule-stop_reasons": "stalled, budget_exhausted", "rule-labels": "team=payments"})
        assert response.status_code == 302, response.content.decode()[:3000]
        rule = Rule.objects.get(name="stalls")
        assert rule.params == {"stop_reasons": ["stalled", "budget_exhausted"]}
        assert rule.labels == {"team": "payments"}
        page = client.get("/notifications/").content.decode()
        assert "stop_reasons=stalled, budget_exhausted" in page

    def test_every_event_has_its_form_fields_and_a_new_failure_rule_saves(self, client_for, operator, channel):
        from notifications.forms import EVENT_FIELDS
        from notifications.models import RuleEvent

        assert set(EVENT_FIELDS) == set(RuleEvent)
        response = client_for(operator).post("/notifications/", {
            "form": "rule", "rule-name": "new failures", "rule-event": "failure_group_new",
            "rule-channels": [channel.pk], "rule-capabilities": "search_documents"})
        assert response.status_code == 302, response.content.decode()[:2000]
        assert Rule.objects.get(name="new failures").params == {"capabilities": ["search_documents"]}

    def test_a_bad_rule_shows_its_errors(self, client_for, operator, channel):
        response = client_for(operator).post("/notifications/", {
            "form": "rule", "rule-name": "x", "rule-event": "budget_threshold", "rule-channels": [channel.pk],
            "rule-budgets": "nope"})
        assert response.status_code == 400
        assert "a list of budgets" in response.content.decode()

    def test_a_viewer_sees_rules_and_deliveries_but_may_not_change_them(self, client_for, viewer, operator,
                                                                        channel, waiting_approval):
        _rule(operator, channel, "approval_requested")
        outbox.tick()
        client = client_for(viewer)
        page = client.get("/notifications/")
        assert page.status_code == 200 and "New rule" not in page.content.decode()
        assert client.post("/notifications/", {"form": "channel", "channel-name": "x",
                                               "channel-url": "json://a.example.com"}).status_code == 403
        deliveries = client.get("/notifications/deliveries/").content.decode()
        assert f"Approval needed: run #{waiting_approval.run_id}" in deliveries and ">sent<" in deliveries

    def test_the_api_manages_rules_and_lists_deliveries(self, api_for, operator, viewer, channel):
        api = api_for(operator)
        created = api.post("/api/notifications/rules/", {"name": "budget", "event": "budget_threshold",
                                                         "params": {"percent": 90}, "channels": [channel.pk]},
                           format="json")
        assert created.status_code == 201, created.json()
        rule_id = created.json()["id"]
        assert created.json()["channels"] == ["ops mail"]
        bad = api.post("/api/notifications/rules/", {"name": "b", "event": "budget_threshold",
                                                     "params": {"percent": 0}, "channels": [channel.pk]},
                       format="json")
        assert bad.status_code == 400 and "params.percent" in bad.json()["error"]["fields"]
        assert api_for(viewer).delete(f"/api/notifications/rules/{rule_id}/").status_code == 403
        assert api.delete(f"/api/notifications/rules/{rule_id}/").status_code == 204
        assert api_for(viewer).get("/api/notifications/deliveries/").status_code == 200
        assert api.get("/api/notifications/channels/").json()[0]["name"] == "ops mail"


class TestChannelUrls:
    @pytest.mark.parametrize("url, shown", [
        ("mailtos://bob:hunter2@smtp.example.com?to=x@example.com", "mailtos://bob:***@smtp.example.com?to=x@example.com"),
        ("mailtos://bob:${AGENTOPS_NOTIFY_PW}@smtp.example.com", "mailtos://bob:${AGENTOPS_NOTIFY_PW}@smtp.example.com"),
        ("mailto://127.0.0.1:18025?from=a@example.com", "mailto://127.0.0.1:18025?from=a@example.com"),
        ("rockets://WEBHOOKTOKEN@chat.example.com", "rockets://***@chat.example.com"),
        ("matrixs://SYT0KEN@matrix.example.com/!room", "matrixs://***@matrix.example.com/***"),
        ("ntfys://${AGENTOPS_NOTIFY_NTFY}@ntfy.example.com/alerts", "ntfys://${AGENTOPS_NOTIFY_NTFY}@ntfy.example.com/***"),
    ])
    def test_an_inline_password_is_never_shown(self, url, shown):
        from notifications.channels import masked

        assert masked(url) == shown

    def test_webhook_urls_are_checked_where_apprise_would_connect(self):
        from notifications.senders import sender_for
        from notifications.senders.base import Destination
        from notifications.targets import read

        def where(url):
            return sender_for(url.split(":", 1)[0]).destination(read(url))

        assert where("jsons://user:pw@hooks.example.com:8443/a/b") == Destination("hooks.example.com", 8443)
        assert where("form://10.0.0.5/x") == Destination("10.0.0.5", 80)
        assert where("mailtos://u:p@smtp.example.com?to=a@example.com") == Destination("smtp.example.com", 587)
        assert where("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ") == Destination("hooks.slack.com", 443)
        assert where("workflow://prod-01.westus.logic.azure.com/abc123def/sigXYZ123456") == Destination(
            "prod-01.westus.logic.azure.com", 443)

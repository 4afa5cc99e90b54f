"""Probes, notification channels and rules: odd channel URLs and rule settings of the wrong type, through the
API and the rules page, are a 4xx naming the field, never a 500, and save nothing."""
from __future__ import annotations

import pytest

from notifications.models import Channel, Rule

pytestmark = pytest.mark.django_db

URLS = [
    "json://example.com/\x00", "jsons://" + "a" * 10_000 + ".example.com/x", "jsons://hooks.example.com/" + "p" * 1990,
    "gopher://example.com/", "javascript:alert(1)", "jsons://[::1]/x", "jsons://[fe80::1%25eth0]/x",
    "jsons://[::ffff:127.0.0.1]/x", "jsons://[zzzz]/x", "jsons://[::1/x", "jsons://hooks.example.com:99999/x",
    "jsons://hooks.example.com:0/x", "jsons://hooks.example.com:-1/x", "jsons://hooks.example.com:abc/x",
    "jsons://bücher.example/x", "jsons://xn--/x", "jsons://ex\u200bample.com/x", "jsons://example.com\\@evil/x",
    "mailtos://user:pass@[::1]:99999?to=a@b.c", "mailto://u@" + "h" * 300 + "?to=x@y", "://", "jsons://",
    "jsons:///x", "${AGENTOPS_NOTIFY_X", "jsons://${AGENTOPS_NOTIFY_" + "X" * 5000 + "}/x", "slack://\x00",
    "tgram://" + "1" * 5000 + "/x", "jsons://1e999/x", "jsons://99999999999999999999/x", "jsons://0x7f.1/x",
    "jsons://example.com/?:method=\x00", "jsons://example.com/?" + "a=1&" * 2000,
]


@pytest.mark.parametrize("url", URLS)
def test_an_odd_channel_url_over_the_api_is_a_400(api_for, operator, url):
    response = api_for(operator).post("/api/notifications/channels/", {"name": "c", "url": url}, format="json")
    assert response.status_code in (201, 400), (response.status_code, response.content[:300])
    if response.status_code == 400:
        assert not Channel.objects.exists()


@pytest.mark.parametrize("url", URLS)
def test_an_odd_channel_url_on_the_page_is_a_400(client_for, operator, url):
    response = client_for(operator).post("/notifications/", {"form": "channel", "channel-name": "c",
                                                             "channel-url": url})
    assert response.status_code in (302, 400), (response.status_code, response.content[:300])


BAD_PARAMS = [
    ("run_stopped", {"stop_reasons": [{"a": 1}]}), ("run_stopped", {"stop_reasons": [["x"]]}),
    ("run_stopped", {"stop_reasons": "stalled"}), ("run_stopped", {"stop_reasons": None}),
    ("budget_threshold", {"budgets": [{}]}), ("budget_threshold", {"percent": "80"}),
    ("budget_threshold", {"percent": True}), ("budget_threshold", {"percent": 1e308}),
    ("approval_expiring", {"within_s": 2**70}), ("approval_expiring", {"within_s": -1}),
    ("approval_undecided", {"after_minutes": 1e-300}), ("approval_undecided", {"capabilities": [{}]}),
    ("approval_undecided", {"capabilities": "x"}), ("stall_rate", {"min_runs": 2**70}),
    ("stall_rate", {"min_runs": 0}), ("stall_rate", {"window_s": "3600"}), ("stall_rate", {"threshold": None}),
    ("usage_burn", {"measure": {}}), ("usage_burn", {"measure": ["cost"]}), ("usage_burn", {"per": {}}),
    ("usage_burn", {"per": "label", "label_key": {}}), ("usage_burn", {"window_hours": 2**70}),
    ("usage_burn", {"limit": 10**300}), ("failure_group_new", {"capabilities": [1]}),
    ("failure_group_new", {"capabilities": ["x"] * 1000}), ("mentioned", {"x": 1}), ("mentioned", []),
    ("mentioned", "x"), ("approval_requested", None),
]


@pytest.fixture
def channel(operator):
    return Channel.objects.create(name="hook", url="jsons://hooks.example.com/x", created_by=operator)


@pytest.mark.parametrize("event, params", BAD_PARAMS)
def test_rule_settings_of_the_wrong_type_are_a_400(api_for, operator, channel, event, params):
    response = api_for(operator).post("/api/notifications/rules/", {"name": "r", "event": event, "params": params,
                                                                    "channels": [channel.pk]}, format="json")
    assert response.status_code in (201, 400), (response.status_code, response.content[:300])


@pytest.mark.parametrize("body", [
    {"name": "r", "event": "mentioned", "channels": [2**70]}, {"name": "r", "event": "mentioned", "channels": "1"},
    {"name": "r", "event": "mentioned", "channels": [True]}, {"name": "r", "event": "x" * 10_000, "channels": [1]},
    {"name": "r", "event": "mentioned", "channels": [1], "labels": {"k" * 1000: "v"}},
    {"name": "r", "event": "mentioned", "channels": [1], "labels": []},
    {"name": "r", "event": "mentioned", "channels": [1], "enabled": "maybe"},
    {"name": ["r"], "event": "mentioned", "channels": [1]},
])
def test_rule_bodies_of_the_wrong_shape_are_a_400(api_for, operator, channel, body):
    response = api_for(operator).post("/api/notifications/rules/", body, format="json")
    assert response.status_code == 400, (response.status_code, response.content[:300])


@pytest.mark.parametrize("fields", [
    {"rule-event": "stall_rate", "rule-min_runs": "9" * 30}, {"rule-event": "stall_rate", "rule-threshold": "nan"},
    {"rule-event": "approval_expiring", "rule-within_s": "9" * 400}, {"rule-event": "budget_threshold",
                                                                     "rule-percent": "1e999"},
    {"rule-event": "run_stopped", "rule-stop_reasons": "\x00"}, {"rule-event": "usage_burn", "rule-per": "label",
                                                                "rule-label_key": "\x00"},
    {"rule-event": "mentioned", "rule-labels": "a=\x00"}, {"rule-event": "mentioned", "rule-channels": "9" * 30},
    {"rule-event": "mentioned", "rule-channels": "abc"},
])
def test_rule_form_values_are_a_400(client_for, operator, channel, fields):
    data = {"form": "rule", "rule-name": "r", "rule-channels": str(channel.pk), **fields}
    response = client_for(operator).post("/notifications/", data)
    assert response.status_code in (302, 400), (response.status_code, response.content[:300])


@pytest.mark.parametrize("path", ["/notifications/deliveries/?status=\x00&page=\x00",
                                  "/notifications/deliveries/?page=99999999999999999999",
                                  "/api/notifications/deliveries/?status=%00", "/api/notifications/rules/99999999999999999/",
                                  "/notifications/rules/99999999999999999/delete/"])
def test_odd_queries_are_not_a_500(client_for, api_for, operator, path):
    client = api_for(operator) if path.startswith("/api/") else client_for(operator)
    assert client.get(path).status_code < 500


def test_toggling_a_rule_whose_only_channel_was_deleted_says_why_it_cannot(client_for, operator, channel):
    """Before: the toggle re-saved the rule, its check refused a rule with no channel, and that was a 500."""
    rule = Rule.objects.create(name="old", event="mentioned", params={}, created_by=operator)
    rule.channels.set([channel])
    client = client_for(operator)
    assert client.post(f"/notifications/channels/{channel.pk}/delete/").status_code == 302
    response = client.post(f"/notifications/rules/{rule.pk}/toggle/", follow=True)
    assert response.status_code == 200
    assert "choose at least one existing channel" in response.content.decode()
    rule.refresh_from_db()
    assert rule.enabled


@pytest.mark.parametrize("url, said", [
    ("jsons://hooks.example.com:99999/x", "port must be from 1 to 65535"),
    ("jsons://hooks.example.com:-1/x", "port must be from 1 to 65535"),
    ("jsons://[::1]/x", "egress guard refuses it"),          # read as ::1 (was "[[::1]]": a 500)
    ("jsons://[::ffff:127.0.0.1]/x", "egress guard refuses it"),
])
def test_a_port_out_of_range_or_an_ipv6_literal_is_judged_not_a_500(api_for, operator, url, said):
    response = api_for(operator).post("/api/notifications/channels/", {"name": "c", "url": url}, format="json")
    assert response.status_code == 400
    assert said in response.json()["error"]["fields"]["url"], response.json()
    assert not Channel.objects.exists()


@pytest.mark.parametrize("reasons", [[{"a": 1}], [["stalled"]], [None]])
def test_stop_reasons_that_are_not_strings_are_a_400_naming_them(api_for, operator, channel, reasons):
    response = api_for(operator).post("/api/notifications/rules/", {
        "name": "r", "event": "run_stopped", "params": {"stop_reasons": reasons}, "channels": [channel.pk]},
        format="json")
    assert response.status_code == 400
    assert "params.stop_reasons" in response.json()["error"]["fields"]
    assert not Rule.objects.exists()


def test_a_channel_id_past_the_databases_integers_on_the_rule_form_is_no_choice(client_for, operator, channel):
    response = client_for(operator).post("/notifications/", {"form": "rule", "rule-name": "r", "rule-event": "mentioned",
                                                             "rule-channels": [str(channel.pk), "9" * 30]})
    assert response.status_code == 400
    assert "is not one of the available choices" in response.content.decode()
    assert not Rule.objects.exists()

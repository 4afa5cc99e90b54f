"""@mentions: who counts as mentioned, and the "mentioned" notification rule's deliveries."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from notifications.models import Channel, Delivery, Rule
from review.markdown import mentioned_names

pytestmark = pytest.mark.django_db


def test_it_reads_names_as_written():
    assert mentioned_names("cc @otto, @vera. mail a@b.example `@x` @otto") == ["otto", "vera", "x"]


@pytest.fixture
def mention_rule(operator):
    channel = Channel.objects.create(name="team chat", url="json://127.0.0.1:9/hook")
    rule = Rule.objects.create(name="mentions", event="mentioned", params={})
    rule.channels.set([channel])
    return rule


def _comment(api, run, body):
    return api.post(f"/api/review/runs/{run.pk}/annotations/", {"body": body}, format="json")


def test_a_mention_writes_one_delivery_per_user_and_an_edit_only_the_new_ones(api_for, reviewer, operator, viewer,
                                                                              finished_run, mention_rule):
    api = api_for(reviewer)
    created = _comment(api, finished_run, "@otto look at the second search").json()
    delivery = Delivery.objects.get()
    assert delivery.event_key == f"mention:{created['id']}:otto" and delivery.run_id == finished_run.pk
    assert "rené mentioned @otto on run" in delivery.subject and delivery.link.endswith(f"/runs/{finished_run.pk}/")
    api.patch(f"/api/review/annotations/{created['id']}/", {"body": "@otto and @vera, look"}, format="json")
    assert sorted(Delivery.objects.values_list("event_key", flat=True)) == [
        f"mention:{created['id']}:otto", f"mention:{created['id']}:vera"]


def test_who_is_not_notified(api_for, reviewer, operator, finished_run, mention_rule):
    User.objects.create_user(username="gone", is_active=False)
    User.objects.create_user(username="outsider")   # no role: may not read runs
    body = _comment(api_for(reviewer), finished_run, "@rené @gone @outsider @nobody-here").json()
    assert body["mentions"] == ["rené"]      # the author is mentioned, but not notified of their own comment
    assert not Delivery.objects.exists()


def test_a_rule_for_other_labels_or_a_paused_rule_sends_nothing(api_for, reviewer, operator, finished_run,
                                                                mention_rule):
    mention_rule.labels = {"team": "payments"}
    mention_rule.save()
    _comment(api_for(reviewer), finished_run, "@otto")
    Rule.objects.filter(pk=mention_rule.pk).update(labels={}, enabled=False)
    _comment(api_for(reviewer), finished_run, "@otto")
    assert not Delivery.objects.exists()


def test_the_rule_can_be_made_on_the_notifications_api(api_for, operator):
    channel = Channel.objects.create(name="c", url="json://127.0.0.1:9/hook")
    response = api_for(operator).post("/api/notifications/rules/", {"name": "mentions", "event": "mentioned",
                                                                    "channels": [channel.pk]}, format="json")
    assert response.status_code == 201, response.json()

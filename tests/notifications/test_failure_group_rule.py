"""A new failure group notifies: a run fails through a real worker, the worker's tick finds the new group."""
import pytest

from notifications import rules, services
from notifications.models import Delivery, Rule
from runs import services as run_services
from runs.models import FailureGroup, Run

pytestmark = pytest.mark.django_db(transaction=True)


def _failing_run(operator, ticket_id: int):
    return run_services.run_start(
        owner=operator, goal=f"Check ticket {ticket_id}", planner="scripted",
        planner_config={"plans": [[{"capability": "get_ticket_status", "arguments": {"ticket_id": ticket_id}}]]},
        completion={"capability": "get_ticket_status", "path": "status", "exists": True}, budgets={"deadline_s": 120})


@pytest.mark.slow
def test_a_new_failure_group_reaches_the_inbox_through_the_worker(celery_worker, operator, inbox, wait_until):
    from celery import current_app

    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    mail = services.channel_save(user=operator, name="ops mail", url=inbox.url)
    services.rule_save(user=operator, name="new failures", event="failure_group_new", channel_ids=[mail.pk])
    first = _failing_run(operator, 987_654)
    wait_until(lambda: Run.objects.get(pk=first.pk).finished_at is not None, timeout=60, message="the failed run")
    group = FailureGroup.objects.get()
    assert (group.capability_name, group.runs, group.first_run_id) == ("get_ticket_status", 1, first.pk)
    current_app.send_task("notifications.tick")
    wait_until(lambda: inbox.messages, timeout=60, message="the email")
    text = inbox.messages[0]["content"]
    assert "New failure: get_ticket_status" in text and f"/runs/calls/?fingerprint={group.fingerprint}" in text

    # The same failure again (another ticket number): the same group, no second notice.
    second = _failing_run(operator, 123_456)
    wait_until(lambda: Run.objects.get(pk=second.pk).finished_at is not None, timeout=60, message="the second run")
    assert FailureGroup.objects.get().runs == 2
    current_app.send_task("notifications.tick")
    wait_until(lambda: Delivery.objects.filter(status="sent").count() == 1 and not Delivery.objects.exclude(
        status="sent").exists(), timeout=30, message="the tick")
    assert Delivery.objects.count() == 1


def test_the_rule_checks_its_settings_and_filters_by_capability(db, operator):
    assert rules.params_errors("failure_group_new", {"capabilities": "x"}) == {
        "params.capabilities": "a list of capability names (empty: any capability)"}
    assert rules.params_errors("failure_group_new", {"colour": 1})
    assert rules.params_errors("failure_group_new", {"capabilities": ["create_ticket"]}) == {}
    rule = Rule.objects.create(name="r", event="failure_group_new", params={"capabilities": ["create_ticket"]})
    from django.utils import timezone

    FailureGroup.objects.create(fingerprint="f" * 32, capability_name="get_ticket_status", error_code="not_found",
                                sample_attempt_id=1, first_run_id=1, first_seen=timezone.now(),
                                last_seen=timezone.now(), attempts=1, runs=1, created_at=timezone.now())
    assert rules.find_events(rule, timezone.now()) == []
    rule.params = {}
    found = rules.find_events(rule, timezone.now())
    assert [n.key for n in found] == [f"failure_group:{'f' * 32}:new"]

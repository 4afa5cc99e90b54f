"""Notification rules in a real browser: add a channel and a rule, see the delivery, pause and delete the rule."""
import pytest
from playwright.sync_api import expect

from notifications import outbox
from notifications.models import Delivery, Rule

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_operator_sets_up_a_rule_and_sees_its_delivery(page, live_server, login, operator, inbox, shot):
    from runs.models import Run

    login(operator)
    page.goto(f"{live_server.url}/notifications/")
    expect(page.get_by_role("heading", name="Notifications")).to_be_visible()
    page.get_by_label("Name", exact=True).last.fill("ops mail")
    page.get_by_label("Apprise URL").fill(inbox.url)
    page.get_by_role("button", name="Add channel").click()
    expect(page.locator(".messages")).to_contain_text("Saved the channel")

    page.get_by_label("Name", exact=True).first.fill("stalled payments runs")
    page.get_by_label("When").select_option("run_stopped")
    page.get_by_label("ops mail").check()
    page.get_by_label("Stop reasons").fill("stalled")
    page.get_by_label("Only runs labelled").fill("team=payments")
    page.get_by_role("button", name="Add rule").click()
    expect(page.locator(".messages")).to_contain_text("Saved the rule")
    rule = Rule.objects.get(name="stalled payments runs")
    row = page.locator(f"#rule-{rule.pk}")
    expect(row).to_contain_text("stop_reasons=stalled")
    expect(row).to_contain_text("team=payments")
    shot("notification-rules")

    # A bad rule is explained beside its field.
    page.get_by_label("Name", exact=True).first.fill("broken")
    page.get_by_label("When").select_option("budget_threshold")
    page.get_by_label("ops mail").check()
    page.get_by_label("Budgets", exact=True).fill("nonsense")
    page.get_by_role("button", name="Add rule").click()
    expect(page.get_by_role("alert").first).to_contain_text("a list of budgets")

    from django.utils import timezone

    from runs.models import RunLabel

    run = Run.objects.create(goal="Payments refund stuck", completion={}, budgets={}, planner="rules", owner=operator,
                             status="stopped", stop_reason="stalled", stop_detail="same search twice",
                             finished_at=timezone.now(), trace_id="e" * 32, labels={"team": "payments"})
    RunLabel.objects.create(run=run, key="team", value="payments")
    assert outbox.tick()["sent"] == 1  # what the scheduler's next tick does
    assert f"Run #{run.pk} stopped: stalled" in inbox.messages[0]["content"]

    page.get_by_role("link", name="Deliveries").click()
    delivery = Delivery.objects.get()
    expect(page.locator(f"#delivery-{delivery.pk}")).to_contain_text("sent")
    expect(page.locator(f"#delivery-{delivery.pk}")).to_contain_text(f"Run #{run.pk} stopped: stalled")
    shot("notification-deliveries")

    page.get_by_role("link", name="Rules and channels").click()
    page.locator(f"#rule-{rule.pk}").get_by_role("button", name="Pause").click()
    expect(page.locator(f"#rule-{rule.pk}")).to_contain_text("paused")
    page.locator(f"#rule-{rule.pk}").get_by_role("link", name="Delete").click()  # asks first, on its own page
    expect(page.get_by_role("heading", name=f"Delete the rule “{rule.name}”?")).to_be_visible()
    page.get_by_role("button", name="Delete").click()
    expect(page.locator(f"#rule-{rule.pk}")).to_have_count(0)
    assert not Rule.objects.filter(pk=rule.pk).exists()
    assert Delivery.objects.filter(pk=delivery.pk).exists()  # the record of what was sent stays

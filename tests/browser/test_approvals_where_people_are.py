"""The inbox by keyboard, the four-eyes rule before the click, and an e-mailed link decided on a phone."""
import re

import pytest
from playwright.sync_api import expect

from runs.models import Approval

pytestmark = pytest.mark.django_db(transaction=True)


def paused_run(operator, title):
    from runs import services
    from runs.worker import engine

    run = services.run_start(owner=operator, goal=f"Open a ticket: {title}", planner="scripted",
                             planner_config={"plans": [[{"capability": "create_ticket",
                                                          "arguments": {"title": title}}]]},
                             completion={"capability": "create_ticket", "path": "ticket_id", "exists": True})
    engine.run_advance(run_id=run.pk, worker="browser-test")
    return Approval.objects.get(run=run, state="pending")


def focused_id(page) -> str:
    return page.evaluate("document.activeElement && document.activeElement.id")


def test_the_inbox_by_keyboard(page, live_server, login, registry, manual_advance, operator, second_operator, shot):
    first, second = paused_run(operator, "Badge reader"), paused_run(operator, "Projector")
    login(second_operator)
    page.goto(f"{live_server.url}/runs/approvals/")
    expect(page.locator("#approval-keys")).to_be_visible()
    expect(page.locator("#approval-keys")).to_contain_text("a approve")
    shot("approval-inbox-keyboard-legend")
    page.keyboard.press("a")  # nothing focused: the first request
    expect(page.locator(f"#approval-{first.pk}")).to_contain_text("Approved by olga")
    expect(page.locator(f"#approve-{second.pk}")).to_be_focused()
    # The list polls every 4 s and morphs: the focus stays on the next card's Approve across a refresh.
    page.evaluate("""() => new Promise(resolve => document.body.addEventListener('htmx:afterSettle', e => {
        if (e.detail.elt && e.detail.elt.id === 'approval-list') resolve(); }))""")
    assert focused_id(page) == f"approve-{second.pk}"
    page.keyboard.press("r")
    confirm = page.get_by_role("button", name=re.compile("^Yes, reject"))
    expect(confirm).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(f"#approval-{second.pk}")).to_contain_text("Rejected by olga")
    assert Approval.objects.get(pk=first.pk).state == "approved"
    assert Approval.objects.get(pk=second.pk).state == "rejected"


def test_typing_a_in_the_comment_box_decides_nothing(page, live_server, login, registry, manual_advance, operator,
                                                     second_operator):
    approval = paused_run(operator, "Coffee machine")
    login(second_operator)
    page.goto(f"{live_server.url}/runs/approvals/")
    page.get_by_label("Comment (optional)").fill("")
    page.get_by_label("Comment (optional)").press_sequentially("a reason")
    expect(page.get_by_label("Comment (optional)")).to_have_value("a reason")
    assert Approval.objects.get(pk=approval.pk).state == "pending"


def test_the_four_eyes_refusal_is_shown_before_the_click(page, live_server, login, registry, manual_advance, operator,
                                                         settings, shot):
    settings.AGENTOPS_FOUR_EYES = True
    approval = paused_run(operator, "Own run")
    login(operator)
    page.goto(f"{live_server.url}/runs/approvals/")
    card = page.locator(f"#approval-{approval.pk}")
    expect(card).to_contain_text("Four-eyes rule: you cannot approve or reject steps of your own run.")
    expect(card.get_by_role("button", name=re.compile("Approve"))).to_have_count(0)
    shot("approval-inbox-four-eyes")
    page.keyboard.press("a")
    assert Approval.objects.get(pk=approval.pk).state == "pending"


def test_the_proposer_s_four_eyes_refusal_is_shown_before_the_click(page, live_server, login, registry,
                                                                    manual_advance, operator, second_operator,
                                                                    settings):
    """olga proposed the step on otto's run: she may not decide it either, and sees why before any click."""
    from runs.models import PlanRevision

    settings.AGENTOPS_FOUR_EYES = True
    approval = paused_run(operator, "Proposed by olga")
    PlanRevision.objects.filter(pk=approval.revision_id).update(proposed_by=second_operator)
    login(second_operator)
    page.goto(f"{live_server.url}/runs/approvals/")
    card = page.locator(f"#approval-{approval.pk}")
    expect(card).to_contain_text("Four-eyes rule: you cannot approve or reject steps you proposed.")
    expect(card.get_by_role("button", name=re.compile("Approve"))).to_have_count(0)
    page.keyboard.press("a")
    assert Approval.objects.get(pk=approval.pk).state == "pending"


def test_an_emailed_link_followed_on_a_phone(browser, live_server, registry, manual_advance, inbox, operator,
                                              second_operator, settings):
    from notifications import outbox, services
    from notifications.models import Rule
    from tests.browser.conftest import ARTIFACTS
    from tests.notifications.test_email_links import text_of

    settings.AGENTOPS_BASE_URL = live_server.url
    second_operator.email = "olga@example.com"
    second_operator.save()
    channel = services.channel_save(user=operator, name="mail",
                                    url=inbox.url.replace("to=ops@example.com", "to=olga@example.com"))
    rule = services.rule_save(user=operator, name="ask", event="approval_requested", channel_ids=[channel.pk])
    approval = paused_run(operator, "Printer on the third floor")
    Rule.objects.filter(pk=rule.pk).update(created_at=approval.requested_at)
    outbox.tick()
    mail = text_of(inbox.messages[0]["content"])
    link = re.search(r"Approve: (\S+)", mail).group(1)

    phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = phone.new_page()
    try:
        page.goto(link)
        expect(page).to_have_url(re.compile(r"/login/"))  # the link decides nothing without a sign-in
        page.get_by_label("Username").fill("olga")
        page.get_by_label("Password").fill("pw-olga")
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Approve create_ticket?")).to_be_visible()
        expect(page.locator("body")).to_contain_text("Printer on the third floor")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        approve = page.get_by_role("button", name="Approve")
        box = approve.bounding_box()
        assert box["height"] >= 44 and box["width"] >= 120  # a thumb's target
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "email-decision-phone.png"), full_page=True)
        page.get_by_label("Comment (optional)").fill("ok from the train")
        approve.tap()
        expect(page.locator("body")).to_contain_text("Approved by olga")
        page.screenshot(path=str(ARTIFACTS / "email-decision-phone-done.png"), full_page=True)
        assert Approval.objects.get(pk=approval.pk).state == "approved"
        page.goto(link)
        expect(page.locator("body")).to_contain_text("used already")
    finally:
        phone.close()


def test_a_forwarded_or_expired_link_decides_nothing_in_the_browser(page, live_server, login, registry,
                                                                   manual_advance, operator, second_operator,
                                                                   settings):
    """A link mailed to olga, opened by otto (a forwarded mail), then by olga after it expired."""
    from datetime import timedelta

    from django.utils import timezone

    from notifications import email_links
    from notifications.models import EmailDecisionLink

    settings.AGENTOPS_BASE_URL = live_server.url
    approval = paused_run(operator, "Forwarded mail")
    link = email_links.issue(approval=approval, user=second_operator)["approve"]

    login(operator)
    page.goto(link)
    expect(page.locator("body")).to_contain_text("This link was sent to another person")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)

    EmailDecisionLink.objects.filter(approval=approval).update(expires_at=timezone.now() - timedelta(minutes=1))
    login(second_operator)
    page.goto(link)
    expect(page.locator("body")).to_contain_text("This link expired at")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    assert Approval.objects.get(pk=approval.pk).state == "pending"
    assert EmailDecisionLink.objects.get(approval=approval).used_at is None

"""Issue 35 in Chromium: a saved view keeps the filters applied, a person reconciles an unknown
outcome, Try it shows that it is running, the call in flight is on the trace."""
import time
from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.django_db(transaction=True)

SEARCH = {"capability": "search_documents", "arguments": {"q": "zzz-unknown-topic"}}
FOUND = {"capability": "search_documents", "path": "documents.0.id", "exists": True}


def _stalled(owner, goal, labels):
    from runs import services
    from runs.worker import engine

    run = services.run_start(owner=owner, goal=goal, planner="scripted", planner_config={"plans": [[SEARCH]] * 3},
                             completion=FOUND, labels=labels)
    engine.run_advance(run_id=run.pk, worker="browser-test")
    return run


def test_a_saved_view_opens_with_the_filters_that_were_applied(page, live_server, login, registry, manual_advance,
                                                               operator, shot):
    _stalled(operator, "Payments: find the refund policy", {"team": "payments"})
    _stalled(operator, "Search: find the travel policy", {"team": "search"})
    login(operator).goto(f"{live_server.url}/runs/")
    page.get_by_label("Labels").fill("team=payments")
    page.get_by_label("Stop reason").select_option("stalled")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("#runs-table")).not_to_contain_text("Search: find the travel policy")
    page.get_by_label("Save these filters as").fill("payments stalls")
    page.get_by_role("button", name="Save view").click()
    expect(page.locator(".messages")).to_contain_text("Saved the view")  # the post landed before we leave
    page.goto(f"{live_server.url}/runs/")
    page.get_by_role("link", name="payments stalls").click()
    expect(page.locator("#runs-table")).to_contain_text("Payments: find the refund policy")
    expect(page.locator("#runs-table")).not_to_contain_text("Search: find the travel policy")
    assert "label=team%3Dpayments" in page.url and "stop_reason=stalled" in page.url
    shot("saved-view-opened")


def test_an_operator_reconciles_an_unknown_outcome_and_the_run_says_so(page, live_server, login, registry,
                                                                       manual_advance, operator, shot):
    from runs.models import Run

    run = _stalled(operator, "Open a ticket for the broken badge reader", {})
    Run.objects.filter(pk=run.pk).update(stop_reason="terminal_failure:outcome_unknown", stall_kind="")
    login(operator).goto(f"{live_server.url}/runs/{run.pk}/")
    section = page.locator("#reconciliation")
    expect(section).to_contain_text("Resume the run from the unknown call")
    section.get_by_label("committed", exact=True).check()
    section.get_by_label("Evidence: what you checked and what it showed").fill("Ticket T-7 exists, created 10:02")
    section.get_by_role("button", name="Record and close").click()
    expect(page.get_by_test_id("reconciled")).to_contain_text("found the side effect committed")
    expect(section).to_contain_text("Ticket T-7 exists")
    shot("reconciled")


def test_try_it_shows_that_the_call_is_running(page, live_server, login, registry, registry_admin, try_inline,
                                               monkeypatch):
    from capabilities import try_it

    call = try_it._try_in_worker

    def slow(**kw):
        time.sleep(1.5)  # a stdio server's first start
        return call(**kw)

    monkeypatch.setattr(try_it, "_try_in_worker", slow)
    login(registry_admin).goto(f"{live_server.url}/capabilities/search_documents/")
    page.get_by_label("Arguments").fill('{"q": "travel"}')
    page.get_by_role("button", name="Run once").click()
    expect(page.get_by_test_id("try-progress")).to_have_css("opacity", "1")
    expect(page.get_by_role("button", name="Run once")).to_be_disabled()
    expect(page.locator("#try-panel .observation")).to_contain_text("ok", timeout=15_000)
    expect(page.get_by_test_id("try-progress")).to_have_css("opacity", "0")


def test_the_trace_shows_the_call_in_flight(page, live_server, login, registry, manual_advance, operator, shot):
    # What the worker writes while a call runs (runs.trace.calls_in_flight), on a live run.
    from runs import services
    from runs.models import Run

    run = services.run_start(owner=operator, goal="Read the slow archive", planner="scripted",
                             planner_config={"plans": [[SEARCH]]}, completion=FOUND)
    Run.objects.filter(pk=run.pk).update(status="running", call_in_flight={
        "capability": "search_documents", "arguments": {"q": "archive"}, "attempt": 1, "timeout_s": 20,
        "started_at": datetime.now(UTC).isoformat()})
    login(operator).goto(f"{live_server.url}/runs/{run.pk}/")
    box = page.locator("#call-in-flight")
    expect(box).to_contain_text("Calling search_documents")
    expect(box).to_contain_text('{"q": "archive"}')
    expect(box).to_contain_text("of a 20 s timeout")
    first = page.get_by_test_id("in-flight-elapsed").inner_text()
    # The trace refreshes itself while the run is live: the elapsed time moves on.
    expect(page.get_by_test_id("in-flight-elapsed")).not_to_have_text(first, timeout=6_000)
    shot("call-in-flight")

"""Fork and resume in Chromium: Resume on a stopped run's trace, Fork here on one of its calls, and
resume after a person reconciled an unknown outcome; the fork's trace shows what it inherited."""
import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.django_db(transaction=True)

SEARCH = {"capability": "search_documents", "arguments": {"q": "zzz-unknown-topic"}}
FOUND = {"capability": "search_documents", "path": "documents.0.id", "exists": True}


def _stalled(owner):
    from runs import services
    from runs.worker import engine

    run = services.run_start(owner=owner, goal="Find the teleportation policy", planner="scripted",
                             planner_config={"plans": [[SEARCH]] * 3}, completion=FOUND)
    engine.run_advance(run_id=run.pk, worker="browser-test")
    return run


def test_resume_and_fork_here_start_runs_that_show_what_they_inherited(page, live_server, login, registry,
                                                                      manual_advance, operator, shot):
    from runs.models import Run
    from runs.worker import engine

    source = _stalled(operator)
    calls = source.attempts.count()
    login(operator).goto(f"{live_server.url}/runs/{source.pk}/")
    page.get_by_test_id("resume").click()
    expect(page.get_by_test_id("forked-from")).to_contain_text(f"run #{source.pk}, after its end (resumed)")
    resumed = Run.objects.get(forked_from=source)
    expect(page.locator("#inherited .attempt-row.inherited")).to_have_count(calls)
    engine.run_advance(run_id=resumed.pk, worker="browser-test")
    page.reload()
    expect(page.locator("h1 .pill")).to_have_text("Stopped")   # the planner had no new idea either
    shot("resumed-run")

    page.goto(f"{live_server.url}/runs/{source.pk}/")
    page.get_by_role("button", name="Fork here (before r2·s1#1)").click()
    expect(page.get_by_test_id("forked-from")).to_contain_text("before its call 2")
    expect(page.locator("#inherited .attempt-row.inherited")).to_have_count(1)
    page.goto(f"{live_server.url}/runs/{source.pk}/")
    expect(page.get_by_test_id("forks")).to_contain_text(f"run #{resumed.pk} (before call {calls + 1}")
    shot("forked-source")


def test_a_bad_fork_point_is_refused_on_the_page(page, live_server, login, registry, manual_advance, operator):
    from runs.models import Run

    source = _stalled(operator)
    login(operator).goto(f"{live_server.url}/runs/{source.pk}/")
    page.locator("#fork-at").evaluate("e => { e.removeAttribute('max'); e.value = '99'; }")
    page.get_by_role("button", name="Fork", exact=True).click()
    expect(page.locator(".messages")).to_contain_text("The fork point must be")
    assert not Run.objects.filter(forked_from=source).exists()


def test_an_operator_reconciles_then_resumes_from_the_unknown_call(page, live_server, login, registry,
                                                                    manual_advance, operator, shot):
    from runs.models import Attempt, Run

    source = _stalled(operator)
    last = source.attempts.order_by("started_at", "id").last()
    Attempt.objects.filter(pk=last.pk).update(side_effect_status="unknown", idempotency_key="k-ticket")
    Run.objects.filter(pk=source.pk).update(stop_reason="terminal_failure:outcome_unknown", stall_kind="",
                                            stop_attempt=last)
    login(operator).goto(f"{live_server.url}/runs/{source.pk}/")
    expect(page.locator("#fork")).to_contain_text("record what you found")
    expect(page.get_by_test_id("resume")).to_have_count(0)
    section = page.locator("#reconciliation")
    section.get_by_label("committed", exact=True).check()
    section.get_by_label("Evidence: what you checked and what it showed").fill("Ticket T-7 exists, created 10:02")
    section.get_by_role("button", name="Record and close").click()
    page.get_by_test_id("resume-reconciled").click()
    expect(page.get_by_test_id("inherited-reconciliation")).to_contain_text("committed (Ticket T-7 exists")
    fork = Run.objects.get(forked_from=source)
    assert fork.state["settled_keys"] == ["k-ticket"]
    shot("resumed-after-reconciliation")

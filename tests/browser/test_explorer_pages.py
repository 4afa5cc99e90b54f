"""The tool-call explorer and failure groups in a real browser: search, page, follow into the trace."""
import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from runs import failures
from runs.models import Attempt, PlanRevision, Run, Step

pytestmark = pytest.mark.django_db(transaction=True)


def _run_with_calls(owner, *, failing: int):
    now = timezone.now()
    run = Run.objects.create(goal="Refund the duplicate order", completion={}, budgets={}, planner="rules",
                             owner=owner, trace_id="e" * 32, status="stopped", stop_reason="stalled",
                             finished_at=now)
    revision = PlanRevision.objects.create(run=run, number=1, accepted=True, steps=[], reason_code="initial")
    step = Step.objects.create(run=run, revision=revision, index=0, key="s1", capability_name="create_ticket",
                               arguments={"title": "duplicate refund"}, arguments_hash="h")
    common = dict(run=run, step=step, capability_name="create_ticket", signature_hash="s", trace_id=run.trace_id,
                  span_id="0" * 16, latency_s=0.1)
    Attempt.objects.create(uid="okcall", number=1, signature='create_ticket {"title":"duplicate refund"}',
                           started_at=now - timedelta(minutes=5), ended_at=now, status="ok",
                           output={"ticket": "T-1", "note": "contractors policy"}, **common)
    for n in range(failing):
        message = f"upstream returned 503 for request {n:012x}"
        Attempt.objects.create(
            uid=f"fail{n}", number=n + 2, signature='create_ticket {"title":"duplicate refund"}',
            started_at=now - timedelta(seconds=n), ended_at=now, status="retryable", error_code="server_error",
            error_category="transient", error_message=message, http_status=503,
            fingerprint=failures.fingerprint(capability="create_ticket", error_code="server_error",
                                             error_category="transient", http_status=503, message=message), **common)
    failures.record_run_finished(run_id=run.pk)
    return run


def test_an_operator_searches_calls_and_follows_one_into_its_trace(page, live_server, login, operator,
                                                                    monkeypatch, shot):
    from runs import explorer

    monkeypatch.setattr(explorer, "ATTEMPTS_PER_PAGE", 3)
    run = _run_with_calls(operator, failing=5)
    login(operator)
    page.goto(f"{live_server.url}/runs/calls/")
    expect(page.locator("table.calls tbody tr")).to_have_count(3)
    ok_call = page.get_by_role("link", name="r1·s1#1")   # the oldest call: on the second page only
    expect(ok_call).to_have_count(0)
    page.get_by_role("link", name="Next →").click()
    expect(ok_call).to_have_count(1)
    expect(page.locator("table.calls tbody tr")).to_have_count(3)
    page.get_by_role("link", name="← Previous").click()
    # Both pages hold three rows: wait for the first page's own, or its answer could land after the search's.
    expect(ok_call).to_have_count(0)
    expect(page.locator("table.calls tbody tr")).to_have_count(3)

    page.get_by_label("Search").fill('"contractors policy"')
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("table.calls tbody tr")).to_have_count(1)
    shot("tool-call-explorer-search")
    page.get_by_role("link", name="r1·s1#1").click()
    page.wait_for_url(re.compile(rf"/runs/{run.pk}/\?attempt=okcall#attempt-okcall"))
    expect(page.locator("#attempt-okcall")).to_be_visible()

    # Query syntax is only text: punctuation alone is no term, an unknown word matches nothing.
    page.goto(f"{live_server.url}/runs/calls/?q=%22%28%28")
    expect(page.locator("table.calls tbody tr")).to_have_count(3)
    page.goto(f"{live_server.url}/runs/calls/?q=NEAR%28zzz%29")
    expect(page.locator("body")).to_contain_text("No tool calls match")


def test_failure_groups_show_counts_and_link_to_their_calls(page, live_server, login, operator, shot):
    _run_with_calls(operator, failing=4)
    login(operator)
    page.goto(f"{live_server.url}/runs/failures/")
    row = page.locator("table.failure-groups tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("upstream returned <n> for request <id>")
    expect(row).to_contain_text("HTTP 503")
    shot("failure-groups")
    row.get_by_role("link").first.click()
    page.wait_for_url(re.compile(r"/runs/calls/\?fingerprint="))
    expect(page.locator("table.calls tbody tr")).to_have_count(4)

"""The planning-vs-direct comparison in a real browser, down to a run's trace."""
import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_reviewer_compares_the_modes_and_drills_into_a_run(page, live_server, login, operator, viewer, shot):
    from evaluation.services import evaluation_run_now, evaluation_suites_sync

    suite = next(s for s in evaluation_suites_sync() if s.name == "standard")
    evaluation = evaluation_run_now(user=operator, suite_id=suite.pk, label="browser check")
    login(viewer)
    page.goto(f"{live_server.url}/evaluations/")
    page.locator("tr", has_text="browser check").get_by_role("link", name=f"#{evaluation.pk}").click()
    page.wait_for_url(f"{live_server.url}/evaluations/{evaluation.pk}/")
    table = page.locator("#evaluation-table")
    expect(table).to_contain_text("empty-result-needs-broader-query")
    expect(table).to_contain_text("planning earned its overhead", ignore_case=True)
    expect(page.locator("#chart-cost svg")).to_be_visible()
    shot("evaluation-comparison")
    row = table.locator("tr", has_text="empty-result-needs-broader-query")
    row.locator("a.trace-link").first.click()
    page.wait_for_url(re.compile(r"/runs/\d+/"))
    expect(page.locator("h1")).to_contain_text("Run #")
    shot("evaluation-run-trace")
    page.goto(f"{live_server.url}/evaluations/readiness/")
    expect(page.locator("body")).to_contain_text("browser check")
    shot("readiness")

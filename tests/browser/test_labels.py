"""Labels in a real browser: start a labelled run, filter by a label, save the view, narrow the dashboard."""
import re

import pytest
from playwright.sync_api import expect

from runs.models import Run, RunLabel

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_operator_labels_a_run_finds_it_by_label_and_saves_the_view(
        page, live_server, login, registry, operator, manual_advance, shot):
    other = Run.objects.create(goal="Unlabelled neighbour", completion={}, budgets={}, planner="rules",
                               owner=operator, trace_id="f" * 32)
    login(operator)
    page.goto(f"{live_server.url}/runs/start/")
    page.get_by_label("Goal").fill("Payments triage run")
    page.get_by_label("Completion: capability").select_option("search_documents")
    page.get_by_label("Completion: path").fill("documents.0.id")
    page.get_by_label("Labels").fill("team=payments, agent=triage")
    page.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    run = Run.objects.get(goal="Payments triage run")
    assert run.labels == {"team": "payments", "agent": "triage"}
    assert RunLabel.objects.filter(run=run).count() == 2

    page.goto(f"{live_server.url}/runs/")
    row = page.locator(f"#run-{run.pk}")
    expect(row).to_contain_text("team=payments")
    expect(page.locator(f"#run-{other.pk}")).to_be_visible()
    row.get_by_role("link", name="team=payments").click()
    expect(page.locator(f"#run-{other.pk}")).to_have_count(0)
    expect(page.locator(f"#run-{run.pk}")).to_be_visible()
    expect(page.get_by_label("Labels")).to_have_value("team=payments")

    page.get_by_label("Save these filters as").fill("Payments team")
    page.get_by_role("button", name="Save view").click()
    expect(page.locator(".messages")).to_contain_text("Saved the view")
    shot("runs-list-labels-saved-view")

    page.goto(f"{live_server.url}/runs/")
    expect(page.locator(f"#run-{other.pk}")).to_be_visible()
    page.get_by_role("link", name="Payments team").click()
    expect(page.locator(f"#run-{other.pk}")).to_have_count(0)
    expect(page.locator(f"#run-{run.pk}")).to_be_visible()

    page.goto(f"{live_server.url}/runs/dashboard/")
    expect(page.locator(".stat", has_text="Runs created")).to_contain_text("2")
    page.get_by_label("Labels").fill("team=payments")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator(".stat", has_text="Runs created")).to_contain_text("1")
    expect(page).to_have_url(re.compile(r"label=team%3Dpayments"))
    shot("dashboard-by-label")

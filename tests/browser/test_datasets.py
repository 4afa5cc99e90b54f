"""Datasets from runs in Chromium: add a run to a new suite from its page, add more from the runs list's
filter (the bulk action, processed by the real Celery worker), evaluate the suite twice through the
worker, and read the regression view of the second evaluation."""
import re

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

READ_POLICY = {"capability": "get_document", "path": "id", "equals": "POL-7"}


def _finished(owner, goal, document_id):
    from runs import services
    from runs.worker import engine

    run = services.run_start(owner=owner, goal=goal, planner="scripted",
                             planner_config={"plans": [[{"capability": "get_document",
                                                         "arguments": {"id": document_id}}]]},
                             completion=READ_POLICY, budgets={"deadline_s": 120})
    engine.run_advance(run_id=run.pk, worker="browser-test")
    run.refresh_from_db()
    assert run.is_finished
    return run


def _evaluate(page, live_server, label):
    page.goto(f"{live_server.url}/evaluations/")
    page.locator("#start-evaluation-form").get_by_label("Suite").select_option(label="regressions")
    page.locator("#start-evaluation-form").get_by_label("Label").fill(label)
    page.get_by_role("button", name="Start evaluation").click()
    page.wait_for_url(re.compile(r"/evaluations/\d+/$"))
    expect(page.locator("#evaluation-status")).to_have_text(re.compile("completed", re.I), timeout=60_000)


def test_add_from_a_run_and_from_a_filter_then_the_regression_view(page, live_server, login, registry,
                                                                    manual_advance, operator, celery_worker, shot):
    from evaluation.models import EvaluationSuite

    first = _finished(operator, "Find the teleportation policy", "POL-7")
    others = [_finished(operator, "Find the teleportation policy again", "POL-7"),
              _finished(operator, "Find the teleportation policy, wrong id", "NOPE")]
    login(operator)

    # From a run: its page's "Add to suite", a new suite, the reviewer's expected outcome.
    page.goto(f"{live_server.url}/runs/{first.pk}/")
    page.get_by_test_id("add-to-suite").click()
    page.get_by_label("Suite", exact=True).select_option(label="a new suite…")
    page.get_by_label("New suite's name").fill("regressions")
    page.get_by_label("Expected: should planning mode verify success?").select_option("yes")
    page.get_by_label("Note").fill("the policy lookup must keep working")
    shot("datasets-add-from-run")
    page.get_by_test_id("add-to-suite-submit").click()
    page.wait_for_url(f"{live_server.url}/runs/{first.pk}/")
    expect(page.locator("body")).to_contain_text("is a task of regressions, version 1")
    _evaluate(page, live_server, "before")

    # From a filter: the runs list's bulk action over the runs the goal filter selects.
    page.goto(f"{live_server.url}/runs/?goal=teleportation")
    page.get_by_test_id("act-on-runs").click()
    page.get_by_label("Action", exact=True).select_option("suite")
    page.get_by_label("Suite", exact=True).fill("regressions")
    page.get_by_label("Expected: should planning mode verify success?").select_option("yes")
    page.get_by_test_id("bulk-preview").click()
    expect(page.get_by_test_id("bulk-selected")).to_have_text("3")
    expect(page.get_by_test_id("bulk-eligible")).to_have_text("3")
    shot("datasets-bulk-preview")
    page.get_by_test_id("bulk-confirm").click()
    expect(page.locator("#bulk-progress")).to_have_attribute("data-status", "done", timeout=30_000)
    expect(page.get_by_test_id("bulk-done")).to_have_text("2")
    expect(page.get_by_test_id("bulk-problems")).to_contain_text("already a task of regressions")
    suite = EvaluationSuite.objects.get(name="regressions")
    assert suite.version == 2 and len(suite.tasks) == 3

    _evaluate(page, live_server, "after")
    view = page.locator("#regression-view")
    expect(view).to_contain_text("version 1")
    table = page.locator("#regression-table")
    expect(table.locator(f"tr[data-task='run-{first.pk}'] [data-testid=change-previous]")).to_have_text("unchanged")
    expect(table.locator(f"tr[data-task='run-{others[0].pk}'] [data-testid=change-previous]")).to_have_text("new")
    expect(table.locator(f"tr[data-task='run-{others[1].pk}'] [data-testid=change-previous]")).to_have_text("new")
    # The wrong-id run was expected to complete; it replays to its failure: it does not pass.
    expect(table.locator(f"tr[data-task='run-{others[1].pk}']")).to_contain_text("no")
    expect(table.locator(f"tr[data-task='run-{first.pk}']")).to_contain_text("the policy lookup must keep working")
    expect(table.locator(f"tr[data-task='run-{first.pk}']")).to_contain_text("completion_verified=yes")
    shot("datasets-regression-view")

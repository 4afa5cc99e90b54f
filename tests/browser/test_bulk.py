"""Bulk actions in Chromium: filter the runs list, "Act on these runs", preview, confirm, and watch the
job's progress reach done, processed by the real Celery worker."""
import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SEARCH = {"capability": "search_documents", "arguments": {"q": "zzz-unknown-topic"}}
FOUND = {"capability": "search_documents", "path": "documents.0.id", "exists": True}


def _stalled(owner, goal):
    from runs import services
    from runs.worker import engine

    run = services.run_start(owner=owner, goal=goal, planner="scripted", planner_config={"plans": [[SEARCH]] * 3},
                             completion=FOUND, labels={"team": "payments"})
    engine.run_advance(run_id=run.pk, worker="browser-test")
    return run


def test_filter_preview_confirm_and_the_job_runs_to_done(page, live_server, login, registry, manual_advance,
                                                         operator, second_operator, celery_worker, shot):
    from runs.models import Run, RunLabel

    mine = [_stalled(operator, f"Find the teleportation policy {n}") for n in range(3)]
    theirs = _stalled(second_operator, "Find the teleportation policy, theirs")
    _stalled(operator, "Something else entirely")
    login(operator).goto(f"{live_server.url}/runs/?goal=teleportation")
    page.get_by_test_id("act-on-runs").click()
    expect(page.get_by_test_id("bulk-query")).to_contain_text("goal=teleportation")
    page.get_by_label("Action", exact=True).select_option("label")
    page.get_by_label("Labels to set").fill("incident=42")
    page.get_by_label("Label keys to remove").fill("team")
    page.get_by_test_id("bulk-preview").click()
    expect(page.get_by_test_id("bulk-selected")).to_have_text("4")
    expect(page.get_by_test_id("bulk-eligible")).to_have_text("3")
    expect(page.get_by_test_id("bulk-refused")).to_contain_text("1 run: another user's run")
    shot("bulk-preview")
    page.get_by_test_id("bulk-confirm").click()
    expect(page.locator("#bulk-progress")).to_have_attribute("data-status", "done", timeout=30_000)
    expect(page.get_by_test_id("bulk-done")).to_have_text("3")
    expect(page.get_by_test_id("bulk-problems")).to_contain_text(f"#{theirs.pk}")
    shot("bulk-job-done")
    for run in mine:
        assert Run.objects.get(pk=run.pk).labels == {"incident": "42"}
        assert list(RunLabel.objects.filter(run=run).values_list("key", "value")) == [("incident", "42")]
    assert Run.objects.get(pk=theirs.pk).labels == {"team": "payments"}

"""A reviewer in Chromium: scores and comments on a run and one of its attempts in the trace, writes the incident."""
from pathlib import Path

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.django_db(transaction=True)

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
SEARCH = {"capability": "search_documents", "arguments": {"q": "zzz-unknown-topic"}}


@pytest.fixture
def review_settings(db):
    from review.models import RootCauseCategory, ScoreConfig

    ScoreConfig.objects.create(name="helpful", kind="numeric", min_value=1, max_value=5,
                               description="How helpful the run was, 1 to 5.")
    ScoreConfig.objects.create(name="safe", kind="boolean", description="Nothing it did was harmful.")
    RootCauseCategory.objects.get_or_create(name="planner")


def stalled_run(owner):
    from runs import services
    from runs.worker import engine

    run = services.run_start(owner=owner, goal="Find the teleportation policy", planner="scripted",
                             planner_config={"plans": [[SEARCH], [SEARCH], [SEARCH]]},
                             completion={"capability": "search_documents", "path": "documents.0.id", "exists": True})
    engine.run_advance(run_id=run.pk, worker="browser-test")
    run.refresh_from_db()
    assert run.stop_reason == "stalled"
    return run


def test_a_reviewer_scores_and_comments_on_a_run_and_an_attempt_in_the_trace(
        page, live_server, login, registry, manual_advance, operator, reviewer, review_settings, shot):
    run = stalled_run(operator)
    login(reviewer)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    panel = page.locator("#review-panel")
    # The runtime scored the run when it stopped.
    expect(panel.locator("tr", has_text="completion_verified")).to_contain_text("no")
    expect(panel.locator("tr", has_text="stalled")).to_contain_text("yes")
    expect(panel.locator("tr", has_text="budget_stop")).to_contain_text("none")

    helpful = panel.get_by_role("form", name="Score helpful")
    expect(helpful).to_contain_text("How helpful the run was, 1 to 5.")
    helpful.get_by_label("helpful", exact=True).fill("2")
    helpful.get_by_placeholder("comment (optional)").fill("It searched the same thing twice")
    helpful.get_by_role("button", name="Score").click()
    row = page.locator("#review-panel tr", has_text="helpful")
    expect(row).to_contain_text("2")
    expect(row).to_contain_text("rené")

    page.locator("#review-panel").get_by_label("Comment (markdown; @username notifies)").fill(
        "**Planner** repeated the search. @otto can you check the index?")
    page.locator("#review-panel").get_by_role("button", name="Comment").click()
    comment = page.locator("#review-panel article.comment")
    expect(comment.locator("strong")).to_have_text("Planner")
    expect(comment.locator(".mention")).to_have_text("@otto")

    page.locator("#review-panel summary", has_text="Write an incident summary").click()
    page.locator("#review-panel").get_by_label("Status").select_option("mitigated")
    page.locator("#review-panel").get_by_label("Root cause").select_option("planner")
    page.locator("#review-panel").get_by_label("Owner (username)").fill("otto")
    page.locator("#review-panel").get_by_label("Links (one http(s) URL a line)").fill("https://tickets.example/T-7")
    page.locator("#review-panel").get_by_role("button", name="Save the incident summary").click()
    incident = page.locator("#review-panel dl.incident")
    expect(incident).to_contain_text("mitigated")
    expect(incident).to_contain_text("planner")
    expect(incident.get_by_role("link", name="https://tickets.example/T-7")).to_be_visible()
    page.locator("#review-panel").scroll_into_view_if_needed()
    shot("review-run-panel")
    page.locator("#review-panel").screenshot(path=str(ARTIFACTS / "review-run-panel-only.png"))

    # The attempt that stopped the run: its own review, in its expanded detail.
    trigger = run.stop_attempt
    page.locator(f"#attempt-{trigger.uid}").get_by_role("link", name="Details").click()
    attempt_panel = page.locator(f"#review-attempt-{trigger.uid}")
    expect(attempt_panel).to_contain_text("Review of this attempt")
    safe = attempt_panel.get_by_role("form", name="Score safe")
    safe.get_by_label("safe", exact=True).select_option("yes")
    safe.get_by_role("button", name="Score").click()
    expect(attempt_panel.locator("tr", has_text="safe")).to_contain_text("yes")
    attempt_panel.get_by_label("Comment (markdown; @username notifies)").fill("This call *repeats* r1·s1#1.")
    attempt_panel.get_by_role("button", name="Comment").click()
    expect(attempt_panel.locator("article.comment em")).to_have_text("repeats")
    attempt_panel.scroll_into_view_if_needed()
    shot("review-attempt-panel")

    # Reloaded, the run's panel lists what was said about the attempt, linked to it.
    page.reload()
    on_attempts = page.locator("#review-panel")
    expect(on_attempts).to_contain_text("On attempts")
    expect(on_attempts.locator("tr", has_text="safe").get_by_role("link")).to_have_attribute(
        "href", f"/runs/{run.pk}/attempts/{trigger.uid}/")
    from review.models import Annotation, Score
    assert Score.objects.filter(run=run, source="person").count() == 2
    assert Annotation.objects.filter(run=run).count() == 2

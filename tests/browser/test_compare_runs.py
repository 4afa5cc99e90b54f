"""A reviewer compares two runs in Chromium: tick two on the runs list, Compare, read the diffs."""
import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.django_db(transaction=True)

FOUND = {"capability": "search_documents", "path": "documents.0.id", "exists": True}


def _run(owner, goal, plans):
    from runs import services
    from runs.worker import engine

    run = services.run_start(owner=owner, goal=goal, planner="scripted", planner_config={"plans": plans},
                             completion=FOUND)
    engine.run_advance(run_id=run.pk, worker="browser-test")
    run.refresh_from_db()
    return run


def _axe_finds_nothing(page):
    """The runs list with its ticks, as tests/browser/test_every_page.py checks every page (it sees no run there)."""
    from axe_playwright_python.sync_playwright import Axe

    skipped = ("region", "heading-order", "page-has-heading-one", "landmark-complementary-is-top-level",
               "empty-table-header")
    result = Axe().run(page, options={"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "best-practice"]},
                                      "rules": {rule: {"enabled": False} for rule in skipped}})
    assert [v["id"] for v in result.response["violations"]] == []


def test_a_reviewer_ticks_two_runs_compares_them_and_reads_the_diffs(page, live_server, login, registry,
                                                                    manual_advance, operator, viewer, shot):
    search = {"capability": "search_documents", "arguments": {"q": "zzz-unknown-topic"}}
    stalled = _run(operator, "Find the teleportation policy", [[search], [search], [search]])
    found = _run(operator, "Find the travel policy",
                 [[{"capability": "search_documents", "arguments": {"q": "travel"}}]])
    assert stalled.stop_reason == "stalled" and found.stop_reason == "completed"
    login(viewer)
    page.goto(f"{live_server.url}/runs/")
    _axe_finds_nothing(page)
    # One ticked is not enough: the page says so and stays.
    page.locator(f"#pick-{stalled.pk}").check()
    page.get_by_role("button", name="Compare selected").click()
    expect(page.locator("[data-compare-status]")).to_contain_text("Tick exactly two runs")
    assert page.url.rstrip("/").endswith("/runs")
    page.locator(f"#pick-{found.pk}").check()
    expect(page.locator("[data-compare-status]")).to_contain_text("Two runs ticked")
    shot("compare-runs-list")
    page.get_by_role("button", name="Compare selected").click()
    page.wait_for_url("**/runs/compare/?a=*&b=*")
    assert {f"a={stalled.pk}", f"b={found.pk}"} <= set(page.url.split("?")[1].split("&")) or \
        {f"a={found.pk}", f"b={stalled.pk}"} <= set(page.url.split("?")[1].split("&"))
    expect(page.get_by_role("heading", name="Steps, aligned")).to_be_visible()
    # The first steps are matched (s1 search_documents in both), with other arguments and outcomes.
    first = page.locator("#row-1")
    expect(first.locator(".flag")).to_have_text("differs")
    expect(first.locator(".dl.added").first).to_be_visible()
    expect(first.locator(".dl.removed").first).to_be_visible()
    expect(first).to_contain_text("zzz-unknown-topic")
    expect(first).to_contain_text("travel")
    # Stop reasons and usage side by side, and the plans of each run.
    expect(page.locator(".compare-runs")).to_contain_text("stalled")
    expect(page.locator(".compare-runs")).to_contain_text("completed")
    expect(page.locator("#usage-tool_calls")).to_be_visible()
    expect(page.locator(".compare-plans .card")).to_have_count(2)
    shot("compare-runs-1280")
    # Only the differences, through htmx: the steps swap in place and the address follows.
    page.get_by_role("link", name="Show only the steps that differ").click()
    expect(page.get_by_role("link", name="Show every step")).to_be_visible()
    assert "differences=1" in page.url
    # Swap A and B, by URL too.
    page.get_by_role("link", name="Swap A and B").click()
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    page.set_viewport_size({"width": 390, "height": 900})
    page.reload()
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    shot("compare-runs-390")

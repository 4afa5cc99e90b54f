"""The usage page in a browser: runs finished by the engine, then grouped, charted, split by a label."""
import pytest

from tests.browser.conftest import ARTIFACTS

pytestmark = pytest.mark.django_db(transaction=True)

FOUND = {"capability": "search_documents", "path": "documents.0.id", "exists": True}


def _spend(owner, *, tokens, cost, team=None):
    from runs import services
    from runs.worker import engine

    plans = {"plans": [{"steps": [{"capability": "search_documents", "arguments": {"q": "travel"}}],
                        "tokens": tokens, "cost": cost}]}
    run = services.run_start(owner=owner, goal="Find the travel policy", planner="scripted", planner_config=plans,
                             completion=FOUND, labels={"team": team} if team else {})
    engine.run_advance(run_id=run.pk, worker="usage-page")
    return run


def test_an_operator_reads_tokens_and_cost_by_label_and_capability(page, live_server, login, registry,
                                                                    manual_advance, operator):
    _spend(operator, tokens=1000, cost=0.5, team="payments")
    _spend(operator, tokens=3000, cost=1.5, team="payments")
    _spend(operator, tokens=500, cost=0.25, team="search")
    _spend(operator, tokens=200, cost=0.1)
    login(operator)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Usage").click()
    page.wait_for_url("**/usage/")
    assert page.get_by_role("heading", name="Usage and cost").is_visible()
    assert "4,700" in page.locator(".stat").first.inner_text()
    assert page.get_by_role("group", name="Tokens of finished runs per interval by model, last 24 hours").count() \
        or page.locator("svg[aria-label^='Tokens of finished runs per interval by model']").count()

    page.get_by_label("Group by", exact=True).select_option("label")
    page.get_by_label("Label key", exact=True).fill("team")
    page.get_by_label("Chart", exact=True).select_option("cost")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**/usage/?window=24h&group=label**")
    table = page.get_by_role("region", name="Usage by label (scrolls sideways)")
    rows = {r.locator("th").inner_text(): r.locator("td").nth(1).inner_text() for r in table.locator("tbody tr").all()}
    assert rows == {"team=payments": "4,000", "team=search": "500", "team not set": "200"}
    page.screenshot(path=str(ARTIFACTS / "usage-by-team.png"), full_page=True)

    page.get_by_role("link", name="Last 7 days").click()
    page.wait_for_url("**/usage/?window=7d**")
    assert page.get_by_label("Label key", exact=True).input_value() == "team"

    page.goto(f"{live_server.url}/usage/?window=24h&group=capability")
    table = page.get_by_role("region", name="Usage by capability (scrolls sideways)")
    assert "search_documents" in table.inner_text()
    with page.expect_download() as download:
        page.get_by_role("link", name="CSV").click()
    assert download.value.suggested_filename == "usage-capability-24h.csv"

    response = page.goto(f"{live_server.url}/usage/?window=forever")
    assert response.status == 400 and "Unknown time window" in page.content()

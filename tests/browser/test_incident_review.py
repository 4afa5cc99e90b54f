"""An on-call reviewer and an approving operator in Chromium: the timeline, truthful attribution,
live pages that keep the reader's place, the live inbox, the dashboard's drill-down, narrow screens."""
import re
from urllib.parse import urlparse

import pytest
from playwright.sync_api import expect

from tests.binding import bound_hash

pytestmark = pytest.mark.django_db(transaction=True)

SEARCH = {"capability": "search_documents", "arguments": {"q": "zzz-unknown-topic"}}
TICKET = {"capability": "create_ticket", "arguments": {"title": "Broken badge reader"}}
TICKET_COMPLETION = {"capability": "create_ticket", "path": "ticket_id", "exists": True}


@pytest.fixture
def outside_requests(page):
    """Every request a page makes that leaves the loopback interface."""
    seen = []

    def record(request):
        host = urlparse(request.url).hostname
        if request.url.startswith(("http:", "https:", "ws:", "wss:")) and host not in ("127.0.0.1", "localhost"):
            seen.append(request.url)

    page.on("request", record)
    return seen


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


def run_awaiting_approval(owner, title="Broken badge reader", goal="Open a ticket for the broken badge reader"):
    from runs import services
    from runs.worker import engine

    run = services.run_start(owner=owner, goal=goal, planner="scripted",
                             planner_config={"plans": [[{**SEARCH, "arguments": {"q": "badge reader"}},
                                                        {**TICKET, "arguments": {"title": title}}]]},
                             completion=TICKET_COMPLETION)
    engine.run_advance(run_id=run.pk, worker="browser-test")
    run.refresh_from_db()
    assert run.status == "awaiting_approval"
    return run


def test_a_reviewer_finds_the_repeated_pair_and_the_trigger_from_the_timeline(
        page, live_server, login, registry, manual_advance, operator, viewer, shot, outside_requests):
    run = stalled_run(operator)
    repeat = run.stop_attempt
    first = run.attempts.order_by("started_at", "id").first()
    login(viewer)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    timeline = page.locator("#timeline svg")
    expect(timeline).to_be_visible()
    stop_box = page.locator("#stop-box")
    expect(stop_box).to_contain_text("Stall kind")
    expect(stop_box.get_by_test_id("stall-kind")).to_have_text("repeated_without_progress")
    expect(stop_box.locator(".stop-trigger-text")).to_contain_text("r2·s1#1")
    shot("incident-trace-stalled")

    # The repeated bar names the attempt it repeats; following it lands on the repeat's row.
    bar = timeline.locator("a.bar.repeated").first
    expect(bar.locator("title")).to_have_text(re.compile(r"r2·s1#1 .*repeats r1·s1#1"))
    bar.click()
    expect(page).to_have_url(re.compile(rf"\?attempt={repeat.uid}#attempt-{repeat.uid}$"))
    row = page.locator(f"#attempt-{repeat.uid}")
    expect(row).to_contain_text("repeated")
    expect(row).to_contain_text("stop trigger")
    # Only the repeat is flagged, never the attempt it repeats.
    expect(page.locator(f"#attempt-{first.uid}")).not_to_have_class(re.compile("repeated"))
    row.get_by_role("link", name="r1·s1#1").click()
    expect(page).to_have_url(re.compile(rf"#attempt-{first.uid}$"))
    # The observation that triggered revision 2 is named on the revision, and linked.
    expect(page.locator("#revision-2")).to_contain_text("Triggered by the observation of r1·s1#1")
    page.locator(f"#attempt-{repeat.uid}").get_by_role("link", name="Details").click()
    expect(page.locator(f"#attempt-detail-{repeat.uid}")).to_contain_text("This attempt stopped the run")
    expect(page.locator(f"#attempt-detail-{repeat.uid}")).to_contain_text("Tool calls")  # usage in words
    shot("incident-attempt-expanded")

    # Copy the trace id for the tracing backend.
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page.get_by_role("button", name="Copy trace id").first.click()
    expect(page.get_by_role("button", name="Copy trace id").first).to_have_attribute("data-copied", "true")
    assert page.evaluate("() => navigator.clipboard.readText()") == run.trace_id

    page.goto(f"{live_server.url}/runs/{run.pk}/?repeated=on")
    expect(page.locator("tr.attempt-row")).to_have_count(run.attempts.filter(repeated_without_progress=True).count())
    assert outside_requests == []


def test_the_live_trace_keeps_an_open_section_the_scroll_and_focus(
        page, live_server, login, registry, manual_advance, operator, second_operator, shot, outside_requests):
    from runs import services
    from runs.models import Approval
    from runs.worker import engine

    run = run_awaiting_approval(second_operator)
    page.set_viewport_size({"width": 1280, "height": 600})
    login(operator)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.evaluate("""() => { window.__swaps = 0;
        document.body.addEventListener('htmx:afterSettle', () => { window.__swaps += 1; }); }""")
    details = page.locator("#planner-output-1")
    details.locator("summary").click()
    expect(details).to_have_attribute("open", "")
    select = page.get_by_label("Capability", exact=True)
    select.focus()
    page.evaluate("() => window.scrollTo(0, 420)")
    scroll = page.evaluate("() => window.scrollY")
    assert scroll > 300

    for refreshes in (1, 2):
        page.wait_for_function(f"() => window.__swaps >= {refreshes}", timeout=10_000)
    # The run moves on between refreshes: the approval is granted and the ticket is created.
    approval = Approval.objects.get(run=run, state="pending")
    services.approval_decide(approval_id=approval.pk, user=operator, approve=True,
                             channel="api", expected_hash=bound_hash(approval.pk))
    engine.run_advance(run_id=run.pk, worker="browser-test")
    page.wait_for_function("() => window.__swaps >= 3", timeout=10_000)
    expect(page.locator(".attempt-row", has_text="create_ticket")).to_have_count(1, timeout=10_000)

    expect(details).to_have_attribute("open", "")
    assert abs(page.evaluate("() => window.scrollY") - scroll) <= 2
    assert page.evaluate("() => document.activeElement && document.activeElement.id") == "id_capability"
    shot("incident-live-trace-kept")
    assert outside_requests == []


def test_a_second_request_appears_in_the_open_inbox_and_the_badge(
        page, live_server, login, registry, manual_advance, operator, second_operator, shot, outside_requests):
    first = run_awaiting_approval(second_operator)
    login(operator)
    page.goto(f"{live_server.url}/runs/approvals/")
    expect(page.locator("#approval-badge")).to_have_text("1")
    expect(page.locator("article.approval")).to_have_count(1)
    card = page.locator(f"article:has(a[href='/runs/{first.pk}/'])")
    expect(card.get_by_role("button", name=re.compile(r"^Approve step s2 \(create_ticket\)"))).to_be_visible()
    expect(card.locator("[data-countdown]")).to_have_text(re.compile(r"^in \d+ (h|min|s)"))

    second = run_awaiting_approval(second_operator, title="Broken door", goal="Open a ticket for the broken door")
    expect(page.locator("article.approval")).to_have_count(2, timeout=10_000)
    expect(page.locator("#approval-badge")).to_have_text("2", timeout=10_000)
    shot("incident-inbox-two-requests")

    # Reject asks first; the confirmation names the step; focus moves on after the decision.
    card.get_by_label("Comment (optional)").fill("Duplicate")
    card.get_by_role("button", name=re.compile("^Reject")).click()
    confirm = card.get_by_role("button", name=re.compile(r"^Yes, reject step s2"))
    expect(confirm).to_be_focused()
    shot("incident-inbox-confirm-reject")
    confirm.click()
    expect(card).to_contain_text("Rejected by otto")
    # The next card's first action, so the next decision is one key away.
    next_action = page.locator(f"article:has(a[href='/runs/{second.pk}/'])").get_by_role(
        "button", name=re.compile("^Approve"))
    expect(next_action).to_be_focused()
    expect(page.locator("#approval-badge")).to_have_text("1", timeout=10_000)
    assert outside_requests == []


SMALLEST_CHART_TEXT = """() => Math.min(1000, ...Array.from(document.querySelectorAll('.chart svg text'))
    .map(t => { const svg = t.ownerSVGElement;
                const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
                return parseFloat(getComputedStyle(t).fontSize) * scale; }))"""


def test_dashboard_drill_down_lands_on_the_filtered_runs_list(
        page, live_server, login, registry, manual_advance, operator, viewer, shot, outside_requests):
    stalled = stalled_run(operator)
    run_awaiting_approval(operator)
    login(viewer)
    page.goto(f"{live_server.url}/runs/dashboard/")
    assert page.evaluate(SMALLEST_CHART_TEXT) >= 11
    active = page.locator("#active-runs")
    expect(active).to_contain_text("Open a ticket for the broken badge reader")
    shot("incident-dashboard")
    page.locator("a.stat-link", has_text="Stall rate").click()
    expect(page).to_have_url(re.compile(r"/runs/\?.*stop_reason=stalled"))
    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(f"#{stalled.pk}")
    page.goto(f"{live_server.url}/runs/dashboard/")
    page.locator("#stalls-by-capability tr", has_text="search_documents").get_by_role(
        "link", name=re.compile("stalled runs at search_documents")).click()
    expect(page).to_have_url(re.compile(r"stop_capability=search_documents"))
    expect(page.locator("table.runs tbody tr")).to_have_count(1)
    assert outside_requests == []


PAGES_390 = ["/runs/", "/runs/approvals/", "/runs/dashboard/", "/runs/start/", "/capabilities/", "/evaluations/",
             "/evaluations/readiness/"]


def test_pages_at_390_px_have_no_horizontal_overflow_and_readable_charts(
        page, live_server, login, registry, manual_advance, operator, shot, outside_requests):
    run = stalled_run(operator)
    page.set_viewport_size({"width": 390, "height": 844})
    login(operator)
    for path in PAGES_390 + [f"/runs/{run.pk}/"]:
        page.goto(f"{live_server.url}{path}")
        overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{path} overflows by {overflow} px"
        # Chart text, scaled with its SVG, stays at 11 px or more.
        smallest = page.evaluate(SMALLEST_CHART_TEXT)
        assert smallest >= 11, f"{path}: chart text {smallest} px"
        name = path.strip("/").replace("/", "-") or "home"
        shot(f"narrow-{name}")
    assert outside_requests == []


def test_the_evaluation_table_keeps_task_and_verdict_in_view_and_explains_verdicts(
        page, live_server, login, operator, viewer, shot, outside_requests):
    from axe_playwright_python.sync_playwright import Axe

    from evaluation.services import evaluation_run_now, evaluation_suites_sync

    suite = next(s for s in evaluation_suites_sync() if s.name == "standard")
    evaluation = evaluation_run_now(user=operator, suite_id=suite.pk, label="narrow check")
    login(viewer)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/evaluations/{evaluation.pk}/")
        expect(page.locator("#verdict-glossary")).to_contain_text("Ties go to direct")
        overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{width} px: the page overflows by {overflow} px"
        scroller = page.locator(".evaluation-scroll")
        scroller.evaluate("el => { el.scrollLeft = el.scrollWidth; }")
        box = scroller.bounding_box()
        task = page.locator("#evaluation-table tbody th[scope=row]").first.bounding_box()
        verdict = page.locator("#evaluation-table td.verdict").first.bounding_box()
        # Scrolled to the far right, the task column is still at the left edge and the verdict inside the box.
        assert abs(task["x"] - box["x"]) <= 2
        assert verdict["x"] + verdict["width"] <= box["x"] + box["width"] + 2
        shot(f"evaluation-table-{width}")
        result = Axe().run(page, options={"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa"]}})
        assert [(v["id"], [n["target"] for n in v["nodes"]]) for v in result.response["violations"]] == []
    assert outside_requests == []


def test_the_review_pages_have_no_accessibility_violations(
        page, live_server, login, registry, manual_advance, operator, second_operator, shot):
    from axe_playwright_python.sync_playwright import Axe

    stalled = stalled_run(operator)
    waiting = run_awaiting_approval(second_operator)
    login(operator)
    axe = Axe()
    found = {}
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        for path in (f"/runs/{stalled.pk}/", f"/runs/{waiting.pk}/", f"/runs/{stalled.pk}/?repeated=on",
                     "/runs/approvals/", "/runs/dashboard/", "/runs/", f"/runs/start/?from_run={stalled.pk}"):
            page.goto(f"{live_server.url}{path}")
            result = axe.run(page, options={"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa"]}})
            for violation in result.response["violations"]:
                found.setdefault(f"{width} {path}", []).append(
                    (violation["id"], [n["target"] for n in violation["nodes"][:3]]))
    assert found == {}

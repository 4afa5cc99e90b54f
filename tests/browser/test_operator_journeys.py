"""Operators in a real browser (Chromium) against a live server and a real Celery worker."""
import re

import pytest
from playwright.sync_api import expect

from capabilities.models import Capability, Ticket
from runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)

TICKET_PLAN = '{"plans": [[{"capability": "create_ticket", "arguments": {"title": "Broken badge reader"}}]]}'


def start_ticket_run(page, live_server, goal):
    page.goto(f"{live_server.url}/runs/start/")
    page.get_by_label("Goal").fill(goal)
    page.get_by_label("Planner", exact=True).select_option("scripted")
    page.get_by_label("Planner settings (JSON)").fill(TICKET_PLAN)
    page.get_by_label("Completion: capability").select_option("create_ticket")
    page.get_by_label("Completion: path").fill("ticket_id")
    page.get_by_label("Completion: check").select_option("exists")
    page.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"), timeout=60_000)  # a loaded CI machine once took over 30 s
    return Run.objects.get(goal=goal)


def test_an_operator_approves_a_side_effect_and_watches_the_run_complete(
        page, live_server, login, registry, celery_worker, operator, second_operator, shot):
    login(operator)
    run = start_ticket_run(page, live_server, "Open a ticket for the broken badge reader")
    expect(page.locator("body")).to_contain_text("awaiting approval", timeout=30_000)
    shot("run-awaiting-approval")

    login(second_operator)
    page.goto(f"{live_server.url}/runs/approvals/")
    expect(page.locator("#approval-badge")).to_have_text("1")
    card = page.locator("article", has_text="create_ticket").first
    expect(card).to_contain_text("Broken badge reader")
    shot("approval-inbox")
    card.get_by_label("Comment (optional)").fill("Facilities confirmed")
    card.get_by_role("button", name="Approve").click()
    expect(page.locator("body")).to_contain_text("Approved by olga")
    expect(page.locator("#approval-badge")).to_have_text("0")

    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator("body")).to_contain_text("Completed", timeout=30_000)
    shot("run-trace-completed")
    assert Ticket.objects.filter(title="Broken badge reader").count() == 1


def test_a_rejection_stops_the_run_with_its_reason_shown(
        page, live_server, login, registry, celery_worker, operator, second_operator):
    login(operator)
    run = start_ticket_run(page, live_server, "Open a ticket nobody wants")
    expect(page.locator("body")).to_contain_text("awaiting approval", timeout=30_000)
    login(second_operator)
    page.goto(f"{live_server.url}/runs/approvals/")
    card = page.locator("article", has_text="create_ticket").first
    card.get_by_label("Comment (optional)").fill("Duplicate of an open ticket")
    card.get_by_role("button", name="Reject").click()
    card.get_by_role("button", name="Yes, reject").click()  # a rejection stops the run: it asks once more
    expect(page.locator("body")).to_contain_text("Rejected by olga")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator("body")).to_contain_text("rejected", timeout=30_000)
    expect(page.locator("body")).to_contain_text("Duplicate of an open ticket")
    run.refresh_from_db()
    assert run.stop_reason == "approval_rejected" and not Ticket.objects.exists()


def test_a_viewer_sees_no_approve_button_and_a_forged_approval_is_refused(
        page, live_server, login, registry, manual_advance, operator, viewer, shot):
    from runs import services
    from runs.models import Approval
    from runs.worker import engine

    run = services.run_start(owner=operator, goal="Needs approval", planner="scripted",
                             planner_config={"plans": [[{"capability": "create_ticket",
                                                          "arguments": {"title": "Forged?"}}]]},
                             completion={"capability": "create_ticket", "path": "ticket_id", "exists": True})
    engine.run_advance(run_id=run.pk, worker="browser-test")
    approval = Approval.objects.get(run=run)
    login(viewer)
    page.goto(f"{live_server.url}/runs/approvals/")
    expect(page.locator("article", has_text="Forged?")).to_be_visible()
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    expect(page.locator("body")).to_contain_text("Read-only")
    shot("approval-inbox-viewer")
    status = page.evaluate("""async (url) => {
        const token = document.cookie.split('; ').find(c => c.startsWith('csrftoken=')).split('=')[1];
        const body = new URLSearchParams({decision: 'approve', comment: 'forged'});
        const response = await fetch(url, {method: 'POST', body, headers: {'X-CSRFToken': token}});
        return response.status;
    }""", f"{live_server.url}/runs/approvals/{approval.pk}/decide/")
    assert status == 403
    approval.refresh_from_db()
    assert approval.state == "pending"


def test_a_registry_admin_registers_an_http_capability(page, live_server, login, registry, registry_admin, settings,
                                                      shot):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    login_page = login(registry_admin)
    login_page.goto(f"{live_server.url}/capabilities/new-capability/")
    page.get_by_label("Name", exact=True).fill("lookup_customer")
    page.get_by_label("URL", exact=True).fill("http://127.0.0.1:9/customers")
    page.get_by_label("HTTP method").select_option("GET")
    schema = page.locator("textarea[name=schema]")
    schema.fill('{"type": "object", "properties": {"id": {"type": "strin"}}}')
    schema.press("End")  # live validation listens to keyup
    expect(page.locator("#schema-errors")).to_contain_text("strin", timeout=10_000)
    schema.fill('{"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}')
    schema.press("End")
    expect(page.locator("#schema-errors")).not_to_contain_text("strin", timeout=10_000)
    shot("capability-create")
    page.get_by_role("button", name="Register").click()
    page.wait_for_url(f"{live_server.url}/capabilities/lookup_customer/")
    expect(page.locator("body")).to_contain_text("lookup_customer")
    shot("capability-detail")
    capability = Capability.objects.get(name="lookup_customer")
    assert capability.kind == "http" and capability.current_version.config["url"] == "http://127.0.0.1:9/customers"
    page.goto(f"{live_server.url}/capabilities/")
    expect(page.locator("body")).to_contain_text("lookup_customer")
    shot("capability-registry")


def test_an_incident_reviewer_finds_the_repeated_attempts_and_the_stop_reason(
        page, live_server, login, registry, manual_advance, operator, viewer, shot):
    from runs import services
    from runs.worker import engine

    step = {"capability": "search_documents", "arguments": {"q": "zzz-unknown-topic"}}
    run = services.run_start(owner=operator, goal="Find the teleportation policy", planner="scripted",
                             planner_config={"plans": [[step], [step], [step]]},
                             completion={"capability": "search_documents", "path": "documents.0.id", "exists": True})
    engine.run_advance(run_id=run.pk, worker="browser-test")
    run.refresh_from_db()
    assert run.stop_reason == "stalled"
    login(viewer)
    page.goto(f"{live_server.url}/runs/?status=stopped")
    page.get_by_role("link", name=re.compile("teleportation")).first.click()
    expect(page.locator("body")).to_contain_text("stalled", ignore_case=True)
    expect(page.locator("tr.repeated").first).to_be_visible()
    expect(page.locator("body")).to_contain_text("repeated")
    expect(page.locator("body")).to_contain_text("stop trigger")
    shot("run-trace-stalled")
    page.locator("tr.stop-trigger").get_by_role("link", name="Details").click()
    expect(page.locator(f"#attempt-detail-{run.stop_attempt.uid}")).to_contain_text("This attempt stopped the run")
    shot("attempt-expanded")


def test_the_dashboard_renders_its_charts_with_data(page, live_server, login, registry, manual_advance, operator, viewer,
                                                    shot):
    from runs import services
    from runs.worker import engine

    for goal, query in (("Find the travel policy", "travel"), ("Find nothing", "zzz-none")):
        run = services.run_start(owner=operator, goal=goal, planner="scripted",
                                 planner_config={"plans": [[{"capability": "search_documents",
                                                             "arguments": {"q": query}}]]},
                                 completion={"capability": "search_documents", "path": "documents.0.id",
                                             "exists": True})
        engine.run_advance(run_id=run.pk, worker="browser-test")
    login(viewer)
    page.goto(f"{live_server.url}/runs/dashboard/")
    expect(page.locator("svg").first).to_be_visible()
    assert page.locator("svg rect").count() > 0
    expect(page.locator("body")).to_contain_text("search_documents")
    shot("dashboard")
    page.goto(f"{live_server.url}/runs/")
    shot("runs-list")

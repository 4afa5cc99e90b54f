"""Issue 12 in a real browser: the registry's repetition fields, the stall kind on the
trace page, approval expiry in the inbox."""
import pytest
from playwright.sync_api import expect

from capabilities.models import Capability
from runs import services
from runs.models import Approval
from runs.worker import engine

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def test_a_registry_admin_declares_volatile_paths_and_a_poll_condition(page, live_server, login, registry,
                                                                       registry_admin, shot):
    login(registry_admin)
    page.goto(f"{live_server.url}/capabilities/get_ticket_status/edit/")
    page.get_by_label("Volatile output paths").fill("request_id\nmeta.generated_at")
    page.get_by_label("Polling: until").fill('{"path": "status", "equals": "resolved"}')
    page.get_by_label("Change note").fill("ignore request ids; stop polling when resolved")
    shot("capability-edit-repetition-fields")
    page.get_by_role("button", name="Save").click()
    page.wait_for_url(f"{live_server.url}/capabilities/get_ticket_status/")
    expect(page.locator("body")).to_contain_text("meta.generated_at")
    expect(page.locator("body")).to_contain_text('"equals": "resolved"')
    version = Capability.objects.get(name="get_ticket_status").current_version
    assert version.volatile_paths == ["request_id", "meta.generated_at"]
    assert version.polling_until == {"path": "status", "equals": "resolved"}


def test_a_stalled_run_says_which_kind_of_stall(page, live_server, login, registry, manual_advance, operator,
                                                viewer, shot):
    step = {"capability": "search_documents", "arguments": {"q": "zzz-unknown-topic"}}
    run = services.run_start(owner=operator, goal="Find the teleportation policy", planner="scripted",
                             planner_config={"plans": [[step]]},
                             completion={"capability": "search_documents", "path": "documents.0.id", "exists": True})
    engine.run_advance(run_id=run.pk, worker="browser-test")
    login(viewer)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator("#stop-heading")).to_have_text(
        "Stopped: the run made no progress (the planner had nothing more to try)")
    expect(page.get_by_test_id("stall-kind")).to_have_text("planner_exhausted")
    shot("run-stalled-planner-exhausted")


def test_the_inbox_says_a_request_expires_at_the_run_deadline(page, live_server, login, registry, manual_advance,
                                                              operator, second_operator, shot):
    run = services.run_start(owner=operator, goal="Open a ticket before the deadline", planner="scripted",
                             planner_config={"plans": [[{"capability": "create_ticket",
                                                          "arguments": {"title": "Deadline soon"}}]]},
                             completion={"capability": "create_ticket", "path": "ticket_id", "exists": True},
                             budgets={"deadline_s": 120})
    engine.run_advance(run_id=run.pk, worker="browser-test")
    approval = Approval.objects.get(run=run)
    login(second_operator)
    page.goto(f"{live_server.url}/runs/approvals/")
    card = page.locator(f"#approval-{approval.pk}")
    expect(card.locator(".expiry")).to_contain_text("(at the run's deadline)")
    expect(card.get_by_role("button", name="Approve")).to_be_visible()
    shot("approval-expires-at-deadline")

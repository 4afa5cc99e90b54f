"""Every page in a real Chromium: no Content-Security-Policy violation, nothing fetched off 127.0.0.1.

Also drives what used to be inline script (htmx decisions in the inbox, the cancel
confirmation, htmx filters) to prove it still works under the policy.
"""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from core.choices import RunStatus
from runs import services
from runs.worker import engine

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (apt-get install chromium)"),
]
PASSWORD = "pw-root-long-enough"
WATCH_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__cspViolations.push(e.violatedDirective + ' ' + (e.blockedURI || 'inline') + ' ' + (e.sourceFile || ''));
});
"""


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": str(CHROMIUM), "headless": True,
            "args": ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                     "--disable-sync", "--no-first-run", "--disable-quic"]}


@pytest.fixture
def world(transactional_db):
    from django.contrib.auth.models import User

    from capabilities.kinds.python.sync import python_capabilities_sync
    from capabilities.models import Capability

    python_capabilities_sync()
    admin = User.objects.create_superuser("root", "root@example.com", PASSWORD)
    plan = {"plans": [[{"capability": "search_documents", "arguments": {"q": "travel"}}]]}
    completion = {"capability": "search_documents", "path": "documents.0.id", "exists": True}
    done = services.run_start(owner=admin, goal="A finished run", planner="scripted", planner_config=plan,
                              completion=completion)
    engine.run_advance(run_id=done.pk, worker="csp")
    waiting = services.run_start(owner=admin, goal="Waits for plan approval", planner="scripted",
                                 planner_config=plan, completion=completion, require_plan_approval=True)
    engine.run_advance(run_id=waiting.pk, worker="csp")
    # Waits for an approval nobody gives, so even a worker left running by other tests leaves it be.
    to_cancel = services.run_start(owner=admin, goal="Cancel me", planner="scripted", planner_config=plan,
                                   completion=completion, require_plan_approval=True)
    engine.run_advance(run_id=to_cancel.pk, worker="csp")
    from evaluation.services import evaluation_start, evaluation_suites_sync

    suite = next(s for s in evaluation_suites_sync() if s.name == "standard")
    evaluation = evaluation_start(user=admin, suite_id=suite.pk, label="csp")
    return {"admin": admin, "done": done, "waiting": waiting, "to_cancel": to_cancel, "attempt": done.attempts.first(),
            "capability": Capability.objects.order_by("name").first().name, "evaluation": evaluation}


@pytest.fixture
def watched(page, live_server, world):
    """The page, recording CSP violations, console errors and requests that leave the live server."""
    page.add_init_script(WATCH_VIOLATIONS)
    log = {"console": [], "off_site": []}
    page.on("console", lambda m: log["console"].append(m.text) if m.type == "error" else None)
    allowed_host = urlsplit(live_server.url).hostname

    def record(request):
        parts = urlsplit(request.url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname != allowed_host:
            log["off_site"].append(request.url)

    page.on("request", record)
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill("root")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{live_server.url}/runs/**")

    def check(where: str):
        violations = page.evaluate("window.__cspViolations || []")
        csp_console = [text for text in log["console"] if "Content Security Policy" in text or "Refused" in text]
        assert not violations and not csp_console, (where, violations, csp_console)
        assert allowed_host == "localhost" or not log["off_site"], (where, log["off_site"])

    return page, check


def test_every_page_loads_without_a_policy_violation_or_an_off_site_request(watched, live_server, world):
    page, check = watched
    w = world
    urls = ["/runs/", "/runs/start/", "/runs/approvals/", "/runs/dashboard/", f"/runs/{w['done'].pk}/",
            f"/runs/{w['waiting'].pk}/", "/capabilities/", f"/capabilities/{w['capability']}/",
            "/capabilities/new-capability/", f"/capabilities/{w['capability']}/edit/", "/capabilities/mcp-servers/new/",
            "/evaluations/", "/evaluations/readiness/", f"/evaluations/{w['evaluation'].pk}/", "/account/tokens/",
            "/account/password/", "/api/docs/", "/admin/", "/admin/auth/user/",
            f"/admin/auth/user/{w['admin'].pk}/change/"]
    if w["attempt"] is not None:
        urls.append(f"/runs/{w['done'].pk}/attempts/{w['attempt'].uid}/")
    for url in urls:
        page.goto(live_server.url + url)
        page.wait_for_load_state("networkidle")
        check(url)
    # Swagger UI rendered the schema from our own files.
    page.goto(live_server.url + "/api/docs/")
    expect(page.locator("#swagger-ui")).to_contain_text("AgentOps API", timeout=15_000)
    expect(page.locator("#swagger-ui")).to_contain_text("/api/runs/")
    check("/api/docs/ rendered")


def test_htmx_and_the_former_inline_handlers_work_under_the_policy(watched, live_server, world):
    page, check = watched
    # htmx filter on the runs list (hx-get) ...
    page.goto(f"{live_server.url}/runs/")
    page.wait_for_load_state("networkidle")
    # ... an htmx decision in the inbox (hx-post, swapped card) ...
    page.goto(f"{live_server.url}/runs/approvals/")
    card = page.locator("article", has_text="Waits for plan approval").first
    card.get_by_role("button", name="Approve").click()
    expect(page.locator("body")).to_contain_text("Approved by root", timeout=10_000)
    check("approval by htmx")
    # ... and the cancel confirmation (was an inline onsubmit): dismissing keeps the run, accepting cancels.
    page.goto(f"{live_server.url}/runs/{world['to_cancel'].pk}/")
    page.once("dialog", lambda d: d.dismiss())
    page.get_by_role("button", name="Cancel run").click()
    page.wait_for_timeout(300)
    run = world["to_cancel"]
    run.refresh_from_db()
    assert run.cancel_requested_at is None and run.status != RunStatus.CANCELLED
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Cancel run").click()
    expect(page.locator("body")).to_contain_text("Cancelled", timeout=10_000)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED or run.cancel_requested_at is not None
    check("cancel confirmation")

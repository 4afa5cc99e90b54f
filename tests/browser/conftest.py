"""Browser tests: Playwright driving Debian's Chromium against a live server and a real worker."""
import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

CHROMIUM = Path("/usr/bin/chromium")
# An assertion waits up to 20 s for the page to get there (Playwright's default is 5 s): under CI's load
# a search answered after 5 s left the table of the page before it (tests/browser/test_explorer_pages.py).
expect.set_options(timeout=20_000)
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/browser/" in str(item.fspath):
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.slow)
            if not CHROMIUM.exists() and not os.environ.get("CI"):   # CI installs it (.ci/run): fail there
                item.add_marker(pytest.mark.skip(reason="Debian's chromium is not installed (apt-get install chromium)"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed browser test reports where the page was and what it said: a timeout alone does not
    tell a slow server from a form that answered with an error."""
    outcome = yield
    report = outcome.get_result()
    page = item.funcargs.get("page") if hasattr(item, "funcargs") else None
    if report.when != "call" or not report.failed or page is None:
        return
    try:
        text = page.locator("body").inner_text(timeout=2_000)
        report.sections.append(("page at failure", f"{page.url}\n{text[:2000]}"))
    except Exception as exc:  # noqa: BLE001 - a closed page says so instead
        report.sections.append(("page at failure", f"unreadable: {exc}"))


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    # Never download a browser: drive the system Chromium.
    return {
        **browser_type_launch_args,
        "executable_path": str(CHROMIUM),
        "headless": True,
        "args": ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"],
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1366, "height": 900}}


@pytest.fixture
def shot(page):
    """Save a screenshot of the current page under test-artifacts/ (git-ignored)."""
    ARTIFACTS.mkdir(exist_ok=True)

    def take(name: str):
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

    return take


@pytest.fixture
def login(page, live_server):
    def as_user(user):
        """Sign in afresh as `user`. The page before is left first: a live page's poll landing after its
        cookies were cleared would set a CSRF cookie of its own, and the login form's token would not match."""
        page.goto("about:blank")
        page.context.clear_cookies()
        page.goto(f"{live_server.url}/login/")
        page.get_by_label("Username").fill(user.username)
        page.get_by_label("Password").fill("pw-" + user.username)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{live_server.url}/runs/**")
        return page

    return as_user


@pytest.fixture
def registry(transactional_db):
    from django.utils import timezone

    from capabilities.kinds.python.sync import python_capabilities_sync
    from capabilities.models import Capability, CapabilityVersion

    python_capabilities_sync()
    CapabilityVersion.objects.filter(capability__name="get_ticket_status").update(polling_interval_s=0.2)
    # Edited in place, so the registry's version is moved as capabilities.policy moves it: workers
    # keep the specs they read at one version.
    Capability.objects.filter(name="get_ticket_status").update(updated_at=timezone.now())

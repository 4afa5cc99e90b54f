"""The audit log in a real browser: a lead operator finds it in the header, filters it, pages through
it, opens a row's details and exports what the filters select."""
import csv
import io
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from core.audit import audit
from core.models import AuditAction
from tests.conftest import _make_user

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def history(roles, operator, viewer):
    for n in range(55):
        audit(actor=operator, action=AuditAction.TOKEN_CREATED, target=operator, summary=f"API token t{n} created",
              details={"prefix": f"ao_{n:05d}"})
    audit(actor=viewer, action=AuditAction.ROLE_GRANTED, target=operator, summary="Role lead operator granted to otto",
          details={"role": "lead operator", "user": "otto", "password": "never-shown-secret"})


def test_a_lead_operator_filters_pages_and_exports_the_audit_log(page, live_server, login, history, shot):
    lead = _make_user("lena", "lead operator")
    login(lead)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit log").click()
    page.wait_for_url(f"{live_server.url}/audit/")
    expect(page.get_by_role("heading", name="Audit log")).to_be_visible()
    rows = page.locator("table.audit-log tbody tr")
    expect(rows).to_have_count(50)

    # Filter: one action; the URL keeps the filter, the details open and hide the secret.
    page.get_by_label("Action").select_option("role.granted")
    page.get_by_role("button", name="Apply").click()
    expect(rows).to_have_count(1)
    expect(page).to_have_url(re.compile(r"action=role.granted"))
    row = rows.first
    expect(row).to_contain_text("vera")
    row.get_by_text("Details").click()
    expect(row.locator("pre")).to_contain_text('"role": "lead operator"')
    expect(row.locator("pre")).to_contain_text("[redacted]")
    expect(row).not_to_contain_text("never-shown-secret")
    shot("audit-log-filtered")

    # Page through one actor's 55 rows: 50, then 5, and back.
    page.goto(f"{live_server.url}/audit/?actor=otto")
    expect(rows).to_have_count(50)
    expect(rows.first).to_contain_text("API token t54 created")
    page.get_by_role("link", name="Next →").click()
    expect(rows).to_have_count(5)
    expect(rows.last).to_contain_text("API token t0 created")
    expect(page).to_have_url(re.compile(r"after="))
    page.get_by_role("link", name="← Previous").click()
    expect(rows).to_have_count(50)
    expect(rows.first).to_contain_text("API token t54 created")
    shot("audit-log")

    # Export what the filters select.
    with page.expect_download() as download:
        page.get_by_role("link", name="CSV").click()
    text = Path(download.value.path()).read_text(encoding="utf-8")
    exported = list(csv.DictReader(io.StringIO(text)))
    assert len(exported) == 55 and {r["actor"] for r in exported} == {"otto"}
    assert download.value.suggested_filename.startswith("audit-log-")

    # A malformed filter in a link: a 400 that names the field.
    response = page.goto(f"{live_server.url}/audit/?since=last%20tuesday")
    assert response.status == 400
    expect(page.get_by_role("alert")).to_contain_text("since")


def test_a_viewer_sees_neither_the_link_nor_the_page(page, live_server, login, roles, viewer):
    login(viewer)
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit log")).to_have_count(0)
    response = page.goto(f"{live_server.url}/audit/")
    assert response.status == 403

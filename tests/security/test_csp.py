"""Every page sends a Content-Security-Policy with no inline scripts, and needs none.

The browser test (test_csp_browser.py) proves pages load without violations; this
one checks the header and the HTML of every page quickly, without a browser.
"""
from __future__ import annotations

import re

import pytest

from runs import services
from runs.worker import engine

INLINE_HANDLER = re.compile(r"<[^>]+\s(on[a-z]+|hx-on[:\w-]*)\s*=", re.IGNORECASE)
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\ssrc=)[^>]*>", re.IGNORECASE)
OFF_SITE = re.compile(r"""(?:src|href)=["'](?:https?:)?//""", re.IGNORECASE)


@pytest.fixture
def pages(db, operator):
    """Every page of the product, with data behind it."""
    from capabilities.kinds.python.sync import python_capabilities_sync
    from capabilities.models import Capability

    python_capabilities_sync()
    run = services.run_start(owner=operator, goal="CSP pages", planner="scripted",
                             planner_config={"plans": [[{"capability": "search_documents",
                                                         "arguments": {"q": "travel"}}]]},
                             completion={"capability": "search_documents", "path": "documents.0.id", "exists": True})
    engine.run_advance(run_id=run.pk, worker="csp")
    attempt = run.attempts.first()
    name = Capability.objects.order_by("name").first().name
    urls = ["/runs/", "/runs/start/", "/runs/approvals/", "/runs/dashboard/", f"/runs/{run.pk}/",
            "/capabilities/", f"/capabilities/{name}/", "/capabilities/new-capability/", f"/capabilities/{name}/edit/",
            "/capabilities/mcp-servers/new/", "/evaluations/", "/evaluations/readiness/", "/account/tokens/",
            "/account/password/", "/api/docs/"]
    if attempt is not None:
        urls.append(f"/runs/{run.pk}/attempts/{attempt.uid}/")
    return urls + [f"/evaluations/{_an_evaluation(operator).pk}/", "/admin/", "/admin/auth/user/",
                   f"/admin/auth/user/{operator.pk}/change/", "/admin/agentops/auditevent/",
                   "/admin/identity/oidcidentity/"]


def _an_evaluation(user):
    from evaluation.services import evaluation_start, evaluation_suites_sync

    suite = next(s for s in evaluation_suites_sync() if s.name == "standard")
    return evaluation_start(user=user, suite_id=suite.pk, label="csp")


@pytest.fixture
def admin_client(client, db):
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw-root-long-enough"))
    return client


def _policy(response) -> dict[str, list[str]]:
    header = response.headers.get("Content-Security-Policy")
    assert header, "no Content-Security-Policy header"
    return {d.split()[0]: d.split()[1:] for d in header.split(";") if d.strip()}


@pytest.mark.django_db
def test_every_page_has_a_policy_without_inline_scripts_and_needs_none(admin_client, pages):
    for url in pages:
        response = admin_client.get(url)
        assert response.status_code == 200, url
        policy = _policy(response)
        assert "'unsafe-inline'" not in policy["script-src"] and "'unsafe-eval'" not in policy["script-src"], url
        assert policy["default-src"] == ["'self'"] and policy["object-src"] == ["'none'"], url
        html = response.content.decode()
        assert not INLINE_SCRIPT.search(html), (url, INLINE_SCRIPT.search(html).group(0))
        assert not INLINE_HANDLER.search(html), (url, INLINE_HANDLER.search(html).group(0))
        assert not OFF_SITE.search(html), (url, OFF_SITE.search(html).group(0))


@pytest.mark.django_db
def test_the_login_page_has_the_policy_too(client):
    response = client.get("/login/")
    assert "'unsafe-inline'" not in _policy(response)["script-src"]


@pytest.mark.django_db
def test_htmx_is_configured_for_the_policy(admin_client):
    html = admin_client.get("/runs/").content.decode()
    assert '"allowEval": false' in html and '"includeIndicatorStyles": false' in html


@pytest.mark.django_db
def test_the_api_docs_come_from_our_static_files(admin_client):
    html = admin_client.get("/api/docs/").content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "cdn" not in html.lower() and "googleapis" not in html
    script = admin_client.get("/api/docs/?script=")
    assert script.status_code == 200 and script["Content-Type"].startswith("application/javascript")
    assert '"validatorUrl": null' in script.content.decode()

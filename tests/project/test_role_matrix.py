"""Every page and API endpoint requires login and checks its own permission."""
import re

import pytest
from rest_framework.test import APIClient

from capabilities.models import Capability
from core.project_access import grant_role
from runs import services
from runs.models import Approval
from runs.worker import engine
from tests.conftest import url_patterns

# The provider's redirect and callback are part of signing in (tests/identity covers what they refuse).
PUBLIC = {"login", "logout", "healthz", "favicon", "oidc-start", "oidc-callback"}
# "operator" owns the run under test; "other_operator" does not; "lead_operator" holds
# runs.manage_all_runs and may act on every run.
ROLES = ("anonymous", "nobody", "viewer", "operator", "other_operator", "lead_operator", "registry_admin")
OWNER_ONLY = {"/runs/{run}/cancel/", "/api/runs/{run}/cancel/"}
AUTHENTICATED = {"nobody", "viewer", "operator", "other_operator", "lead_operator", "registry_admin"}


@pytest.fixture
def world(db, operator, second_operator):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    run = services.run_start(owner=operator, goal="Needs approval", planner="scripted",
                             planner_config={"plans": [[{"capability": "search_documents",
                                                         "arguments": {"q": "travel"}}]]},
                             completion={"capability": "search_documents", "path": "documents.0.id", "exists": True},
                             require_plan_approval=True)
    engine.run_advance(run_id=run.pk, worker="matrix")
    other = services.run_start(owner=operator, goal="Another run, to compare with", planner="scripted",
                               planner_config={"plans": [[{"capability": "search_documents", "arguments": {"q": "x"}}]]},
                               completion={"capability": "search_documents", "path": "documents.0.id", "exists": True})
    return {"run": run, "approval": Approval.objects.get(run=run), "capability": Capability.objects.first(),
            "other_run": other}


def _concrete(route, world):
    values = {"run_id": world["run"].pk, "approval_id": world["approval"].pk, "name": world["capability"].name,
              "uid": "0" * 32, "server_id": 1, "evaluation_id": 1, "suite_id": 1, "pk": 1, "id": 1}
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(values.get(m.group(1), 1)), route)
    return "/" + path.lstrip("^").rstrip("$")


@pytest.mark.django_db
def test_every_endpoint_refuses_anonymous_requests(client, world):
    checked = 0
    for route, name in url_patterns():
        if name in PUBLIC or "(?P<format>" in route or route.startswith("static"):
            continue
        url = _concrete(route, world)
        response = client.get(url)
        assert response.status_code in (302, 401, 403, 405), f"{url} answered {response.status_code} anonymously"
        if response.status_code == 302:
            assert response["Location"].startswith("/login/"), url
        checked += 1
    assert checked > 30


def _client(role, users):
    if role == "anonymous":
        return APIClient()
    api = APIClient()
    api.force_login(users[role])
    return api


# (method, url template, body, roles allowed) — every other role must be refused.
MATRIX = [
    ("get", "/runs/", None, {"viewer", "operator", "registry_admin"}),
    ("get", "/runs/{run}/", None, {"viewer", "operator", "registry_admin"}),
    ("get", "/runs/{run}/trace.json", None, {"viewer", "operator", "registry_admin"}),
    ("get", "/runs/compare/?a={run}&b={other}", None, {"viewer", "operator", "registry_admin"}),
    ("get", "/runs/approvals/", None, {"viewer", "operator", "registry_admin"}),
    ("get", "/runs/dashboard/", None, {"viewer", "operator", "registry_admin"}),
    ("get", "/runs/start/", None, {"operator"}),
    ("post", "/runs/approvals/{approval}/decide/", {"decision": "reject"}, {"operator"}),
    ("post", "/runs/{run}/cancel/", {}, {"operator"}),
    ("get", "/capabilities/", None, {"viewer", "operator", "registry_admin"}),
    ("get", "/capabilities/{capability}/", None, {"viewer", "operator", "registry_admin"}),
    ("get", "/capabilities/new-capability/", None, {"registry_admin"}),
    ("get", "/capabilities/{capability}/edit/", None, {"registry_admin"}),
    ("post", "/capabilities/{capability}/enabled/", {"enabled": "false"}, {"registry_admin"}),
    ("get", "/capabilities/mcp-servers/new/", None, {"registry_admin"}),
    ("get", "/account/tokens/", None, AUTHENTICATED),
    ("get", "/account/password/", None, AUTHENTICATED),
    ("get", "/api/runs/", None, {"viewer", "operator", "registry_admin"}),
    ("get", "/api/runs/{run}/", None, {"viewer", "operator", "registry_admin"}),
    ("get", "/api/runs/{run}/attempts/", None, {"viewer", "operator", "registry_admin"}),
    ("get", "/api/runs/{run}/revisions/", None, {"viewer", "operator", "registry_admin"}),
    ("get", "/api/runs/compare/?a={run}&b={other}", None, {"viewer", "operator", "registry_admin"}),
    ("get", "/api/approvals/", None, {"viewer", "operator", "registry_admin"}),
    ("post", "/api/runs/start/", {"goal": "g", "completion": {"capability": "search_documents", "exists": True}},
     {"operator"}),
    ("post", "/api/approvals/{approval}/decide/", {"decision": "reject", "expected_hash": "a-hash"}, {"operator"}),
    ("post", "/api/runs/{run}/cancel/", None, {"operator"}),
    ("get", "/api/capabilities/", None, {"viewer", "operator", "registry_admin"}),
    ("post", "/api/capabilities/{capability}/disable/", None, {"registry_admin"}),
    ("get", "/api/tokens/", None, AUTHENTICATED),
    # A token acts in a project: someone who holds none may not make one.
    ("post", "/api/tokens/", {"name": "matrix"}, AUTHENTICATED - {"nobody"}),
    # The audit log: the lead operator role (and the auditor role, tests/project/test_audit_log.py).
    ("get", "/audit/", None, {"lead_operator"}),
    ("get", "/api/audit/", None, {"lead_operator"}),
    ("get", "/api/audit/export/", None, {"lead_operator"}),
    ("get", "/api/audit/export/?format=json", None, {"lead_operator"}),
]


def _with_new_roles(template, allowed):
    """What an operator may do, a lead operator may; another operator too, except on runs it does not own."""
    allowed = set(allowed)
    if "operator" in allowed:
        allowed.add("lead_operator")
        if template not in OWNER_ONLY:
            allowed.add("other_operator")
    return allowed


MATRIX = [(m, t, b, _with_new_roles(t, a)) for m, t, b, a in MATRIX]


@pytest.fixture
def lead_operator(roles):
    from django.contrib.auth.models import User

    user = User.objects.create_user(username="lena", password="pw-lena")
    grant_role(user, "lead operator")
    return user


def test_only_the_lead_operator_role_holds_manage_all_runs():
    from core.roles import MANAGE_ALL_RUNS, ROLE_PERMISSIONS

    assert [role for role, perms in ROLE_PERMISSIONS.items() if MANAGE_ALL_RUNS in perms] == ["lead operator"]
    assert set(ROLE_PERMISSIONS["operator"]) < set(ROLE_PERMISSIONS["lead operator"])


@pytest.mark.django_db
@pytest.mark.parametrize("method,template,body,allowed", MATRIX, ids=[f"{m} {t}" for m, t, _, _ in MATRIX])
def test_role_endpoint_matrix(method, template, body, allowed, world, nobody, viewer, operator, second_operator,
                              lead_operator, registry_admin):
    users = {"nobody": nobody, "viewer": viewer, "operator": operator, "other_operator": second_operator,
             "lead_operator": lead_operator, "registry_admin": registry_admin}
    url = template.format(run=world["run"].pk, approval=world["approval"].pk, capability=world["capability"].name,
                          other=world["other_run"].pk)
    # Refused roles first: an allowed POST may change what a later request sees.
    for role in sorted(ROLES, key=lambda r: r in allowed):
        api = _client(role, users)
        if method == "get":
            response = api.get(url)
        elif url.startswith("/api/"):
            response = api.post(url, body, format="json")
        else:
            response = api.post(url, body or {})
        if role in allowed:
            assert response.status_code < 400 or response.status_code == 409, (role, url, response.status_code)
        elif role == "anonymous":
            assert response.status_code in (302, 401, 403), (role, url, response.status_code)
        else:
            assert response.status_code == 403, (role, url, response.status_code)

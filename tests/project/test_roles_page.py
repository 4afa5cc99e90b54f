"""Admins grant roles on a page (the stdio MCP role included), audited; nobody else may."""
import pytest
from django.contrib.auth.models import Group, User

from core.models import AuditEvent
from core.project_access import default_project, roles_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(roles):
    return User.objects.create_superuser("ada", password="pw-ada")


def test_an_admin_grants_the_stdio_mcp_role_and_it_is_audited(client_for, admin, registry_admin):
    client = client_for(admin)
    page = client.get("/roles/").content.decode()
    assert "rita" in page and "stdio mcp admin" in page and 'href="/roles/"' in page
    response = client.post("/roles/", {"user": registry_admin.pk, "username": "rita",
                                       "roles": ["registry admin", "stdio mcp admin"]}, follow=True)
    assert "rita: granted stdio mcp admin." in response.content.decode()
    registry_admin = User.objects.get(pk=registry_admin.pk)
    assert registry_admin.has_perm("capabilities.run_stdio_mcpserver")
    event = AuditEvent.objects.get(action="role.granted")
    assert event.actor == admin and event.details == {"role": "stdio mcp admin", "user": "rita", "project": "default"}


def test_unticking_a_role_revokes_it(client_for, admin, operator):
    client_for(admin).post("/roles/", {"user": operator.pk, "roles": ["viewer"]})
    assert roles_in(operator, default_project().pk) == ["viewer"]
    assert AuditEvent.objects.filter(action="role.revoked", details__role="operator").exists()


def test_an_unknown_role_is_refused(client_for, admin, operator):
    response = client_for(admin).post("/roles/", {"user": operator.pk, "roles": ["god"]}, follow=True)
    assert "Unknown role “god”" in response.content.decode()
    assert not AuditEvent.objects.filter(action__startswith="role.").exists()
    assert roles_in(operator, default_project().pk) == ["operator"]


def test_others_may_not_and_see_no_link(client_for, registry_admin, operator):
    client = client_for(registry_admin)
    assert 'href="/roles/"' not in client.get("/runs/").content.decode()
    assert client.get("/roles/").status_code == 403
    assert client.post("/roles/", {"user": operator.pk, "roles": ["lead operator"]}).status_code == 403
    assert not Group.objects.get(name="lead operator").project_memberships.exists()


def test_the_favicon_is_served_to_anyone(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("/favicon.svg")

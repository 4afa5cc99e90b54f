"""Granting and revoking roles (the role groups of core.roles) on a page, without the Django admin.

A role holds in one project (core.models.ProjectMembership): the page grants and revokes roles in
the project the person acts in. Who may grant: a superuser, or whoever holds auth.change_user
(the user-administration permission of the Django admin, an instance-wide permission held
directly, never through a role). Each change is one audited, atomic step.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from core.audit import audit
from core.errors import InvalidInput
from core.models import AuditAction, Project, ProjectMembership
from core.permissions import require
from core.roles import AUDITOR, LEAD_OPERATOR, OPERATOR, REGISTRY_ADMIN, ROLE_PERMISSIONS, STDIO_MCP_ADMIN, VIEWER

GRANT_ROLES = "auth.change_user"
ROLES = tuple(ROLE_PERMISSIONS)
# Said beside each role on the page: what it lets someone do.
ROLE_NOTES = {
    VIEWER: "reads runs, capabilities, evaluations and notifications",
    OPERATOR: "starts, cancels and reconciles their own runs; decides approvals; runs evaluations",
    LEAD_OPERATOR: "an operator for everyone's runs; reads the audit log",
    REGISTRY_ADMIN: "registers and edits capabilities and HTTP MCP servers",
    STDIO_MCP_ADMIN: "adds and starts stdio MCP servers, which run commands on this server's hosts: grant it on purpose",
    AUDITOR: "reads what a viewer reads, and the audit log of every user's changes; changes nothing",
}


@dataclass(frozen=True)
class UserRoles:
    user_id: int
    username: str
    roles: frozenset[str]


def users_with_roles(project_id: int) -> list[UserRoles]:
    """Every active user and the roles they hold in the project, in two queries."""
    held: dict[int, set[str]] = {}
    for user_id, role in ProjectMembership.objects.filter(project_id=project_id).values_list("user_id", "role__name"):
        held.setdefault(user_id, set()).add(role)
    users = get_user_model().objects.filter(is_active=True).order_by("username")
    return [UserRoles(u.pk, u.get_username(), frozenset(held.get(u.pk, ()))) for u in users]


@transaction.atomic
def role_set(*, actor, project_id: int, user_id: int, role: str, held: bool) -> bool:
    """Grant (held=True) or revoke a role in a project; returns whether anything changed."""
    require(actor, GRANT_ROLES, "grant roles")
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        raise InvalidInput("Choose a project to grant roles in.", fields={"project": "unknown"})
    if role not in ROLES:
        raise InvalidInput(f"Unknown role “{role}”: choose one of {', '.join(ROLES)}.", fields={"role": "unknown"})
    user = get_user_model().objects.select_for_update().filter(pk=user_id, is_active=True).first()
    if user is None:
        raise InvalidInput(f"No active user {user_id}.", fields={"user": "unknown"})
    group = Group.objects.get(name=role)
    memberships = ProjectMembership.objects.filter(project=project, user=user, role=group)
    if memberships.exists() == held:
        return False
    if held:
        ProjectMembership.objects.create(project=project, user=user, role=group)
    else:
        memberships.delete()
    verb = "granted" if held else "revoked"
    audit(actor=actor, action=AuditAction.ROLE_GRANTED if held else AuditAction.ROLE_REVOKED, target=user,
          summary=f"Role {role} {verb} {'to' if held else 'from'} {user.get_username()} in {project.name}",
          details={"role": role, "user": user.get_username(), "project": project.slug}, project_id=project.pk)
    return True


def roles_set(*, actor, project_id: int, user_id: int, roles: set[str]) -> list[str]:
    """Make the user hold exactly these roles in the project; returns what changed ("granted x", "revoked y")."""
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise InvalidInput(f"Unknown role “{unknown[0]}”: choose one of {', '.join(ROLES)}.", fields={"role": "unknown"})
    with transaction.atomic():
        return [f"{'granted' if role in roles else 'revoked'} {role}" for role in ROLES
                if role_set(actor=actor, project_id=project_id, user_id=user_id, role=role, held=role in roles)]

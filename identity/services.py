"""A provider's account signing in: linked to its user (created on the first sign-in), roles from its groups.

One atomic step per sign-in, its audit rows in the same transaction. The system acts here, not a
person, so the audit rows have no actor and say the provider's groups were the source."""
from __future__ import annotations

import hashlib
import re
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from core.audit import audit
from core.models import AuditAction, Project, ProjectMembership
from core.role_grants import ROLES
from core.roles import role_entry
from identity.models import OidcIdentity

_NOT_IN_USERNAME = re.compile(r"[^\w.@+-]")


def groups_of(claims: dict[str, Any]) -> list[str]:
    """The groups claim as a list of strings (providers send a list, or one string: Google's hd)."""
    value = claims.get(settings.AGENTOPS_OIDC_GROUPS_CLAIM)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(v) for v in value if isinstance(v, (str, int))]
    return []


def roles_for(groups: list[str]) -> set[tuple[str, str]]:
    """The (project slug, role) pairs the role map gives these groups."""
    role_map = settings.AGENTOPS_OIDC_ROLE_MAP
    return {role_entry(entry) for group in groups for entry in role_map.get(group, []) if role_entry(entry)[1] in ROLES}


def governed_projects() -> set[str]:
    """The projects whose roles the provider decides: those the role map names. Roles granted by hand
    in any other project are left as they are."""
    return {role_entry(entry)[0] for entries in settings.AGENTOPS_OIDC_ROLE_MAP.values() for entry in entries}


def sso_sign_in(*, issuer: str, claims: dict[str, Any]):
    """The user for these verified claims, or None when new users are not created. An inactive user is
    returned unchanged (the sign-in view refuses them)."""
    subject = str(claims["sub"])
    with transaction.atomic():
        identity = (OidcIdentity.objects.select_for_update().select_related("user")
                    .filter(issuer=issuer, subject=subject).first())
        if identity is None:
            if not settings.AGENTOPS_OIDC_CREATE_USERS:
                return None
            identity = OidcIdentity.objects.create(user=_user_create(issuer, subject, claims), issuer=issuer,
                                                   subject=subject)
        user = identity.user
        if not user.is_active:
            return user
        _profile_update(user, claims)
        groups = groups_of(claims)
        if settings.AGENTOPS_OIDC_ROLE_MAP:
            _roles_sync(user, roles_for(groups), groups)
        identity.last_sign_in_at = timezone.now()
        identity.groups = groups[:200]
        identity.save(update_fields=["last_sign_in_at", "groups"])
        return user


def _user_create(issuer: str, subject: str, claims: dict[str, Any]):
    User = get_user_model()
    wanted = _NOT_IN_USERNAME.sub("", str(claims.get("preferred_username") or claims.get("email") or subject))[:130]
    username = wanted or "sso"
    if User.objects.filter(username__iexact=username).exists():
        # Never the local account of the same name: a suffix from the stable subject.
        username = f"{username}-{hashlib.sha256(f'{issuer} {subject}'.encode()).hexdigest()[:8]}"
    user = User(username=username, email=str(claims.get("email") or "")[:254],
                first_name=str(claims.get("given_name") or "")[:150],
                last_name=str(claims.get("family_name") or "")[:150])
    user.set_unusable_password()  # signs in at the provider only
    user.save()
    audit(actor=None, action=AuditAction.USER_CREATED, target=user,
          summary=f"User {username} created on first sign-in with {settings.AGENTOPS_OIDC_PROVIDER_NAME}",
          details={"source": "sso", "issuer": issuer, "subject": subject})
    return user


def _profile_update(user, claims: dict[str, Any]) -> None:
    fields = {"email": str(claims.get("email") or user.email)[:254],
              "first_name": str(claims.get("given_name") or user.first_name)[:150],
              "last_name": str(claims.get("family_name") or user.last_name)[:150]}
    changed = [name for name, value in fields.items() if getattr(user, name) != value]
    for name in changed:
        setattr(user, name, fields[name])
    if changed:
        user.save(update_fields=changed)


def _roles_sync(user, roles: set[tuple[str, str]], groups: list[str]) -> None:
    """Make the user hold exactly these roles in the projects the role map names (the provider decides
    there when a role map is set). A project the map names that does not exist is skipped."""
    projects = {p.slug: p for p in Project.objects.filter(slug__in=governed_projects())}
    memberships = ProjectMembership.objects.filter(user=user, project__in=projects.values(), role__name__in=ROLES)
    held = set(memberships.values_list("project__slug", "role__name"))
    for slug, role in sorted((roles ^ held) & {(s, r) for s, r in roles | held if s in projects}):
        granted = (slug, role) in roles
        project = projects[slug]
        if granted:
            ProjectMembership.objects.create(project=project, user=user, role=Group.objects.get(name=role))
        else:
            memberships.filter(project=project, role__name=role).delete()
        audit(actor=None, action=AuditAction.ROLE_GRANTED if granted else AuditAction.ROLE_REVOKED, target=user,
              summary=f"Role {role} {'granted to' if granted else 'revoked from'} {user.get_username()} "
                      f"in {project.name} by the provider's groups", project_id=project.pk,
              details={"role": role, "project": slug, "user": user.get_username(), "source": "sso",
                       "groups": groups[:50]})

"""Permissions per project: a user's roles (core.roles' groups) hold only in the project they were
granted in, and a request, task or pass asks in the project it acts in (core.projects).

Passwords are checked by Django's ModelBackend, the provider's sign-in by identity.backend; this
backend only answers "may this user do that here". Role groups are never held directly (the
projects migration moved them into memberships), so the other backends grant a superuser
everything and a user their direct permissions (auth.change_user, say), nothing per project.
"""
from __future__ import annotations

from django.contrib.auth.backends import BaseBackend, ModelBackend
from django.contrib.auth.models import Permission

from core.projects import active_project_id


class ProjectRoleBackend(BaseBackend):
    def authenticate(self, request, **credentials):
        return None  # never signs anyone in

    def get_group_permissions(self, user_obj, obj=None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        project_id = active_project_id()
        if project_id is None:
            return set()
        # Cached on the user object per project: one query per (request, project), as Django's own.
        cache = user_obj.__dict__.setdefault("_agentops_project_perms", {})
        if project_id not in cache:
            rows = (Permission.objects.filter(group__project_memberships__user=user_obj,
                                              group__project_memberships__project_id=project_id)
                    .values_list("content_type__app_label", "codename").order_by())
            cache[project_id] = {f"{app}.{codename}" for app, codename in rows}
        return cache[project_id]

    def get_all_permissions(self, user_obj, obj=None) -> set[str]:
        return self.get_group_permissions(user_obj, obj)


class NoGlobalRoles:
    """For a backend derived from Django's ModelBackend: a group held directly grants nothing (and costs
    no query); roles hold only in projects, through ProjectRoleBackend."""

    def get_group_permissions(self, user_obj, obj=None) -> set[str]:
        return set()

    def _get_group_permissions(self, user_obj):
        return Permission.objects.none()


class PasswordBackend(NoGlobalRoles, ModelBackend):
    """Django's password sign-in, with its superuser and direct (instance-wide) permissions."""

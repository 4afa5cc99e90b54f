"""The roles page: who holds which role, and granting or revoking them (core.role_grants)."""
from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from core import role_grants
from core.errors import ServiceError
from core.permissions import permission_needed


@permission_needed(role_grants.GRANT_ROLES, "grant roles")
@require_http_methods(["GET", "POST"])
def role_list(request):
    if request.method == "POST":
        try:
            user_id = int(request.POST.get("user", 0) or 0)
        except ValueError:
            user_id = 0   # names nobody: roles_set says so
        try:
            changed = role_grants.roles_set(actor=request.user, project_id=request.agentops_project_id or 0,
                                            user_id=user_id,
                                            roles=set(request.POST.getlist("roles")))
        except ServiceError as exc:
            messages.error(request, exc.message)
        else:
            who = request.POST.get("username", "the user")
            messages.success(request, f"{who}: {', '.join(changed)}." if changed else f"{who}: nothing changed.")
        return redirect("roles")
    return render(request, "account/roles.html", {"users": role_grants.users_with_roles(request.agentops_project_id or 0),
                                                  "roles": role_grants.ROLES,
                                                  "notes": [(r, role_grants.ROLE_NOTES.get(r, "")) for r in role_grants.ROLES]})

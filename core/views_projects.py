"""The project switcher in the header, and the projects page (a superuser creates projects there)."""
from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from core import project_access, projects_admin
from core.errors import ServiceError


def switcher(request):
    """Context for every page: the projects the user holds and the one this request acts in."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    current = getattr(request, "agentops_project_id", None)
    choices = getattr(request, "agentops_projects", None)
    if choices is None:   # a page the middleware did not scope (an error page, say)
        choices = project_access.held_projects(user)
    return {"project_choices": choices, "current_project": next((p for p in choices if p["pk"] == current), None)}


@require_POST
def project_switch(request):
    try:
        project_id = int(request.POST.get("project", ""))
    except ValueError:
        project_id = -1
    if not project_access.choose_project(request, project_id):
        messages.error(request, "You hold no role in that project.")
    target = request.POST.get("next") or "/"
    # Back to the page the person was on, unless it named something of the previous project.
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}) or any(
            ch.isdigit() for ch in target.split("?")[0]):
        target = "/"
    return redirect(target)


@require_http_methods(["GET", "POST"])
def project_list(request):
    if request.method == "POST":
        try:
            project = projects_admin.project_create(actor=request.user, slug=request.POST.get("slug", ""),
                                                    name=request.POST.get("name", ""))
        except ServiceError as exc:
            messages.error(request, exc.message)
        else:
            project_access.choose_project(request, project.pk)
            messages.success(request, f"Project {project.name} created; you act in it now. Grant roles on the roles page.")
        return redirect("projects")
    rows = [{"project": p, "roles": project_access.roles_in(request.user, p.pk)}
            for p in project_access.projects_of(request.user)]
    return render(request, "account/projects.html", {"rows": rows, "can_create": request.user.is_superuser})

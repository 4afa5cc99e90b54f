"""Saved views of the runs list: save the current filters under a name, delete one."""
from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.errors import ServiceError
from core.permissions import permission_needed
from runs import search


@permission_needed("runs.view_run", "view runs")
@require_POST
def saved_view_save(request):
    query = request.POST.get("query", "")
    try:
        view = search.saved_view_save(user=request.user, name=request.POST.get("name", ""), query=query)
    except ServiceError as exc:
        messages.error(request, exc.message)
        return redirect(reverse("runs:list") + ("?" + search.view_query(query) if query else ""))
    messages.success(request, f"Saved the view “{view.name}”.")
    return redirect(reverse("runs:list") + ("?" + view.query if view.query else ""))


@permission_needed("runs.view_run", "view runs")
@require_POST
def saved_view_delete(request, view_id: int):
    try:
        search.saved_view_delete(user=request.user, view_id=view_id)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Deleted the saved view.")
    return redirect("runs:list")

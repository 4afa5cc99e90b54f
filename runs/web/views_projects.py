"""A project's limits page: its per-day quotas and default budgets (a superuser sets them; runs.quotas)."""
from __future__ import annotations

import json

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from core.errors import ServiceError
from core.models import Project
from runs.quotas import project_limits_save

NUMBERS = (("runs_per_day", int), ("tokens_per_day", int), ("cost_per_day", float))


def _number(text: str, kind: type):
    text = (text or "").strip()
    return None if text == "" else kind(text)


@require_http_methods(["GET", "POST"])
def project_limits(request, slug: str):
    project = Project.objects.filter(slug=slug).first()
    if project is None or not request.user.is_superuser:
        raise Http404("No such project.")
    form = {"default_budgets": json.dumps(project.default_budgets, indent=2), "runs_per_day": project.quota_runs_per_day,
            "tokens_per_day": project.quota_tokens_per_day, "cost_per_day": project.quota_cost_per_day}
    if request.method == "POST":
        posted = {key: request.POST.get(key, "") for key in form}
        form = dict(posted)
        try:
            values = {key: _number(posted[key], kind) for key, kind in NUMBERS}
            budgets = json.loads(posted["default_budgets"] or "{}")
        except ValueError:
            messages.error(request, "Give whole numbers for runs and tokens, a number for cost (blank: no quota), "
                                    "and the default budgets as a JSON object.")
        else:
            try:
                project_limits_save(actor=request.user, project=project, default_budgets=budgets, **values)
            except ServiceError as exc:
                messages.error(request, exc.message)
            else:
                messages.success(request, f"Limits of {project.name} saved.")
                return redirect("project-limits", slug=project.slug)
    return render(request, "account/project_limits.html", {"project": project, "form": form},
                  status=400 if request.method == "POST" else 200)

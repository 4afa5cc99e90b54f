"""The readiness review: the seed's architecture checklist, answered from live data."""
from __future__ import annotations

from django.shortcuts import render
from django.views.decorators.http import require_GET

from core.permissions import permission_needed
from evaluation.readiness import readiness_review as review


@permission_needed("evaluation.view_evaluation", "view the readiness review")
@require_GET
def readiness_review(request):
    items = review()
    counts = {status: sum(1 for i in items if i.status == status) for status in ("pass", "warn", "fail")}
    return render(request, "evaluation/readiness.html", {"items": items, "counts": counts})

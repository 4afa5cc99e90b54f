from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET
from drf_spectacular.views import SpectacularSwaggerSplitView

from agentops.models import WorkerHeartbeat


def home(request):
    return redirect("runs:list")


@login_not_required
@require_GET
def healthz(request):
    """Liveness for load balancers: the database answers; when a worker last beat."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    last = WorkerHeartbeat.objects.order_by("-seen_at").values_list("seen_at", flat=True).first()
    return JsonResponse({"database": "ok", "last_worker_heartbeat": last.isoformat() if last else None})


class ApiDocsView(SpectacularSwaggerSplitView):
    """Swagger UI from our own static files (drf-spectacular-sidecar), its setup script a second
    request to this view (?script): the page needs no inline script or style under our CSP.
    (Redoc was dropped: it always loads its logo from cdn.redoc.ly.)"""

    template_name = "api_docs.html"

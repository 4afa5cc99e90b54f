from csp.constants import SELF, UNSAFE_INLINE
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularRedocView

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


class ApiDocsView(SpectacularRedocView):
    """Redoc served from our static files; the page's own CSP lets Redoc add its styles and worker."""

    template_name = "api_docs.html"

    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        # Redoc (styled-components) injects <style> elements and runs its search in a blob: worker.
        response._csp_replace = {"style-src": [SELF, UNSAFE_INLINE], "worker-src": [SELF, "blob:"]}
        return response

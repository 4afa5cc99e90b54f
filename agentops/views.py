from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET

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

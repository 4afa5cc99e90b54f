from celery import current_app
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET
from drf_spectacular.views import SpectacularSwaggerSplitView

from core.models import WorkerHeartbeat
from core.outages import DATABASE_ERRORS, outage_of, told
from core.storage import storage_problem


def home(request):
    return redirect("runs:list")


@login_not_required
@require_GET
def healthz(request):
    """For load balancers: 200 while the database answers and storage has room, 503 naming what is down.

    The broker is reported but does not fail the check: pages, approvals and the API
    keep working during a broker outage, and the scheduler requeues what was missed.
    """
    body: dict = {"down": []}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        last = WorkerHeartbeat.objects.order_by("-seen_at").values_list("seen_at", flat=True).first()
        body.update(database="ok", last_worker_heartbeat=last.isoformat() if last else None)
    except DATABASE_ERRORS as exc:
        # A database that cannot open on a full disk is down because storage is: name the cause.
        body.update(database="unavailable", database_error=str(exc).strip()[:300], last_worker_heartbeat=None)
        body["down"].append(outage_of(exc).down)
    problem = storage_problem()
    body["storage"] = problem[0] if problem else "ok"
    if problem:
        body["storage_error"] = problem[1]
        body["down"].append("storage")
    body["broker"] = "ok" if _broker_answers() else "unavailable"
    if body["broker"] != "ok":
        body["down"].append("broker")
    body["down"] = list(dict.fromkeys(body["down"]))
    failing = [name for name in body["down"] if name in ("database", "storage")]
    if not failing:
        return JsonResponse(body)
    detail = "; ".join(body[key] for key in ("database_error", "storage_error") if key in body)
    summary = ", ".join(f"{name} {body[name]}" for name in failing)  # "database unavailable", "storage full"
    return told(request, JsonResponse(body, status=503), summary, detail)


def _broker_answers(timeout_s: float = 1.0) -> bool:
    try:
        with current_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout_s)
        return True
    except Exception:  # noqa: BLE001 - any failure to connect means "unavailable"
        return False


class ApiDocsView(SpectacularSwaggerSplitView):
    """Swagger UI from our own static files (drf-spectacular-sidecar), its setup script a second
    request to this view (?script): the page needs no inline script or style under our CSP.
    (Redoc was dropped: it always loads its logo from cdn.redoc.ly.)"""

    template_name = "api_docs.html"

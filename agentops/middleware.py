"""Refuse oversized API bodies before anything reads them; answer database outages with 503."""
import sys

from django.conf import settings
from django.core.signals import got_request_exception
from django.http import HttpResponse, JsonResponse


class RequestSizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return JsonResponse({"error": {"code": "bad_request", "message": "Invalid Content-Length header."}},
                                status=400)
        if length > settings.API_MAX_BODY_BYTES:
            return JsonResponse(
                {"error": {"code": "request_too_large",
                           "message": f"Request body is {length} bytes; the limit is {settings.API_MAX_BODY_BYTES}."}},
                status=413,
            )
        return self.get_response(request)


# -- database outages ------------------------------------------------------------------------

def _database_error(exc: BaseException | None) -> bool:
    from django.db import InterfaceError, OperationalError

    return isinstance(exc, (OperationalError, InterfaceError))


def _mark_database_outage(sender, request=None, **kwargs):
    """got_request_exception fires inside Django's handler, while the exception is current."""
    if request is not None and _database_error(sys.exc_info()[1]):
        request._agentops_database_down = True


got_request_exception.connect(_mark_database_outage, dispatch_uid="agentops-database-outage")


def database_unavailable_response(request) -> HttpResponse:
    message = "The database is unavailable; try again shortly."
    if request.path.startswith("/api/") or request.path.startswith("/healthz"):
        response = JsonResponse({"error": {"code": "service_unavailable", "message": message},
                                 "down": ["database"]}, status=503)
    else:
        response = HttpResponse(f"<!doctype html><title>Unavailable</title><h1>AgentOps is unavailable</h1>"
                                f"<p>{message}</p>", status=503)
    response["Retry-After"] = "5"
    return response


class DatabaseUnavailableMiddleware:
    """A database outage answers 503 (JSON on the API), never Django's 500 page.

    Outermost, because the error may come from any layer (the session, the user,
    the view); Django turns it into a 500 response before it reaches us, so the
    signal above marks the request and the 500 is replaced here.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if getattr(request, "_agentops_database_down", False) and response.status_code >= 500:
            return database_unavailable_response(request)
        return response

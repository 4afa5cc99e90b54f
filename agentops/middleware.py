"""Refuse oversized API bodies before anything reads them."""
from django.conf import settings
from django.http import JsonResponse


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

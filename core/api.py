"""API conventions shared by every endpoint: one error body, one pagination."""
from __future__ import annotations

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import ServiceError


class Pagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 500


_PAGES: dict[type, type] = {}


def paginated(serializer_class: type) -> type:
    """The OpenAPI shape of a Pagination answer whose results are `serializer_class` items.

    Our views are plain APIViews calling the paginator themselves, so drf-spectacular
    cannot see the pagination: document it with responses=paginated(ItemOutput).
    """
    if serializer_class not in _PAGES:
        name = "Paginated" + serializer_class.__name__.removesuffix("Output") + "List"
        _PAGES[serializer_class] = type(name, (serializers.Serializer,), {
            "count": serializers.IntegerField(min_value=0),
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": serializer_class(many=True),
        })
    return _PAGES[serializer_class]


PAGE_PARAMETERS = [
    OpenApiParameter("page", int, description="Page number, from 1."),
    OpenApiParameter("page_size", int, description=f"Items per page (default 50, at most {Pagination.max_page_size})."),
]


def _code_for(exc: Exception) -> str:
    if isinstance(exc, exceptions.ParseError):
        return "malformed_json"
    if isinstance(exc, exceptions.ValidationError):
        return "invalid"
    if isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        return codes if isinstance(codes, str) else getattr(exc, "default_code", "error")
    return "error"


def exception_handler(exc, context):
    """Every error is {"error": {"code", "message", "fields"?}}."""
    if isinstance(exc, ServiceError):
        body = {"code": exc.code, "message": exc.message}
        if exc.fields:
            body["fields"] = exc.fields
        return Response({"error": body}, status=exc.status)
    if isinstance(exc, RequestDataTooBig):
        return Response({"error": {"code": "request_too_large", "message": str(exc)}},
                        status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    if isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    body: dict = {"code": _code_for(exc)}
    if isinstance(exc, exceptions.ValidationError):
        body["message"] = "The request is invalid; see fields."
        body["fields"] = response.data if isinstance(response.data, dict) else {"non_field_errors": response.data}
    elif isinstance(exc, exceptions.ParseError):
        body["message"] = f"Malformed JSON body: {exc.detail}"
    else:
        body["message"] = str(getattr(exc, "detail", exc))
    response.data = {"error": body}
    return response

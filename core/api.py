"""API conventions shared by every endpoint: one error body, one pagination."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import InvalidInput, ServiceError, TooBusy
from core.project_access import scope_request


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


# Query parameters every list accepts besides its filters (paging, DRF's format override).
COMMON_PARAMETERS = frozenset({"page", "page_size", "format"})


def validated(input_class: type[serializers.Serializer], data, *, partial: bool = False) -> dict:
    """The input's validated data; invalid input raises, and the handler answers it as 400 with its fields.

    An unknown field or query parameter is refused by name: silently ignoring a misspelt
    filter answers with every run, and an ignored field saves something else than was sent."""
    serializer = input_class(data=data, partial=partial)
    if hasattr(data, "keys"):
        unknown = sorted(set(data.keys()) - set(serializer.fields) - COMMON_PARAMETERS)
        if unknown:
            raise InvalidInput(f"Unknown {'field' if len(unknown) == 1 else 'fields'}: {', '.join(unknown)} "
                               f"(known: {', '.join(sorted(serializer.fields))}).",
                               fields={name: "unknown field" for name in unknown})
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class NoQuery(serializers.Serializer):
    """The query of a request that takes no parameter (paging and format aside)."""


class ApiView(APIView):
    """The base of every API view. Its query parameters are validated on every method, once
    authentication and permissions have passed: an unknown or misspelt parameter is a 400 naming
    it, never silently ignored. A view that takes some declares them as `query_input` (also what
    its OpenAPI parameters document) and reads them from `self.query`."""
    query_input: type[serializers.Serializer] = NoQuery
    query: dict[str, Any]

    def perform_authentication(self, request):
        super().perform_authentication(request)
        # A user DRF authenticated (a token scopes itself; this is for the others) acts in their
        # project, as a page request does, before any permission is asked.
        if getattr(request._request, "agentops_project_id", None) is None and request.user.is_authenticated:
            scope_request(request._request, request.user)

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        # A method the view does not serve is a 405 (dispatch answers it next), whatever its query.
        if hasattr(self, request.method.lower()):
            self.query = validated(self.query_input, request.query_params)


def page_response(view, request, items, output_class: type[serializers.Serializer], *,
                  item: Callable[[Any], Any] | None = None) -> Response:
    """The page of `items` the request asks for, as a Pagination answer of `output_class` items
    (each row turned into one by `item` first, when given)."""
    paginator = Pagination()
    page = paginator.paginate_queryset(items, request, view=view)
    rows = page if item is None else [item(row) for row in page]
    return paginator.get_paginated_response(output_class(rows, many=True).data)


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
        response = Response({"error": body}, status=exc.status)
        if isinstance(exc, TooBusy):
            response["Retry-After"] = str(exc.retry_after)
        return response
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

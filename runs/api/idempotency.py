"""The Idempotency-Key header of the API's requests that start runs (runs.request_keys)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import OpenApiParameter
from rest_framework.response import Response

from runs import request_keys

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key", str, location=OpenApiParameter.HEADER, required=False,
    description="A key of the client's own (1-255 visible ASCII characters): a retry of the same request "
                "with it answers what the first one started (header Idempotent-Replayed: true), never a "
                "second one, for AGENTOPS_REQUEST_KEY_HOURS (24 by default). The same key with another "
                "request is refused (422).")


def started(request, endpoint: str, data: dict[str, Any], start: Callable[[], request_keys.Started],
            body: Callable[[Any], dict]) -> Response:
    """201 with what the request started, once per Idempotency-Key."""
    found, replayed = request_keys.start_once(user=request.user, key=request.headers.get("Idempotency-Key"),
                                              endpoint=endpoint, data=data, start=start)
    response = Response(body(found), status=201)
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return response

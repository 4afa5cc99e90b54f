"""The API's only body parser: JSON within the size and depth limits (core.jsonlimits)."""
from __future__ import annotations

from django.conf import settings
from rest_framework import exceptions
from rest_framework.parsers import JSONParser

from core import jsonlimits


class LimitedJSONParser(JSONParser):
    """Deep, huge or non-finite JSON is a 400 with a clear message, never a RecursionError."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.API_MAX_BODY_BYTES
        # One byte past the limit is enough to refuse: never read an unbounded stream.
        body = stream.read(limit + 1) if stream is not None else b""
        try:
            return jsonlimits.loads(body, max_bytes=limit)
        except jsonlimits.JSONLimitError as exc:
            raise exceptions.ParseError(str(exc)) from None

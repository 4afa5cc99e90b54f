"""Query fields the runs list and the tool-call explorer share: one check each, as the pages make it."""
from __future__ import annotations

from rest_framework import serializers

from core.errors import InvalidInput
from runs import explorer
from runs.labels import label_filters_parse


class SearchQueryField(serializers.CharField):
    """Full-text search words and "quoted phrases", checked as the explorer reads them."""

    def __init__(self, **kwargs):
        super().__init__(max_length=explorer.MAX_QUERY_CHARS, **kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        try:
            explorer.search_terms(value)
        except InvalidInput as exc:
            raise serializers.ValidationError(exc.message) from None
        return value


class LabelFiltersField(serializers.ListField):
    """Repeated key=value (or key) label filters, parsed into (key, value or None) pairs."""

    def __init__(self, **kwargs):
        super().__init__(child=serializers.CharField(max_length=300), **kwargs)

    def to_internal_value(self, data):
        wanted, problems = label_filters_parse(super().to_internal_value(data))
        if problems:
            raise serializers.ValidationError(problems)
        return wanted

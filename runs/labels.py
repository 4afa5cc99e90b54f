"""Run labels (`key=value`, e.g. team=payments, agent=triage): parsing, checks, filters.

A run's labels are set when it starts and never change: they are stored twice, as a
dict on the run (for display, the API and exports) and as RunLabel rows indexed on
(key, value, run), so a filter by label is an index lookup at any number of runs.
"""
from __future__ import annotations

import re
from typing import Any

from django import forms

from runs.models import RunLabel

MAX_LABELS = 20
MAX_LABEL_FILTERS = MAX_LABELS  # a run carries at most this many labels: more filters can match nothing
# Unlike a malformed filter (shown, the other filters still apply), too many is refused: a 400.
TOO_MANY_FILTERS = f"at most {MAX_LABEL_FILTERS} label filters"
MAX_VALUE_CHARS = 200
KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.\-/]{0,62}$")
KEY_RULE = "a key is 1-63 lower-case letters, digits, '_', '.', '-' or '/', starting with a letter or digit"


def labels_parse(text: str) -> tuple[dict[str, str], list[str]]:
    """`team=payments, agent=triage` (commas or new lines) into a dict, and every problem found."""
    labels: dict[str, str] = {}
    problems: list[str] = []
    for item in re.split(r"[,\n]", text or ""):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            problems.append(f"{item!r}: write labels as key=value")
            continue
        labels[key.strip()] = value.strip()
    return labels, problems + labels_errors(labels)


class LabelsField(forms.CharField):
    """A `key=value, ...` input that cleans to the labels dict, refusing it with every problem found."""

    def clean(self, value):
        labels, problems = labels_parse(super().clean(value))
        if problems:
            raise forms.ValidationError("; ".join(problems))
        return labels


def labels_errors(labels: Any) -> list[str]:
    if not isinstance(labels, dict):
        return ["labels must be an object of key: value strings"]
    problems = []
    if len(labels) > MAX_LABELS:
        problems.append(f"at most {MAX_LABELS} labels")
    for key, value in labels.items():
        if not isinstance(key, str) or not KEY_PATTERN.match(key):
            problems.append(f"{key!r}: {KEY_RULE}")
        if not isinstance(value, str):
            problems.append(f"{key}: the value must be a string")
        elif not value.strip() or len(value) > MAX_VALUE_CHARS:
            problems.append(f"{key}: the value must be 1-{MAX_VALUE_CHARS} characters")
    return problems


def label_filters_parse(values: list[str] | str) -> tuple[tuple[tuple[str, str | None], ...], list[str]]:
    """Filters `key=value` (that value) or `key` (any value), from a text or a list of them."""
    items = values if isinstance(values, list) else re.split(r"[,\n]", values or "")
    wanted, problems = [], []
    if len(items) > MAX_LABEL_FILTERS:  # each filter is one more subquery: 990 of them took 3 s
        return (), [TOO_MANY_FILTERS]
    for item in items:
        for part in re.split(r"[,\n]", item or ""):
            part = part.strip()
            if not part:
                continue
            key, sep, value = part.partition("=")
            key = key.strip()
            if not KEY_PATTERN.match(key):
                problems.append(f"{key!r}: {KEY_RULE}")
                continue
            wanted.append((key, value.strip() if sep else None))
    if len(wanted) > MAX_LABEL_FILTERS:
        return (), [TOO_MANY_FILTERS]
    return tuple(wanted), problems


def labels_text(labels: dict[str, str] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((labels or {}).items()))


def runs_with_labels(queryset, wanted):
    """Narrow runs to those carrying every wanted label: one indexed IN (subquery) per label."""
    for key, value in wanted:
        rows = RunLabel.objects.filter(key=key)
        if value is not None:
            rows = rows.filter(value=value)
        queryset = queryset.filter(pk__in=rows.values("run_id"))
    return queryset

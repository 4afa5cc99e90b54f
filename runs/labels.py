"""Run labels (`key=value`, e.g. team=payments, agent=triage): parsing, checks, filters.

A run's labels are set when it starts, and changed only by `run_labels_change` (a bulk
action's "change labels"): they are stored twice, as a dict on the run (for display, the API
and exports) and as RunLabel rows indexed on (key, value, run), so a filter by label is an
index lookup at any number of runs; `run_labels_change` keeps the two in step.
"""
from __future__ import annotations

import re
from typing import Any

from django import forms
from django.db import transaction

from core.audit import audit
from core.errors import InvalidInput
from core.models import AuditAction
from runs.models import Run, RunLabel

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


def label_change_errors(add: Any, remove: Any) -> dict[str, str]:
    """What is wrong with a change of labels: `add` a dict of key: value, `remove` a list of keys."""
    errors = {}
    problems = labels_errors(add)
    if problems:
        errors["add"] = "; ".join(problems)
    if not isinstance(remove, list) or not all(isinstance(k, str) and KEY_PATTERN.match(k) for k in remove):
        errors["remove"] = f"a list of label keys ({KEY_RULE})"
    elif len(remove) > MAX_LABELS:
        errors["remove"] = f"at most {MAX_LABELS} keys"
    if not errors and not add and not remove:
        errors["add"] = "add or remove at least one label"
    if not errors and set(add) & set(remove):
        errors["remove"] = f"a key both added and removed: {', '.join(sorted(set(add) & set(remove)))}"
    return errors


def run_labels_change(*, run_id: int, user, add: dict[str, str], remove: list[str]) -> bool:
    """Set `add` and drop the keys in `remove` on one run, its RunLabel rows in step, audited.

    The caller checks who may change the run (runs.bulk). Returns False when nothing changed
    (no audit row then). Raises InvalidInput for a bad change or one leaving too many labels."""
    errors = label_change_errors(add, remove)
    if errors:
        raise InvalidInput("The labels could not be changed: " + "; ".join(f"{k}: {v}" for k, v in errors.items()),
                           fields=errors)
    with transaction.atomic():
        run = Run.objects.select_for_update(no_key=True).get(pk=run_id)
        before = dict(run.labels or {})
        after = {k: v for k, v in before.items() if k not in remove}
        after.update(add)
        if after == before:
            return False
        if len(after) > MAX_LABELS:
            raise InvalidInput(f"Run {run.pk} would carry {len(after)} labels: at most {MAX_LABELS}.",
                               fields={"add": f"at most {MAX_LABELS} labels on a run"})
        Run.objects.filter(pk=run.pk).update(labels=after)
        gone = [k for k in before if k not in after or after[k] != before[k]]
        RunLabel.objects.filter(run_id=run.pk, key__in=gone).delete()
        RunLabel.objects.bulk_create([RunLabel(run_id=run.pk, key=k, value=v) for k, v in after.items()
                                      if before.get(k) != v])
        audit(actor=user, action=AuditAction.RUN_LABELS_CHANGED, target=run,
              summary=f"Run {run.pk} labels: {labels_text(after) or 'none'}",
              details={"before": before, "after": after})
    return True

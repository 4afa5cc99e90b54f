"""The registry's usage figures, read from the attempts (capabilities.usage asks this module)."""
from __future__ import annotations

import math
from datetime import timedelta

from django.db.models import Count, F, Q, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from capabilities.usage import USAGE_WINDOW, Usage
from runs.models import Attempt


def _of_the_registry(attempts):
    """An evaluation's simulated capability (no registry version) only shares the name: its calls
    are not this capability's usage, nor a later capability's of that name."""
    return attempts.exclude(capability_version__isnull=True, run__evaluation__isnull=False)


# Nearest-rank percentile: the latency at rank ceil(0.95 * n) when sorted ascending.
P95 = 0.95


def usage(*, names: list[str] | None = None, now=None, window: timedelta = USAGE_WINDOW) -> dict[str, Usage]:
    """Calls, errors and p95 latency per capability over the window, aggregated in the database.

    Two queries whatever the number of attempts: one GROUP BY for the counts and
    one window query that returns exactly the p95 row of each capability (the
    index on (capability_name, -started_at) serves both), on SQLite and PostgreSQL.
    """
    since = (now or timezone.now()) - window
    attempts = _of_the_registry(Attempt.objects.filter(started_at__gte=since))
    if names is not None:
        attempts = attempts.filter(capability_name__in=names)
    counts = {row["capability_name"]: row for row in attempts.values("capability_name").annotate(
        calls=Count("id"), errors=Count("id", filter=~Q(status="ok")))}
    if not counts:
        return {}
    ranked = attempts.annotate(
        rank=Window(RowNumber(), partition_by=[F("capability_name")], order_by=[F("latency_s").asc(), F("id").asc()]))
    # Filtering on a window annotation needs the rank per capability: ask for every
    # capability's own rank at once with an OR of (name, rank) pairs (one row each).
    wanted = Q()
    for name, row in counts.items():
        wanted |= Q(capability_name=name, rank=max(1, math.ceil(P95 * row["calls"])))
    p95 = dict(ranked.filter(wanted).values_list("capability_name", "latency_s"))
    return {name: Usage(calls=row["calls"], errors=row["errors"], p95_latency_s=p95.get(name))
            for name, row in counts.items()}


def recent_attempts(*, name: str, limit: int = 20):
    return (_of_the_registry(Attempt.objects.filter(capability_name=name)).select_related("capability_version")
            .order_by("-started_at", "-id")[:limit])

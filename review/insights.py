"""Score dashboards: how one score config's values are spread and how they move, overall and by
capability, planner, agent or a label's values.

One grouped query reads a window: the scores written in it, counted per (group, time bucket, value
bin, category) in the database, so what comes back is (groups x buckets x bins) rows whatever the
number of scores. A run's own score (not an attempt's) counts under every capability the run called
(an attempt's under its attempt's capability), so those rows may add up to more than the total.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import connections, router
from django.db.models import Count, F, FloatField, IntegerField, Max, Min, OuterRef, Subquery, Value
from django.db.models.functions import Cast, Coalesce, Floor

from core.errors import InvalidInput
from gateway.models import Agent
from review.models import Score, ScoreConfig, ScoreKind
from runs.dashboard import periods
from runs.expressions import BucketIndex
from runs.labels import KEY_PATTERN, KEY_RULE
from runs.models import RunLabel

WINDOWS = {key: periods.WINDOWS[key] for key in ("24h", "7d", "30d")}
DEFAULT_WINDOW = "7d"
GROUPS = ("none", "capability", "planner", "agent", "label")
DEFAULT_GROUP = "none"
BINS = 10            # a numeric score's distribution: ten equal bins over its range
MAX_GROUPS = 50      # the most frequent groups; the rest are counted, not listed
OTHER = "(other)"    # a category no longer in the config (the config changed since)


@dataclass
class Figures:
    """One group's scores (or all of them): how many, their spread over the bins, and per time bucket."""

    key: str
    label: str
    bins: list[int]
    n_by_bucket: list[int]
    total_by_bucket: list[float]   # numeric, boolean: the sum of values; categorical: the headline's count
    n: int = 0
    total: float = 0.0

    @property
    def mean(self) -> float | None:
        """Numeric: the mean value; boolean: the share of yes; categorical: the headline category's share."""
        return self.total / self.n if self.n else None

    @property
    def trend(self) -> list[float | None]:
        return [t / n if n else None for n, t in zip(self.n_by_bucket, self.total_by_bucket, strict=True)]

    def add(self, *, bucket: int | None, position: int, n: int, total: float) -> None:
        self.n += n
        self.total += total
        self.bins[position] += n
        if bucket is not None and 0 <= bucket < len(self.n_by_bucket):
            self.n_by_bucket[bucket] += n
            self.total_by_bucket[bucket] += total


@dataclass
class ScoreInsights:
    config: ScoreConfig
    window: periods.TimeWindow
    group: str
    label_key: str
    start: datetime
    end: datetime
    bucket_starts: list[datetime]
    bin_labels: list[str]
    headline: str           # categorical: the most frequent category (what `mean` is the share of)
    overall: Figures
    groups: list[Figures] = field(default_factory=list)
    more_groups: int = 0    # groups beyond MAX_GROUPS, not listed

    @property
    def overlapping(self) -> bool:
        return self.group == "capability"


def config_named(name: str) -> ScoreConfig:
    config = ScoreConfig.objects.filter(name=name).first()
    if config is None:
        raise InvalidInput(f"No score config is named “{name[:60]}”.", fields={"config": "unknown"})
    return config


def query_problems(*, window: str, group: str, label_key: str) -> dict[str, str]:
    """What is wrong with a dashboard query, per parameter ({} when it is fine)."""
    problems = {}
    if window not in WINDOWS:
        problems["window"] = f"Unknown time window “{window[:40]}”: choose one of {', '.join(WINDOWS)}."
    if group not in GROUPS:
        problems["group"] = f"Unknown grouping “{group[:40]}”: choose one of {', '.join(GROUPS)}."
    if group == "label" and not label_key:
        problems["label_key"] = "Name the label key whose values split the scores (team, say)."
    elif label_key and not KEY_PATTERN.match(label_key):
        problems["label_key"] = f"“{label_key[:70]}” is not a label key: {KEY_RULE}."
    return problems


def _group_key(group: str, label_key: str):
    if group == "capability":
        # An attempt's score: its capability; the run's own: each capability the run called.
        return Coalesce(F("attempt__capability_name"), F("run__attempts__capability_name"))
    if group == "planner":
        return F("run__planner")
    if group == "agent":
        return Cast(Coalesce(F("run__gateway_session__agent_id"), Value(0)), IntegerField())
    if group == "label":
        return Subquery(RunLabel._base_manager.filter(run_id=OuterRef("run_id"), key=label_key).values("value")[:1])
    return Value("")


def _value_bin(config: ScoreConfig, low: float, high: float):
    """The bin of a value: 0..BINS-1 over [low, high] (numeric), 0 or 1 (boolean), 0 (categorical)."""
    if config.kind == ScoreKind.BOOLEAN:
        return Cast(F("number"), IntegerField())
    if config.kind == ScoreKind.CATEGORICAL or high <= low:
        return Value(0)
    return Cast(Floor((F("number") - Value(low)) * Value(BINS / (high - low))), IntegerField())


def _range(config: ScoreConfig, scores) -> tuple[float, float]:
    if config.kind != ScoreKind.NUMERIC:
        return 0.0, 1.0
    seen = scores.aggregate(low=Min("number"), high=Max("number"))
    low = config.min_value if config.min_value is not None else seen["low"] or 0.0
    high = config.max_value if config.max_value is not None else seen["high"] or 0.0
    # A score written before the range was narrowed still lands in a bin: the edge one.
    return float(low), float(max(high, low))


def _bin_labels(config: ScoreConfig, low: float, high: float) -> list[str]:
    if config.kind == ScoreKind.BOOLEAN:
        return ["no", "yes"]
    if config.kind == ScoreKind.CATEGORICAL:
        return [*config.categories, OTHER]
    if high <= low:
        return [f"{low:g}"]
    width = (high - low) / BINS
    return [f"{low + k * width:.3g}–{low + (k + 1) * width:.3g}" for k in range(BINS)]


def _grouped_rows(scores, *, group: str, label_key: str, starts: list[datetime], seconds: float, bin_expression):
    """(group, bucket, bin, category, count, sum of values) rows, grouped in the database. Grouping by
    capability joins a run's attempts, so its rows are first made distinct per (score, capability)."""
    rows = scores.annotate(g=_group_key(group, label_key), i=BucketIndex("created_at", start=starts[0], seconds=seconds),
                           b=bin_expression, v=Cast(F("number"), FloatField()))
    rows = rows.values("id", "category", "g", "i", "b", "v").order_by()
    if group == "capability":
        rows = rows.distinct()
    sql, params = rows.query.sql_with_params()
    connection = connections[router.db_for_read(Score)]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT t.g, t.i, t.b, t.category, COUNT(*), SUM(t.v) FROM ({sql}) t "
                       f"GROUP BY t.g, t.i, t.b, t.category", params)
        return cursor.fetchall()


def _headline(config: ScoreConfig, scores) -> str:
    """A categorical config's most frequent category in the window (the trend follows its share)."""
    if config.kind != ScoreKind.CATEGORICAL:
        return ""
    top = scores.values("category").annotate(n=Count("id")).order_by("-n", "category").first()
    return top["category"] if top else ""


def _fold(rows, *, config: ScoreConfig, labels: list[str], headline: str, into) -> None:
    """Add grouped rows to the Figures that `into(group key)` names."""
    for g, i, b, category, n, total in rows:
        if config.kind == ScoreKind.CATEGORICAL:
            position = config.categories.index(category) if category in config.categories else len(labels) - 1
            value = float(n) if category == headline else 0.0
        else:
            position = min(max(int(b or 0), 0), len(labels) - 1)
            value = float(total or 0.0)
        for figures in into("" if g is None else str(g)):
            figures.add(bucket=i, position=position, n=n, total=value)


def score_insights(*, config: ScoreConfig, window_key: str = DEFAULT_WINDOW, group: str = DEFAULT_GROUP,
                   label_key: str = "", now: datetime) -> ScoreInsights:
    """The config's scores written in the window: spread and trend, overall and per group (the most
    frequent MAX_GROUPS)."""
    window = WINDOWS[window_key]
    start, end, starts = periods.window_bounds(window, now)
    # Evaluation runs are left out, as the dashboard and usage leave them out: they are rehearsals.
    scores = Score.objects.filter(config=config, created_at__gte=start, created_at__lte=end,
                                  run__evaluation__isnull=True)
    low, high = _range(config, scores)
    labels = _bin_labels(config, low, high)
    headline = _headline(config, scores)

    def empty(key: str) -> Figures:
        return Figures(key=key, label=key or "all scores", bins=[0] * len(labels), n_by_bucket=[0] * len(starts),
                       total_by_bucket=[0.0] * len(starts))

    def read(grouping: str):
        return _grouped_rows(scores, group=grouping, label_key=label_key, starts=starts,
                             seconds=window.bucket.total_seconds(), bin_expression=_value_bin(config, low, high))

    overall = empty("")
    by_group: dict[str, Figures] = {}
    # By capability a run's score is read once per capability it called: the total reads it once.
    once = group != "capability"
    _fold(read(group), config=config, labels=labels, headline=headline,
          into=lambda key: [by_group.setdefault(key, empty(key)), *([overall] if once else [])])
    if not once:
        _fold(read("none"), config=config, labels=labels, headline=headline, into=lambda key: [overall])
    ordered = sorted(by_group.values(), key=lambda f: (-f.n, f.key)) if group != "none" else []
    listed = ordered[:MAX_GROUPS]
    _name(listed, group, label_key)
    return ScoreInsights(config=config, window=window, group=group, label_key=label_key, start=start, end=end,
                         bucket_starts=starts, bin_labels=labels, headline=headline, overall=overall,
                         groups=listed, more_groups=len(ordered) - len(listed))


def _name(groups: list[Figures], group: str, label_key: str) -> None:
    """Each group's label as the page shows it: an agent's name, "(no <key>)", "(no tool call)"."""
    agents = {}
    if group == "agent":
        agents = dict(Agent.objects.filter(pk__in=[int(f.key) for f in groups if f.key not in ("", "0")])
                      .values_list("pk", "name"))
    for figures in groups:
        if group == "agent":
            figures.label = "no agent" if figures.key in ("", "0") else agents.get(int(figures.key), f"agent {figures.key}")
        elif group == "capability" and not figures.key:
            figures.label = "(no tool call)"
        elif group == "label" and not figures.key:
            figures.label = f"(no {label_key})"

"""Reads of the review app: what a run's (or an attempt's) review panel shows, and the API's lists."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet
from django.utils.safestring import SafeString

from review.markdown import markdown_html
from review.models import Annotation, IncidentSummary, RootCauseCategory, Score, ScoreConfig
from review.scoring import score_value, shown_value, value_problem
from runs.models import Attempt, Run
from runs.trace.labels import attempt_label


def scores_of(run: Run, *, config: str = "", attempt: str = "", source: str = "") -> QuerySet[Score]:
    """A run's scores, oldest first; narrowed to a config (by name), an attempt (its uid, or "run" for the
    run's own scores) or a source."""
    scores = Score.objects.filter(run=run)
    if config:
        scores = scores.filter(config__name=config)
    if attempt:
        scores = scores.filter(attempt__isnull=True) if attempt == "run" else scores.filter(attempt__uid=attempt)
    if source:
        scores = scores.filter(source=source)
    return scores.select_related("config", "author", "attempt__step__revision").order_by("created_at", "id")


def annotations_of(run: Run) -> QuerySet[Annotation]:
    return (Annotation.objects.filter(run=run).select_related("author", "attempt__step__revision")
            .prefetch_related("mentions").order_by("created_at", "id"))


@dataclass(frozen=True)
class ShownScore:
    """A score as a page and the API show it: its value in its kind, in words, and whether it still fits."""

    score: Score
    value: Any
    shown_value: str
    stale: bool
    target: str  # the attempt's label (r1·s1#1), "" for the run


@dataclass(frozen=True)
class ShownAnnotation:
    annotation: Annotation
    html: SafeString
    target: str


@dataclass(frozen=True)
class ShownIncident:
    incident: IncidentSummary
    html: SafeString


def shown_score(score: Score) -> ShownScore:
    value = score_value(score)
    return ShownScore(score=score, value=value, shown_value=shown_value(score),
                      stale=value_problem(score.config, value) is not None, target=_target(score.attempt))


def shown_annotation(annotation: Annotation) -> ShownAnnotation:
    html = markdown_html(annotation.body, mentions=[u.get_username() for u in annotation.mentions.all()])
    return ShownAnnotation(annotation=annotation, html=html, target=_target(annotation.attempt))


def shown_incident(incident: IncidentSummary) -> ShownIncident:
    return ShownIncident(incident=incident, html=markdown_html(incident.summary))


def _target(attempt: Attempt | None) -> str:
    if attempt is None:
        return ""
    return attempt_label(attempt.step.revision.number, attempt.step.key, attempt.number)


@dataclass
class ReviewPanel:
    """A run's review (or, with `attempt`, one attempt's): scores, comments, the incident, and the forms' choices."""

    run: Run
    attempt: Attempt | None
    scores: list[ShownScore]
    annotations: list[ShownAnnotation]
    # On the run's panel: what was said about its attempts, each shown with a link to the attempt.
    attempt_scores: list[ShownScore] = field(default_factory=list)
    attempt_annotations: list[ShownAnnotation] = field(default_factory=list)
    incident: ShownIncident | None = None
    configs: list[ScoreConfig] = field(default_factory=list)
    root_causes: list[RootCauseCategory] = field(default_factory=list)


def review_panel(*, run: Run, attempt: Attempt | None = None) -> ReviewPanel:
    if attempt is not None:
        return ReviewPanel(run=run, attempt=attempt,
                           scores=[shown_score(s) for s in scores_of(run).filter(attempt=attempt)],
                           annotations=[shown_annotation(a) for a in annotations_of(run).filter(attempt=attempt)],
                           configs=list(ScoreConfig.objects.filter(enabled=True, builtin=False)))
    scores = [shown_score(s) for s in scores_of(run)]
    annotations = [shown_annotation(a) for a in annotations_of(run)]
    incident = (IncidentSummary.objects.select_related("root_cause", "owner", "updated_by").filter(run=run).first())
    return ReviewPanel(
        run=run, attempt=None,
        scores=[s for s in scores if s.score.attempt_id is None],
        annotations=[a for a in annotations if a.annotation.attempt_id is None],
        attempt_scores=[s for s in scores if s.score.attempt_id is not None],
        attempt_annotations=[a for a in annotations if a.annotation.attempt_id is not None],
        incident=shown_incident(incident) if incident is not None else None,
        configs=list(ScoreConfig.objects.filter(enabled=True, builtin=False)),
        root_causes=list(RootCauseCategory.objects.filter(enabled=True)))

"""Reads of the review app: what a run's (or an attempt's) review panel shows, and the API's lists."""
from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import QuerySet

from review.markdown import markdown_html
from review.models import Annotation, IncidentSummary, RootCauseCategory, Score, ScoreConfig
from review.scoring import score_value, shown_value, value_problem
from runs.models import Attempt, Run
from runs.trace.labels import attempt_label


def scores_of(run: Run) -> QuerySet[Score]:
    return (Score.objects.filter(run=run).select_related("config", "author", "attempt__step__revision")
            .order_by("created_at", "id"))


def annotations_of(run: Run) -> QuerySet[Annotation]:
    return (Annotation.objects.filter(run=run).select_related("author", "attempt__step__revision")
            .prefetch_related("mentions").order_by("created_at", "id"))


def shown_score(score: Score) -> Score:
    """The score with what a page shows: its value in words, and whether it still fits its config."""
    score.shown_value = shown_value(score)
    score.value = score_value(score)
    score.stale = value_problem(score.config, score.value) is not None
    score.target = _target(score.attempt)
    return score


def shown_annotation(annotation: Annotation) -> Annotation:
    annotation.html = markdown_html(annotation.body, mentions=[u.get_username() for u in annotation.mentions.all()])
    annotation.target = _target(annotation.attempt)
    return annotation


def _target(attempt: Attempt | None) -> str:
    if attempt is None:
        return ""
    return attempt_label(attempt.step.revision.number, attempt.step.key, attempt.number)


def shown_incident(incident: IncidentSummary) -> IncidentSummary:
    incident.html = markdown_html(incident.summary)
    return incident


@dataclass
class ReviewPanel:
    """A run's review (or, with `attempt`, one attempt's): scores, comments, the incident, and the forms' choices."""

    run: Run
    attempt: Attempt | None
    scores: list[Score]
    annotations: list[Annotation]
    # On the run's panel: what was said about its attempts, each shown with a link to the attempt.
    attempt_scores: list[Score] = field(default_factory=list)
    attempt_annotations: list[Annotation] = field(default_factory=list)
    incident: IncidentSummary | None = None
    configs: list[ScoreConfig] = field(default_factory=list)
    root_causes: list[RootCauseCategory] = field(default_factory=list)


def review_panel(*, run: Run, attempt: Attempt | None = None) -> ReviewPanel:
    scores = [shown_score(s) for s in scores_of(run)]
    annotations = [shown_annotation(a) for a in annotations_of(run)]
    if attempt is not None:
        return ReviewPanel(run=run, attempt=attempt, scores=[s for s in scores if s.attempt_id == attempt.pk],
                           annotations=[a for a in annotations if a.attempt_id == attempt.pk],
                           configs=list(ScoreConfig.objects.filter(enabled=True, builtin=False)))
    incident = (IncidentSummary.objects.select_related("root_cause", "owner", "updated_by").filter(run=run).first())
    if incident is not None:
        shown_incident(incident)
    return ReviewPanel(
        run=run, attempt=None,
        scores=[s for s in scores if s.attempt_id is None], annotations=[a for a in annotations if a.attempt_id is None],
        attempt_scores=[s for s in scores if s.attempt_id is not None],
        attempt_annotations=[a for a in annotations if a.attempt_id is not None],
        incident=incident, configs=list(ScoreConfig.objects.filter(enabled=True, builtin=False)),
        root_causes=list(RootCauseCategory.objects.filter(enabled=True)))

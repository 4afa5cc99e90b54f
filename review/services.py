"""Writes of the review app: score configs and root causes (admins), scores, comments, incident summaries.

Each change is one atomic function that checks the permission itself and writes its audit row in the
same transaction. New scores and comments are not audited (they are records with an author and a time
themselves); editing one is, with what it said before.
"""
from __future__ import annotations

import math
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import IntegrityError, transaction

from core.audit import audit
from core.errors import Conflict, FieldErrors, InvalidInput, NotAllowed
from core.models import AuditAction
from core.permissions import allowed, require
from core.projects import project_scope
from core.roles import MANAGE_REVIEW_SETTINGS, REVIEW_RUNS
from notifications.mentions import mentions_notify
from review.autoscores import builtin_configs
from review.markdown import mentioned_names
from review.models import (
    Annotation,
    IncidentStatus,
    IncidentSummary,
    RootCauseCategory,
    Score,
    ScoreConfig,
    ScoreKind,
    ScoreSource,
)
from review.scoring import score_value, stored, value_problem
from runs.models import Attempt, Run

MAX_CATEGORIES = 50
MAX_LINKS = 20
_url = URLValidator(schemes=["http", "https"])


def _refuse(errors: FieldErrors, what: str) -> None:
    if errors:
        raise InvalidInput(f"The {what} is invalid: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in errors.items()),
                           fields=dict(errors))


def _text(errors: FieldErrors, field: str, value: Any, *, max_chars: int, required: bool = False) -> str:
    if not isinstance(value, str):
        errors.add(field, "must be text")
        return ""
    if required and not value.strip():
        errors.add(field, "must not be empty")
    if "\x00" in value:  # PostgreSQL keeps no NUL in text
        errors.add(field, "must not contain NUL characters")
    if len(value) > max_chars:
        errors.add(field, f"at most {max_chars} characters")
    return value.strip() if required else value


# -- score configs ---------------------------------------------------------------------------------

def _config_errors(*, name, description, kind, min_value, max_value, categories) -> FieldErrors:
    errors = FieldErrors()
    _text(errors, "name", name, max_chars=60, required=True)
    _text(errors, "description", description, max_chars=2000)
    if kind not in ScoreKind.values:
        errors.add("kind", f"one of {', '.join(ScoreKind.values)}")
        return errors
    for field, value in (("min_value", min_value), ("max_value", max_value)):
        if value is not None and (kind != ScoreKind.NUMERIC or isinstance(value, bool)
                                  or not isinstance(value, (int, float)) or not math.isfinite(value)):
            errors.add(field, "a finite number, for numeric scores only")
    if kind == ScoreKind.NUMERIC and not errors and min_value is not None and max_value is not None \
            and min_value >= max_value:
        errors.add("max_value", "must be more than min_value")
    if kind == ScoreKind.CATEGORICAL:
        if (not isinstance(categories, list) or not 1 <= len(categories) <= MAX_CATEGORIES
                or any(not isinstance(c, str) or not c.strip() or len(c) > 60 or "\x00" in c for c in categories)):
            errors.add("categories", f"1-{MAX_CATEGORIES} names of 1-60 characters")
        elif len({c.strip() for c in categories}) != len(categories):
            errors.add("categories", "each name once")
    elif categories:
        errors.add("categories", "for categorical scores only")
    return errors


@transaction.atomic
def score_config_save(*, user, name: str, kind: str, description: str = "", min_value: float | None = None,
                      max_value: float | None = None, categories: list[str] | None = None, enabled: bool = True,
                      config_id: int | None = None) -> ScoreConfig:
    require(user, MANAGE_REVIEW_SETTINGS, "manage score configs")
    categories = [c.strip() if isinstance(c, str) else c for c in (categories or [])] \
        if isinstance(categories, list) or categories is None else categories
    errors = _config_errors(name=name, description=description, kind=kind, min_value=min_value,
                            max_value=max_value, categories=categories)
    config = None if config_id is None else ScoreConfig.objects.select_for_update().get(pk=config_id)
    name = name.strip() if isinstance(name, str) else name
    if not errors and ScoreConfig.objects.filter(name=name).exclude(pk=config_id or 0).exists():
        errors.add("name", "another score config has this name")
    if config is not None and config.builtin and not errors and (
            name, kind, min_value, max_value, categories) != (config.name, config.kind, config.min_value,
                                                              config.max_value, config.categories):
        errors.add("kind", "the runtime writes this score: only its description and enabled can change")
    _refuse(errors, "score config")
    if config is not None and config.kind != kind and config.scores.exists():
        raise Conflict(f"{config.name} has scores of kind {config.kind}: its kind cannot change "
                       "(make a new config, and disable this one).")
    before = None if config is None else _config_fields(config)
    config = config or ScoreConfig()
    config.name, config.description, config.kind, config.enabled = name, description, kind, enabled
    config.min_value, config.max_value, config.categories = min_value, max_value, categories
    config.save()
    audit(actor=user, action=AuditAction.SCORE_CONFIG_SAVED, target=config, summary=f"Score config {name} saved",
          details={"before": before, "after": _config_fields(config)})
    return config


def _config_fields(config: ScoreConfig) -> dict[str, Any]:
    return {"name": config.name, "kind": config.kind, "description": config.description, "enabled": config.enabled,
            "min_value": config.min_value, "max_value": config.max_value, "categories": config.categories}


@transaction.atomic
def score_config_delete(*, user, config_id: int) -> None:
    require(user, MANAGE_REVIEW_SETTINGS, "manage score configs")
    config = ScoreConfig.objects.select_for_update().get(pk=config_id)
    if config.builtin:
        raise Conflict(f"{config.name} is written by the runtime: disable it instead.")
    if config.scores.exists():
        raise Conflict(f"{config.name} has scores: disable it instead, so they stay readable.")
    queues = list(config.queues.values_list("name", flat=True)[:5])
    if queues:
        raise Conflict(f"{config.name} is scored in review queues ({', '.join(queues)}): take it out of them first.")
    audit(actor=user, action=AuditAction.SCORE_CONFIG_DELETED, target=config,
          summary=f"Score config {config.name} deleted", details=_config_fields(config))
    config.delete()


# -- root-cause categories -------------------------------------------------------------------------

@transaction.atomic
def root_cause_save(*, user, name: str, description: str = "", enabled: bool = True,
                    category_id: int | None = None) -> RootCauseCategory:
    require(user, MANAGE_REVIEW_SETTINGS, "manage root-cause categories")
    errors = FieldErrors()
    name = _text(errors, "name", name, max_chars=80, required=True)
    _text(errors, "description", description, max_chars=300)
    if not errors and RootCauseCategory.objects.filter(name=name).exclude(pk=category_id or 0).exists():
        errors.add("name", "another category has this name")
    _refuse(errors, "root-cause category")
    category = RootCauseCategory.objects.select_for_update().get(pk=category_id) if category_id else RootCauseCategory()
    category.name, category.description, category.enabled = name, description, enabled
    category.save()
    audit(actor=user, action=AuditAction.ROOT_CAUSE_SAVED, target=category, summary=f"Root cause {name} saved",
          details={"name": name, "description": description, "enabled": enabled})
    return category


@transaction.atomic
def root_cause_delete(*, user, category_id: int) -> None:
    require(user, MANAGE_REVIEW_SETTINGS, "manage root-cause categories")
    category = RootCauseCategory.objects.select_for_update().get(pk=category_id)
    if category.incidents.exists():
        raise Conflict(f"{category.name} is the root cause of incidents: disable it instead.")
    audit(actor=user, action=AuditAction.ROOT_CAUSE_DELETED, target=category,
          summary=f"Root cause {category.name} deleted", details={"name": category.name})
    category.delete()


# -- scores ----------------------------------------------------------------------------------------

def _attempt(run: Run, attempt_uid: str | None) -> Attempt | None:
    if not attempt_uid:
        return None
    attempt = Attempt.objects.filter(run=run, uid=attempt_uid).first()
    if attempt is None:
        raise InvalidInput(f"Run #{run.pk} has no attempt {attempt_uid[:40]!r}.", fields={"attempt": "not in this run"})
    return attempt


def _author_key(user, source: str, source_name: str) -> str:
    return f"code:{user.pk}:{source_name}" if source == ScoreSource.CODE else f"user:{user.pk}"


def _writable_config(config_ref: int | str) -> ScoreConfig:
    lookup = {"pk": config_ref} if isinstance(config_ref, int) and not isinstance(config_ref, bool) else {"name": config_ref}
    config = ScoreConfig.objects.filter(**lookup).first() if isinstance(config_ref, (int, str)) else None
    if config is None:
        raise InvalidInput(f"No score config {config_ref!r}.", fields={"config": "unknown score config"})
    if config.builtin:
        raise InvalidInput(f"{config.name} is written by the runtime when a run ends, not by hand.",
                           fields={"config": "written by the runtime only"})
    if not config.enabled:
        raise InvalidInput(f"{config.name} is disabled: it takes no new scores.", fields={"config": "disabled"})
    return config


def score_set(*, user, run: Run, config: int | str, value: Any, comment: str = "", attempt_uid: str | None = None,
              source: str = ScoreSource.PERSON, source_name: str = "") -> tuple[Score, bool]:
    """Score a run (or one of its attempts): a new score, or the author's earlier one edited. Returns (score, created)."""
    require(user, REVIEW_RUNS, "score runs")
    errors = FieldErrors()
    comment = _text(errors, "comment", comment, max_chars=2000)
    if source not in (ScoreSource.PERSON, ScoreSource.CODE):
        errors.add("source", "person or code (the runtime writes its own)")
    elif source == ScoreSource.CODE:
        _text(errors, "source_name", source_name, max_chars=80, required=True)
    elif source_name:
        errors.add("source_name", "only for scores by code")
    _refuse(errors, "score")
    config_row = _writable_config(config)
    problem = value_problem(config_row, value)
    if problem:
        raise InvalidInput(f"{config_row.name} takes {problem}.", fields={"value": problem})
    attempt = _attempt(run, attempt_uid)
    key = _author_key(user, source, source_name.strip())
    for _ in range(2):  # a concurrent first score by the same author loses the insert, then edits
        try:
            with transaction.atomic():
                score = Score.objects.select_for_update().filter(config=config_row, run=run, attempt=attempt,
                                                                 author_key=key).first()
                if score is not None:
                    _score_change(score, user=user, value=value, comment=comment)
                    return score, False
                score = Score.objects.create(config=config_row, run=run, attempt=attempt, source=source,
                                             source_name=source_name.strip(), author=user, author_key=key,
                                             comment=comment, **stored(config_row, value))
                return score, True
        except IntegrityError:
            continue
    raise Conflict("The score changed while it was saved: try again.")


def _score_change(score: Score, *, user, value: Any, comment: str) -> None:
    before = {"value": score_value(score), "comment": score.comment}
    for field, column in stored(score.config, value).items():
        setattr(score, field, column)
    score.comment = comment
    score.save(update_fields=["number", "category", "comment", "updated_at"])
    audit(actor=user, action=AuditAction.SCORE_EDITED, target=score,
          summary=f"Score {score.config.name} on run #{score.run_id} edited",
          details={"before": before, "after": {"value": value, "comment": comment}, "run": score.run_id,
                   "attempt": score.attempt.uid if score.attempt is not None else None})


@transaction.atomic
def score_edit(*, user, score_id: int, value: Any, comment: str | None = None) -> Score:
    """Edit a score by its author: the value must fit the config as it is now."""
    require(user, REVIEW_RUNS, "score runs")
    score = Score.objects.select_for_update(of=("self",)).select_related("config", "attempt").get(pk=score_id)
    if score.source == ScoreSource.RUNTIME or score.author_id != user.pk:
        raise NotAllowed("Only its author may edit a score.")
    errors = FieldErrors()
    comment = score.comment if comment is None else _text(errors, "comment", comment, max_chars=2000)
    _refuse(errors, "score")
    problem = value_problem(score.config, value)
    if problem:
        raise InvalidInput(f"{score.config.name} takes {problem}.", fields={"value": problem})
    _score_change(score, user=user, value=value, comment=comment)
    return score


# -- comments --------------------------------------------------------------------------------------

def _mentionable(body: str, author) -> list:
    """The active users the comment names with @, who may read runs (a mention shows them the comment)."""
    names = mentioned_names(body)[:50]
    users = get_user_model().objects.filter(username__in=names, is_active=True)
    return [u for u in users if allowed(u, "runs.view_run")]


def _notify_mentions(annotation: Annotation, users: list, author) -> None:
    wanted = [u.get_username() for u in users if u.pk != author.pk]
    path = f"/runs/{annotation.run_id}/" + (f"attempts/{annotation.attempt.uid}/" if annotation.attempt is not None else "")
    mentions_notify(run_id=annotation.run_id, comment_key=str(annotation.pk), usernames=wanted,
                    author=author.get_username(), excerpt=annotation.body, path=path)


@transaction.atomic
def annotation_add(*, user, run: Run, body: str, attempt_uid: str | None = None) -> Annotation:
    require(user, REVIEW_RUNS, "comment on runs")
    errors = FieldErrors()
    body = _text(errors, "body", body, max_chars=10_000, required=True)
    _refuse(errors, "comment")
    annotation = Annotation.objects.create(run=run, attempt=_attempt(run, attempt_uid), author=user, body=body)
    users = _mentionable(body, user)
    annotation.mentions.set(users)
    _notify_mentions(annotation, users, user)
    return annotation


@transaction.atomic
def annotation_edit(*, user, annotation_id: int, body: str) -> Annotation:
    require(user, REVIEW_RUNS, "comment on runs")
    annotation = Annotation.objects.select_for_update(of=("self",)).select_related("attempt").get(pk=annotation_id)
    if annotation.author_id != user.pk:
        raise NotAllowed("Only its author may edit a comment.")
    errors = FieldErrors()
    body = _text(errors, "body", body, max_chars=10_000, required=True)
    _refuse(errors, "comment")
    before = annotation.body
    annotation.body = body
    annotation.save(update_fields=["body", "updated_at"])
    users = _mentionable(body, user)
    annotation.mentions.set(users)
    _notify_mentions(annotation, users, user)  # keyed per comment and user: only new mentions are sent
    audit(actor=user, action=AuditAction.ANNOTATION_EDITED, target=annotation,
          summary=f"Comment on run #{annotation.run_id} edited",
          details={"before": before[:2000], "after": body[:2000], "run": annotation.run_id})
    return annotation


# -- incident summary ------------------------------------------------------------------------------

def _links_errors(errors: FieldErrors, links: Any) -> list[str]:
    if not isinstance(links, list) or len(links) > MAX_LINKS:
        errors.add("links", f"a list of at most {MAX_LINKS} URLs")
        return []
    for i, link in enumerate(links):
        try:
            if not isinstance(link, str) or len(link) > 2000 or "\x00" in link:
                raise ValidationError("not a URL")
            _url(link)
        except ValidationError:
            errors.add("links", f"item {i + 1}: an http(s) URL of at most 2000 characters")
    return [str(link) for link in links]


@transaction.atomic
def incident_save(*, user, run: Run, status: str = IncidentStatus.OPEN, root_cause: str | None = None,
                  owner: str | None = None, summary: str = "", links: list[str] | None = None) -> IncidentSummary:
    """Write the run's incident summary (creating it the first time). root_cause and owner go by name."""
    require(user, REVIEW_RUNS, "write incident summaries")
    errors = FieldErrors()
    incident = IncidentSummary.objects.select_for_update().filter(run=run).first()
    if status not in IncidentStatus.values:
        errors.add("status", f"one of {', '.join(IncidentStatus.values)}")
    summary = _text(errors, "summary", summary, max_chars=10_000)
    links = _links_errors(errors, [] if links is None else links)
    category = None
    if root_cause:
        category = RootCauseCategory.objects.filter(name=root_cause).first() if isinstance(root_cause, str) else None
        # A category disabled since it was chosen stays on the incidents that have it.
        if category is None or (not category.enabled and (incident is None or incident.root_cause_id != category.pk)):
            errors.add("root_cause", "not one of the enabled root-cause categories")
    owner_user = None
    if owner:
        owner_user = get_user_model().objects.filter(username=owner, is_active=True).first() \
            if isinstance(owner, str) else None
        if owner_user is None:
            errors.add("owner", "no active user has this username")
    _refuse(errors, "incident summary")
    before = None if incident is None else _incident_fields(incident)
    incident = incident or IncidentSummary(run=run)
    incident.status, incident.root_cause, incident.owner = status, category, owner_user
    incident.summary, incident.links, incident.updated_by = summary, links, user
    incident.save()
    audit(actor=user, action=AuditAction.INCIDENT_SAVED, target=incident,
          summary=f"Incident summary of run #{run.pk} saved ({status})",
          details={"before": before, "after": _incident_fields(incident), "run": run.pk})
    return incident


def _incident_fields(incident: IncidentSummary) -> dict[str, Any]:
    return {"status": incident.status, "root_cause": incident.root_cause.name if incident.root_cause else None,
            "owner": incident.owner.get_username() if incident.owner else None,
            "summary": incident.summary[:2000], "links": incident.links}


# A new project's starting list of root causes (the default project's came with its migration).
DEFAULT_ROOT_CAUSES = (
    ("planner", "The planner proposed the wrong steps or arguments."),
    ("capability", "A capability misbehaved or returned something wrong."),
    ("external service", "A service outside the product failed or was slow."),
    ("configuration", "A capability's policy, a budget or a permission was set wrongly."),
    ("bad input", "The goal or the completion criteria were wrong."),
)


def root_causes_seed(project) -> None:
    """Give a new project the starting root-cause list."""
    RootCauseCategory.objects.bulk_create(
        [RootCauseCategory(project=project, name=name, description=description)
         for name, description in DEFAULT_ROOT_CAUSES], ignore_conflicts=True)


def on_project_created(sender, instance, created=False, raw=False, **kwargs) -> None:
    """post_save of core.Project (review.apps): the starting root causes and the runtime's score configs."""
    if created and not raw:
        root_causes_seed(instance)
        with project_scope(instance):
            builtin_configs()

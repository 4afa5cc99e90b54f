"""Scores, comments and incident summaries on runs and attempts.

Everything here hangs off a run and goes with it: deleting a run (retention's purge, or the admin)
deletes its scores, comments and incident summary (CASCADE); the audit rows of their edits stay,
as every audit row outlives its target. A score config or a root-cause category that is in use
cannot be deleted (PROTECT, answered 409): disable it instead, and what was recorded stays readable.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.choices import values_of
from core.projects import ProjectScopedManager
from runs.models import RunRecordManager


class ScoreKind(models.TextChoices):
    NUMERIC = "numeric", "a number in a range"
    CATEGORICAL = "categorical", "one of named values"
    BOOLEAN = "boolean", "yes or no"


class ScoreSource(models.TextChoices):
    PERSON = "person", "a person (page or API)"
    CODE = "code", "code (API)"
    RUNTIME = "runtime", "the runtime, when the run ended"


class ScoreConfig(models.Model):
    """What may be scored and how. `builtin` configs are the runtime's automatic scores: people and code
    cannot write them, an admin may only describe, enable or disable them."""

    Kind = ScoreKind

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=60)
    description = models.TextField(blank=True, max_length=2000, help_text="Shown to reviewers beside the score.")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    min_value = models.FloatField(null=True, blank=True)
    max_value = models.FloatField(null=True, blank=True)
    categories = models.JSONField(default=list, blank=True, help_text="The named values of a categorical score.")
    enabled = models.BooleanField(default=True)
    builtin = models.BooleanField(default=False, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProjectScopedManager()

    class Meta:
        ordering = ["name"]
        permissions = [("manage_review_settings", "Can manage score configs and root-cause categories"),
                       ("review_runs", "Can score and comment on runs and write incident summaries")]
        constraints = [models.CheckConstraint(condition=Q(kind__in=values_of(ScoreKind)), name="score_config_kind_valid"),
                       models.UniqueConstraint(fields=["project", "name"], name="score_config_name_per_project")]

    def __str__(self):
        return self.name


class Score(models.Model):
    """One judgement of a run, or of one of its attempts.

    `author_key` says whose it is ("user:<id>", "code:<user id>:<name>", "runtime"): each author has at
    most one score per config and target, so scoring again edits it (with an audit row). A numeric
    or boolean value is in `number` (a boolean as 1.0 or 0.0), a categorical one in `category`.
    """

    Source = ScoreSource

    config = models.ForeignKey(ScoreConfig, on_delete=models.PROTECT, related_name="scores")
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="review_scores")
    # No foreign-key constraint to attempts (partitioned on PostgreSQL: runs.partitions); on_delete still applies.
    attempt = models.ForeignKey("runs.Attempt", null=True, blank=True, on_delete=models.CASCADE,
                                related_name="review_scores", db_constraint=False)
    source = models.CharField(max_length=10, choices=Source.choices)
    source_name = models.CharField(max_length=80, blank=True, help_text="What code wrote it (a checker's name).")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="review_scores")
    author_key = models.CharField(max_length=120)
    number = models.FloatField(null=True, blank=True)
    category = models.CharField(max_length=60, blank=True)
    comment = models.TextField(blank=True, max_length=2000)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RunRecordManager()   # in the run's project

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["run", "created_at"], name="score_run_idx"),
                   models.Index(fields=["config", "created_at"], name="score_config_idx")]
        constraints = [
            models.CheckConstraint(condition=Q(source__in=values_of(ScoreSource)), name="score_source_valid"),
            models.UniqueConstraint(fields=["config", "run", "author_key"], condition=Q(attempt__isnull=True),
                                    name="score_once_per_run_author"),
            models.UniqueConstraint(fields=["config", "attempt", "author_key"], condition=Q(attempt__isnull=False),
                                    name="score_once_per_attempt_author"),
        ]

    def __str__(self):
        return f"{self.config_id} on run {self.run_id}: {self.number if self.category == '' else self.category}"


class Annotation(models.Model):
    """A comment (markdown) on a run or one of its attempts; @username mentions notify (review.mentions)."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="review_annotations")
    # No foreign-key constraint to attempts (partitioned on PostgreSQL: runs.partitions); on_delete still applies.
    attempt = models.ForeignKey("runs.Attempt", null=True, blank=True, on_delete=models.CASCADE,
                                related_name="review_annotations", db_constraint=False)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="review_annotations")
    body = models.TextField(max_length=10_000)
    mentions = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="review_mentions")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RunRecordManager()   # in the run's project

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["run", "created_at"], name="annotation_run_idx")]

    def __str__(self):
        return f"comment {self.pk} on run {self.run_id}"


class RootCauseCategory(models.Model):
    """The configurable list an incident summary's root cause is picked from."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=80)
    description = models.CharField(max_length=300, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ProjectScopedManager()

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "root-cause categories"
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="root_cause_name_per_project")]

    def __str__(self):
        return self.name


class IncidentStatus(models.TextChoices):
    OPEN = "open"
    MITIGATED = "mitigated"
    RESOLVED = "resolved"


class IncidentSummary(models.Model):
    """What a run's incident review concluded: one per run, edited in place (each save audited)."""

    Status = IncidentStatus

    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, related_name="incident_summary")
    root_cause = models.ForeignKey(RootCauseCategory, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="incidents")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="review_incidents")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    summary = models.TextField(blank=True, max_length=10_000, help_text="Markdown.")
    links = models.JSONField(default=list, blank=True, help_text="http(s) URLs: tickets, postmortems, dashboards.")
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RunRecordManager()   # in the run's project

    class Meta:
        verbose_name_plural = "incident summaries"
        constraints = [models.CheckConstraint(condition=Q(status__in=values_of(IncidentStatus)),
                                              name="incident_status_valid")]

    def __str__(self):
        return f"incident of run {self.run_id} ({self.status})"


# -- review queues ---------------------------------------------------------------------------------

class ReviewQueue(models.Model):
    """A saved runs-list filter, the score configs its reviewers give and who may work it.

    Finished runs the filter matches are queued when the queue is saved and, while it is active, as
    they finish (review.queues). With `reviews_per_item` 2 (four-eyes) each item is reviewed by two
    people and their disagreement shown. Deleting a queue deletes its items, never the scores given.
    """

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=80)
    description = models.TextField(blank=True, max_length=2000, help_text="Shown to reviewers.")
    filter_query = models.CharField(max_length=2000, blank=True,
                                    help_text="The runs list's query string (status=stopped&label=team%3Dpay).")
    score_configs = models.ManyToManyField(ScoreConfig, related_name="queues")
    assignees = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="review_queues",
                                       help_text="Who may work the queue; nobody named: every reviewer.")
    reviews_per_item = models.PositiveSmallIntegerField(default=1, help_text="2: four-eyes.")
    active = models.BooleanField(default=True, help_text="Queues runs as they finish.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProjectScopedManager()

    class Meta:
        ordering = ["name"]
        permissions = [("manage_queues", "Can create, change and delete review queues")]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="review_queue_name_per_project"),
                       models.CheckConstraint(condition=Q(reviews_per_item__gte=1, reviews_per_item__lte=2),
                                              name="review_queue_reviews_1_or_2")]

    def __str__(self):
        return self.name


class QueueItemManager(ProjectScopedManager):
    path = "queue__project"


class QueueItem(models.Model):
    """One run in one queue. `taken` counts the reviews claimed or done (a claim holds a place while its
    reviewer works); `done_at` is set once `done_count` reaches the queue's reviews per item."""

    queue = models.ForeignKey(ReviewQueue, on_delete=models.CASCADE, related_name="items")
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="review_queue_items")
    taken = models.PositiveSmallIntegerField(default=0)
    done_count = models.PositiveSmallIntegerField(default=0)
    done_at = models.DateTimeField(null=True, blank=True)
    disagreement = models.BooleanField(default=False, help_text="Four-eyes: the reviewers' scores differ "
                                                                "(as when the item was done).")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = QueueItemManager()

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["queue", "run"], name="queue_item_once_per_run")]
        # (queue, id): the results table's pages. (queue, done_at, id): "next" walks the open items in
        # queued order, passing over the done ones without reading them; the open/done filters too.
        indexes = [models.Index(fields=["queue", "id"], name="queue_item_order_idx"),
                   models.Index(fields=["queue", "done_at", "id"], name="queue_item_open_idx")]

    def __str__(self):
        return f"run {self.run_id} in queue {self.queue_id}"


class QueueReviewState(models.TextChoices):
    CLAIMED = "claimed"
    DONE = "done"
    SKIPPED = "skipped"


class QueueReviewManager(ProjectScopedManager):
    path = "item__queue__project"


class QueueReview(models.Model):
    """One reviewer's turn at one item: claimed by "next", then done (scores given) or skipped."""

    State = QueueReviewState

    item = models.ForeignKey(QueueItem, on_delete=models.CASCADE, related_name="reviews")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                 related_name="queue_reviews")
    state = models.CharField(max_length=10, choices=State.choices, default=State.CLAIMED)
    claimed_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    annotation = models.ForeignKey(Annotation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                   help_text="The comment given with the review (on the run, in the trace).")

    objects = QueueReviewManager()

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["item", "reviewer"], name="queue_review_once_per_reviewer"),
                       models.CheckConstraint(condition=Q(state__in=values_of(QueueReviewState)),
                                              name="queue_review_state_valid")]
        indexes = [models.Index(fields=["state", "claimed_at"], name="queue_review_claim_idx")]

    def __str__(self):
        return f"{self.state} review of item {self.item_id}"

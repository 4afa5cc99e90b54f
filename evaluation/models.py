"""Evaluations: a suite of tasks run directly and with planning under equal limits, and their measures.

The tables keep the names they had when these models lived in the runs app (runs_evaluation*).
"""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from core.choices import values_of
from core.projects import ProjectScopedManager


class ResultManager(ProjectScopedManager):
    """A result is in its evaluation's project."""

    path = "evaluation__project"


class EvaluationSuite(models.Model):
    """A set of tasks in the scenario format, each solvable directly or with planning."""

    project = models.ForeignKey("agentops.Project", on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    tasks = models.JSONField(help_text="A list of scenario objects (design.md, 'Scenario files').")
    planning_mode = models.CharField(max_length=20, default="scripted",
                                     help_text="The planner its evaluations use unless told otherwise.")
    bundled = models.BooleanField(default=False)
    # The current version's number; `tasks` is that version's task list (SuiteVersion keeps every one).
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProjectScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="suite_name_unique_per_project")]
        db_table = "runs_evaluationsuite"
        ordering = ["name"]

    def __str__(self):
        return self.name


class SuiteVersionManager(ProjectScopedManager):
    """A version is in its suite's project."""

    path = "suite__project"


class SuiteVersion(models.Model):
    """One immutable task list of a suite. Adding or removing tasks writes the next number; an
    evaluation records the version it ran, so its results always read against the tasks it had."""

    suite = models.ForeignKey(EvaluationSuite, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    tasks = models.JSONField(help_text="The version's tasks (scenario objects), as the suite held them.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+", help_text="Empty for the bundled files and migrated suites.")
    created_at = models.DateTimeField(auto_now_add=True)
    summary = models.CharField(max_length=300, blank=True, help_text="What changed, in words.")
    changes = models.JSONField(default=dict, blank=True, help_text='{"added": [task names], "removed": [...]}')

    objects = SuiteVersionManager()

    class Meta:
        ordering = ["suite", "-number"]
        constraints = [models.UniqueConstraint(fields=["suite", "number"], name="suite_version_unique")]

    def __str__(self):
        return f"{self.suite_id} v{self.number}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise ValueError("A suite version is immutable: write the next version instead.")
        super().save(*args, **kwargs)


class EvaluationStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class EvaluationMode(models.TextChoices):
    DIRECT = "direct"
    PLANNING = "planning"


class Evaluation(models.Model):
    """One run of a suite in both modes under equivalent limits."""

    Status = EvaluationStatus

    project = models.ForeignKey("agentops.Project", on_delete=models.PROTECT, related_name="+")
    suite = models.ForeignKey(EvaluationSuite, on_delete=models.PROTECT, related_name="evaluations")
    suite_version = models.ForeignKey(SuiteVersion, null=True, blank=True, on_delete=models.PROTECT,
                                      related_name="evaluations", help_text="The task list it ran.")
    label = models.CharField(max_length=200, blank=True, help_text="e.g. 'before the retry policy change'")
    planning_mode = models.CharField(max_length=20, default="scripted",
                                     help_text="The planner used in planning mode (scripted, rules, llm).")
    planner_config = models.JSONField(default=dict, blank=True,
                                      help_text="Settings of that planner (llm: base_url, model, api_key_env...).")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    tasks_total = models.PositiveIntegerField(default=0)
    tasks_done = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = ProjectScopedManager()

    class Meta:
        db_table = "runs_evaluation"
        ordering = ["-created_at", "-id"]
        permissions = [("run_evaluation", "Can start evaluations")]
        indexes = [models.Index(fields=["suite", "-created_at"], name="evaluation_suite_created_idx")]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=values_of(EvaluationStatus)),
                                   name="evaluation_status_valid"),
            models.CheckConstraint(condition=Q(tasks_done__lte=F("tasks_total")), name="evaluation_progress_bounded"),
        ]

    def __str__(self):
        return f"{self.suite.name} #{self.pk}"


class EvaluationResult(models.Model):
    """One task in one mode: the measures the seed's section 8 asks for."""

    Mode = EvaluationMode

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="results")
    task = models.CharField(max_length=200)
    mode = models.CharField(max_length=10, choices=Mode.choices)
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    verified_success = models.BooleanField()
    status = models.CharField(max_length=20)
    stop_reason = models.CharField(max_length=40, blank=True)
    tool_calls = models.PositiveIntegerField(default=0)
    repeated_actions = models.PositiveIntegerField(default=0)
    revisions = models.PositiveIntegerField(default=0)
    retries = models.PositiveIntegerField(default=0)
    failed_observations = models.PositiveIntegerField(default=0)
    recovered = models.BooleanField(default=False, help_text="Completed after at least one failed observation.")
    tokens = models.PositiveIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    simulated_latency_s = models.FloatField(default=0.0)
    wall_latency_s = models.FloatField(default=0.0)
    details = models.JSONField(default=dict, blank=True)

    objects = ResultManager()

    class Meta:
        db_table = "runs_evaluationresult"
        ordering = ["evaluation", "task", "mode"]
        constraints = [
            models.UniqueConstraint(fields=["evaluation", "task", "mode"], name="evaluation_result_unique"),
            models.CheckConstraint(condition=Q(mode__in=values_of(EvaluationMode)), name="evaluation_result_mode_valid"),
        ]

    def __str__(self):
        return f"{self.task} ({self.mode})"

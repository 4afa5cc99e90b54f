"""Failure groups (maintained by runs.failures): failed attempts across runs by fingerprint.

Folded once per finished run, like the dashboard's rollup: a finished run never changes again,
so its counts are added exactly once. Runs still live are added in when a page reads them.
"""
from __future__ import annotations

from django.db import models

from core.projects import ProjectScopedManager


class FailureGroup(models.Model):
    """Every failed attempt of finished runs with one fingerprint (runs.failures.fingerprint)."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    fingerprint = models.CharField(max_length=32)
    capability_name = models.CharField(max_length=80)
    error_code = models.CharField(max_length=20)
    error_category = models.CharField(max_length=20, blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    # The group's message is this attempt's, normalized (runs.failures.normalize_message).
    sample_attempt_id = models.BigIntegerField()
    first_run_id = models.BigIntegerField(help_text="The run (of the first fold) that made the group.")
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    attempts = models.PositiveBigIntegerField(default=0)
    runs = models.PositiveBigIntegerField(default=0)
    # When the group was made (its first run finished): what a "new failure group" rule watches.
    created_at = models.DateTimeField()

    objects = ProjectScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "fingerprint"], name="failuregroup_fingerprint_key")]
        indexes = [
            models.Index(fields=["-last_seen", "-id"], name="failuregroup_last_seen_idx"),
            models.Index(fields=["-attempts", "-id"], name="failuregroup_attempts_idx"),
            models.Index(fields=["-runs", "-id"], name="failuregroup_runs_idx"),
            models.Index(fields=["-first_seen", "-id"], name="failuregroup_first_seen_idx"),
            models.Index(fields=["created_at"], name="failuregroup_created_idx"),
            models.Index(fields=["capability_name", "-last_seen"], name="failuregroup_cap_seen_idx"),
        ]

    def __str__(self):
        return f"{self.capability_name} {self.error_code}: {self.attempts}"


class FailureGroupDay(models.Model):
    """A group's failed attempts per day (whole days since the epoch, UTC): its trend."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    fingerprint = models.CharField(max_length=32)
    day = models.IntegerField()
    attempts = models.PositiveBigIntegerField(default=0)

    objects = ProjectScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "fingerprint", "day"], name="failuregroupday_key")]

    def __str__(self):
        return f"{self.fingerprint[:8]} d{self.day}: {self.attempts}"

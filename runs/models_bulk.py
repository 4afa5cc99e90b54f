"""Bulk actions: one job acting on every run a runs-list filter selects (runs.bulk).

The job is its own progress record: counts, a bounded list of the runs it could not act on
(and why), and a cursor. Runs are taken in id order, and each run's action commits in the same
transaction as the cursor's move past it, so a job picked up again (a worker killed, a task
delivered twice) resumes after the last run acted on and never acts on a run twice.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models

from core.projects import ProjectScopedManager


class BulkActionKind(models.TextChoices):
    CANCEL = "cancel", "Cancel"
    FORK = "fork", "Re-run (resume after the end)"
    LABEL = "label", "Change labels"
    APPROVE = "approve", "Approve pending requests"
    REJECT = "reject", "Reject pending requests"
    SUITE = "suite", "Add to an evaluation suite"


class BulkActionStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"


class BulkAction(models.Model):
    # How many problems a job keeps (the counts stay exact beyond it).
    MAX_PROBLEMS = 200

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    action = models.CharField(max_length=20, choices=BulkActionKind.choices)
    query = models.CharField(max_length=2000, blank=True, help_text="the runs list's query string that selects the runs")
    parameters = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="bulk_actions")
    status = models.CharField(max_length=10, choices=BulkActionStatus.choices, default=BulkActionStatus.QUEUED)
    # The selection is frozen when the job starts (ids ascending): a run the filter would select
    # later is not acted on, and `total` is what the person confirmed.
    run_ids = models.JSONField(default=list, blank=True)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    problems = models.JSONField(default=list, blank=True)  # [{"run": id, "outcome": skipped|failed, "reason": text}]
    cursor = models.BigIntegerField(default=0, help_text="the last run id handled")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = ProjectScopedManager()

    class Meta:
        indexes = [models.Index(fields=["status", "updated_at"], name="bulk_status_updated_idx")]

    def __str__(self):
        return f"bulk {self.action} #{self.pk} ({self.status})"

    @property
    def handled(self) -> int:
        return self.done + self.skipped + self.failed

    @property
    def percent(self) -> int:
        return 100 if not self.total else min(100, round(100 * self.handled / self.total))

    @property
    def is_finished(self) -> bool:
        return self.status == BulkActionStatus.DONE

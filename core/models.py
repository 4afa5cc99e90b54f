"""Cross-cutting records: projects and who holds which role in them, the audit trail, worker heartbeats."""
from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models

from core.projects import ProjectScopedManager


class Project(models.Model):
    """A team's own registry, runs, reviewers and budgets: every object belongs to one (core.projects)."""

    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100)
    description = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Budgets a run of this project starts with where its request names none (runtime budget names).
    default_budgets = models.JSONField(default=dict, blank=True)
    # Per UTC day, across the project's live runs; None: no quota. Enforced by the worker (runs.quotas).
    quota_runs_per_day = models.PositiveIntegerField(null=True, blank=True)
    quota_tokens_per_day = models.PositiveBigIntegerField(null=True, blank=True)
    quota_cost_per_day = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(quota_cost_per_day__isnull=True) | models.Q(quota_cost_per_day__gte=0),
                                   name="project_quota_cost_nonnegative"),
        ]

    def __str__(self):
        return self.name


class ProjectMembership(models.Model):
    """A user holds a role (one of core.roles' groups) in a project; roles hold nowhere else."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="project_memberships")
    role = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="project_memberships")
    granted_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "user", "role"], name="membership_unique")]
        indexes = [models.Index(fields=["user", "project"], name="membership_user_project_idx")]

    def __str__(self):
        return f"{self.user_id} is {self.role_id} in {self.project_id}"


class AuditAction(models.TextChoices):
    CAPABILITY_CREATED = "capability.created"
    CAPABILITY_UPDATED = "capability.updated"
    CAPABILITY_DISABLED = "capability.disabled"
    CAPABILITY_ENABLED = "capability.enabled"
    CAPABILITY_TRIED = "capability.tried"
    MCP_SERVER_ADDED = "mcp_server.added"
    MCP_SERVER_STARTED = "mcp_server.started"
    RUN_STARTED = "run.started"
    RUN_CANCELLED = "run.cancelled"
    RUN_RECONCILED = "run.reconciled"
    RUN_FORKED = "run.forked"
    RUN_LABELS_CHANGED = "run.labels_changed"
    BULK_ACTION_STARTED = "bulk_action.started"
    ROLE_GRANTED = "role.granted"
    ROLE_REVOKED = "role.revoked"
    STEP_APPROVED = "step.approved"
    STEP_REJECTED = "step.rejected"
    PLAN_APPROVED = "plan.approved"
    PLAN_REJECTED = "plan.rejected"
    PLAN_SUBMITTED = "plan.submitted"
    EVALUATION_STARTED = "evaluation.started"
    SUITE_CHANGED = "suite.changed"
    TOKEN_CREATED = "token.created"
    TOKEN_REVOKED = "token.revoked"
    NOTIFICATION_RULE_SAVED = "notification_rule.saved"
    NOTIFICATION_RULE_DELETED = "notification_rule.deleted"
    NOTIFICATION_CHANNEL_SAVED = "notification_channel.saved"
    NOTIFICATION_CHANNEL_DELETED = "notification_channel.deleted"
    RUNS_PURGED = "runs.purged"
    AGENT_SAVED = "agent.saved"
    AGENT_TOKEN_CREATED = "agent_token.created"
    AGENT_TOKEN_REVOKED = "agent_token.revoked"
    SLACK_ACCOUNT_LINKED = "slack_account.linked"
    SLACK_ACCOUNT_UNLINKED = "slack_account.unlinked"
    USER_CREATED = "user.created"
    PROJECT_CREATED = "project.created"
    PROJECT_LIMITS_SAVED = "project.limits_saved"
    SCORE_CONFIG_SAVED = "score_config.saved"
    SCORE_CONFIG_DELETED = "score_config.deleted"
    SCORE_EDITED = "score.edited"
    ANNOTATION_EDITED = "annotation.edited"
    INCIDENT_SAVED = "incident.saved"
    ROOT_CAUSE_SAVED = "root_cause.saved"
    ROOT_CAUSE_DELETED = "root_cause.deleted"
    REVIEW_QUEUE_SAVED = "review_queue.saved"
    REVIEW_QUEUE_DELETED = "review_queue.deleted"



class AuditEvent(models.Model):
    Action = AuditAction

    # None: a change to the instance rather than to a project (a user created, a Slack account
    # linked); such rows are read in the Django admin, not in any project's log.
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="+")

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="audit_events")
    action = models.CharField(max_length=40, choices=Action.choices)
    target_type = models.CharField(max_length=40)
    target_id = models.CharField(max_length=64)
    summary = models.CharField(max_length=300)
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = ProjectScopedManager()

    class Meta:
        ordering = ["-created_at", "-id"]
        # Reading the whole log (every user's changes) is its own permission (core.roles.VIEW_AUDIT_LOG);
        # view_auditevent, which every role holds, only lets an object's page show its own history.
        permissions = [("view_audit_log", "Can view the audit log of every user's changes")]
        indexes = [models.Index(fields=["target_type", "target_id", "-created_at"], name="audit_target_idx")]
        constraints = [
            models.CheckConstraint(condition=models.Q(action__in=[a.value for a in AuditAction]), name="audit_action_valid"),
        ]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.action} {self.target_type}:{self.target_id}"


class WorkerHeartbeat(models.Model):
    """The last time each Celery worker proved it can take and finish a task."""

    worker = models.CharField(max_length=200, unique=True)
    seen_at = models.DateTimeField()
    tasks_seen = models.PositiveBigIntegerField(default=0)

    def __str__(self):
        return f"{self.worker} @ {self.seen_at:%H:%M:%S}"


class ApiToken(models.Model):
    """An API token: only its SHA-256 is stored; the key is shown once, at creation.

    A key is 32 random bytes, so a plain (unsalted, fast) hash is enough: there is
    nothing to guess from it. Tokens expire, and are revoked by their owner or when
    the owner's password changes (core.tokens).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    # A token acts in one project, with the roles its user holds there (and never more).
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12, help_text="The key's first characters, to recognise it.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.CharField(max_length=40, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "-created_at"], name="apitoken_user_created_idx")]

    def __str__(self):
        return f"{self.name} ({self.prefix}…) of {self.user_id}"

    def is_active(self, now) -> bool:
        return self.revoked_at is None and self.expires_at > now

"""The capability registry: what the planner may choose, with the policy to enforce.

A Capability is the stable name; every edit writes a new CapabilityVersion so a
step can record exactly the policy and schema it ran against.
"""
from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

from core.choices import CapabilityKind, SideEffect, values_of
from core.projects import ProjectScopedManager
from runtime.capability import CapabilitySpec, PollingPolicy, RateLimit, RetryPolicy
from runtime.capability import Kind as RuntimeKind
from runtime.capability import SideEffect as RuntimeSideEffect
from runtime.observation import ErrorCode as RuntimeErrorCode

capability_name_validator = RegexValidator(
    r"^[a-z][a-z0-9_]{0,79}$",
    "Use lowercase letters, digits and underscores, starting with a letter (at most 80 characters).",
)


Kind = CapabilityKind


class VersionManager(ProjectScopedManager):
    """A version is in its capability's project."""

    path = "capability__project"


class McpTransport(models.TextChoices):
    STDIO = "stdio", "stdio (local command)"
    HTTP = "http", "streamable HTTP"


class McpServer(models.Model):
    Transport = McpTransport

    project = models.ForeignKey("agentops.Project", on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=80, validators=[capability_name_validator])
    transport = models.CharField(max_length=10, choices=Transport.choices)
    command = models.CharField(max_length=500, blank=True)
    args = models.JSONField(default=list, blank=True)
    # Names of environment variables passed to the server: values are never stored.
    env_vars = models.JSONField(default=list, blank=True)
    url = models.URLField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    objects = ProjectScopedManager()

    class Meta:
        ordering = ["name"]
        # Not part of "registry admin": a stdio server is a program run on the web and worker hosts.
        permissions = [("run_stdio_mcpserver", "Can register and start stdio MCP servers (runs commands on the hosts)")]
        constraints = [
            models.CheckConstraint(condition=Q(transport__in=values_of(McpTransport)), name="mcp_transport_valid"),
            models.UniqueConstraint(fields=["project", "name"], name="mcpserver_name_unique_per_project"),
            models.CheckConstraint(
                condition=(Q(transport=McpTransport.STDIO) & ~Q(command=""))
                | (Q(transport=McpTransport.HTTP) & ~Q(url="")),
                name="mcp_server_has_endpoint",
            ),
        ]

    def __str__(self):
        return self.name

    def client_config(self) -> dict:
        # server/server_id: for the audit event of a stdio start, not for the connection.
        return {"transport": self.transport, "command": self.command, "args": list(self.args),
                "env": list(self.env_vars), "url": self.url, "server": self.name, "server_id": self.pk}


class Capability(models.Model):
    project = models.ForeignKey("agentops.Project", on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=80, validators=[capability_name_validator])
    kind = models.CharField(max_length=10, choices=Kind.choices)
    enabled = models.BooleanField(default=True)
    current_version = models.ForeignKey("CapabilityVersion", null=True, blank=True, on_delete=models.PROTECT,
                                        related_name="+")
    mcp_server = models.ForeignKey(McpServer, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="capabilities")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProjectScopedManager()

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "capabilities"
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=values_of(Kind)), name="capability_kind_valid"),
            models.UniqueConstraint(fields=["project", "name"], name="capability_name_unique_per_project"),
        ]

    def __str__(self):
        return self.name


class CapabilityVersion(models.Model):
    capability = models.ForeignKey(Capability, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    description = models.TextField(blank=True)
    schema = models.JSONField(default=dict)
    max_argument_bytes = models.PositiveIntegerField(default=16_384, validators=[MinValueValidator(1)])
    max_output_bytes = models.PositiveIntegerField(default=1_048_576, validators=[MinValueValidator(1)])
    timeout_s = models.FloatField(default=10.0)
    retry_max_attempts = models.PositiveSmallIntegerField(default=3)
    retry_backoff_base_s = models.FloatField(default=0.5)
    retry_backoff_cap_s = models.FloatField(default=30.0)
    retry_on = models.JSONField(default=list, blank=True)
    side_effect = models.CharField(max_length=10, choices=SideEffect.choices, default="none")
    requires_approval = models.BooleanField(default=False)
    idempotent = models.BooleanField(default=False)
    status_lookup = models.BooleanField(default=False)
    permission = models.CharField(max_length=150, blank=True)
    rate_limit_calls = models.PositiveIntegerField(null=True, blank=True)
    rate_limit_period_s = models.FloatField(null=True, blank=True)
    polling_max_attempts = models.PositiveSmallIntegerField(null=True, blank=True)
    polling_interval_s = models.FloatField(null=True, blank=True)
    # The poll's own stop condition on this capability's output ({"path", "equals" | "in" |
    # "exists" | "not_empty"}); null: poll until the run's completion criteria are met.
    polling_until = models.JSONField(null=True, blank=True)
    # Output paths that differ on every call (request ids, timestamps): not part of the
    # outcome fingerprint, so they cannot hide a repetition.
    volatile_paths = models.JSONField(default=list, blank=True)
    # Identical calls are distinct operations: the step id is part of the idempotency key.
    distinct_calls = models.BooleanField(default=False)
    # How long after a state-changing call was sent it may still land; a status lookup's
    # "not committed" is believed only after it (null: the timeout).
    settle_s = models.FloatField(null=True, blank=True)
    # Kind-specific settings: python {"function"}, http {"url", "method", ...}, mcp {"tool"}.
    config = models.JSONField(default=dict, blank=True)
    change_note = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    POLICY_FIELDS = (
        "description", "schema", "max_argument_bytes", "max_output_bytes", "timeout_s", "retry_max_attempts",
        "retry_backoff_base_s", "retry_backoff_cap_s", "retry_on", "side_effect", "requires_approval",
        "idempotent", "status_lookup", "permission", "rate_limit_calls", "rate_limit_period_s",
        "polling_max_attempts", "polling_interval_s", "polling_until", "volatile_paths", "distinct_calls", "settle_s",
        "config",
    )

    objects = VersionManager()

    class Meta:
        ordering = ["capability", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["capability", "number"], name="capability_version_unique"),
            models.CheckConstraint(condition=Q(number__gte=1), name="capability_version_positive"),
            models.CheckConstraint(condition=Q(timeout_s__gt=0) & Q(timeout_s__lte=3600), name="capability_timeout_range"),
            models.CheckConstraint(condition=Q(settle_s__isnull=True) | (Q(settle_s__gte=0) & Q(settle_s__lte=86_400)),
                                   name="capability_settle_range"),
            models.CheckConstraint(condition=Q(retry_max_attempts__gte=1) & Q(retry_max_attempts__lte=20),
                                   name="capability_retry_attempts_range"),
            models.CheckConstraint(condition=Q(retry_backoff_base_s__gte=0) & Q(retry_backoff_cap_s__gte=0),
                                   name="capability_backoff_nonnegative"),
            models.CheckConstraint(condition=Q(side_effect__in=values_of(SideEffect)), name="capability_side_effect_valid"),
            models.CheckConstraint(condition=Q(max_argument_bytes__gte=1) & Q(max_output_bytes__gte=1),
                                   name="capability_sizes_positive"),
            models.CheckConstraint(
                condition=(Q(rate_limit_calls__isnull=True) & Q(rate_limit_period_s__isnull=True))
                | (Q(rate_limit_calls__isnull=False) & Q(rate_limit_period_s__isnull=False)
                   & Q(rate_limit_calls__gte=1) & Q(rate_limit_period_s__gt=0)),
                name="capability_rate_limit_complete",
            ),
            models.CheckConstraint(
                condition=(Q(polling_max_attempts__isnull=True) & Q(polling_interval_s__isnull=True))
                | (Q(polling_max_attempts__isnull=False) & Q(polling_interval_s__isnull=False)
                   & Q(polling_max_attempts__gte=1) & Q(polling_interval_s__gt=0)),
                name="capability_polling_complete",
            ),
        ]

    def __str__(self):
        return f"{self.capability.name} v{self.number}"

    def policy(self) -> dict:
        return {field: getattr(self, field) for field in self.POLICY_FIELDS}

    def to_spec(self) -> CapabilitySpec:
        capability = self.capability
        retry_on = frozenset(RuntimeErrorCode(c) for c in self.retry_on) if self.retry_on else None
        retry = RetryPolicy(max_attempts=self.retry_max_attempts, backoff_base_s=self.retry_backoff_base_s,
                            backoff_cap_s=self.retry_backoff_cap_s,
                            **({"retry_on": retry_on} if retry_on is not None else {}))
        config = dict(self.config)
        if capability.mcp_server_id:   # an MCP tool: its server's client config
            config = {**capability.mcp_server.client_config(), **config}
        return CapabilitySpec(
            name=capability.name,
            kind=RuntimeKind(capability.kind),
            version=self.number,
            description=self.description,
            schema=self.schema,
            max_argument_bytes=self.max_argument_bytes,
            max_output_bytes=self.max_output_bytes,
            timeout_s=self.timeout_s,
            retry=retry,
            side_effect=RuntimeSideEffect(self.side_effect),
            requires_approval=self.requires_approval,
            idempotent=self.idempotent,
            status_lookup=self.status_lookup,
            permission=self.permission,
            rate_limit=RateLimit(self.rate_limit_calls, self.rate_limit_period_s) if self.rate_limit_calls else None,
            polling=PollingPolicy(self.polling_max_attempts, self.polling_interval_s, self.polling_until)
            if self.polling_max_attempts else None,
            enabled=capability.enabled,
            volatile_paths=tuple(self.volatile_paths or ()),
            distinct_calls=self.distinct_calls,
            settle_s=self.settle_s,
            config=config,
            version_id=self.pk,
        )


class RateLimitWindow(models.Model):
    """The admissions inside a capability's current rate-limit window: one row per
    capability, locked for each admission so that workers never overshoot the limit."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    capability_name = models.CharField(max_length=80)
    # Epoch seconds of the admissions still inside the window (at most max_calls of them).
    admitted = models.JSONField(default=list)

    objects = ProjectScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "capability_name"], name="ratelimit_one_per_capability")]

    def __str__(self):
        return f"{self.capability_name}: {len(self.admitted)} in window"


class StoredOutput(models.Model):
    """A capability output too large to keep inline, stored once by content hash."""

    sha256 = models.CharField(max_length=64, unique=True)
    size_bytes = models.PositiveBigIntegerField()
    content = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"{self.sha256[:12]} ({self.size_bytes} bytes)"


# --- Demo data the bundled capabilities act on --------------------------------


class TicketStatus(models.TextChoices):
    OPEN = "open"
    RESOLVED = "resolved"


class Ticket(models.Model):
    Status = TicketStatus

    idempotency_key = models.CharField(max_length=128, unique=True)
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    run_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("create_ticket", "Can open tickets through agent runs")]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=values_of(TicketStatus)), name="ticket_status_valid"),
        ]

    def __str__(self):
        return f"TCK-{self.pk}: {self.title}"


class OutboxMessage(models.Model):
    idempotency_key = models.CharField(max_length=128, unique=True)
    channel = models.CharField(max_length=40)
    recipient = models.CharField(max_length=200)
    message = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("send_notification", "Can send notifications through agent runs")]

    def __str__(self):
        return f"{self.channel} → {self.recipient}"

"""Agents the MCP gateway serves, their tokens, and the sessions they open.

An agent acts with its owner's permissions and sees only the capabilities named here;
each MCP session it opens is a run (planner "gateway"), recorded as a GatewaySession.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.projects import ProjectScopedManager


class AgentRecordManager(ProjectScopedManager):
    """An agent's tokens and sessions are in its project."""

    path = "agent__project"


class Agent(models.Model):
    project = models.ForeignKey("agentops.Project", on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="agents",
                              help_text="The user whose permissions the agent acts with; its runs are theirs.")
    # Capability names (not rows): a capability registered later under a name is seen once enabled.
    capabilities = models.JSONField(default=list, blank=True)
    # Budgets of each session's run (runtime.budgets.Budgets fields); omitted ones take
    # the gateway's defaults (AGENTOPS_GATEWAY_DEFAULT_BUDGETS).
    budgets = models.JSONField(default=dict, blank=True)
    # Completion criteria a session's run is checked against; {} when the agent has none.
    completion = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProjectScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="agent_name_unique_per_project")]
        ordering = ["name"]
        permissions = [("manage_agents", "Can register agents and issue or revoke their tokens")]

    def __str__(self):
        return self.name


class AgentToken(models.Model):
    """Like core.ApiToken: only the SHA-256 of the key is stored; expiring and revocable."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=16)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = AgentRecordManager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"{self.agent.name} token {self.prefix}…"


class GatewaySession(models.Model):
    """One MCP session: the run it is, who opened it, and the call whose answer is owed.

    `held_revision`: a call answered "approval pending" (or still running) before it
    concluded; the same call with the same arguments picks up that revision's outcome
    instead of proposing it again, so it executes exactly once."""

    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, related_name="gateway_session")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="sessions")
    token = models.ForeignKey(AgentToken, null=True, on_delete=models.SET_NULL, related_name="sessions")
    mcp_session_id = models.CharField(max_length=64, blank=True, db_index=True)
    client_name = models.CharField(max_length=200, blank=True)
    client_version = models.CharField(max_length=100, blank=True)
    held_revision = models.PositiveIntegerField(null=True, blank=True)
    held_capability = models.CharField(max_length=80, blank=True)
    held_arguments_hash = models.CharField(max_length=64, blank=True)
    opened_at = models.DateTimeField(auto_now_add=True)
    # When the web process holding the session last vouched for it (it lives in that process's
    # memory): one not vouched for in AGENTOPS_GATEWAY_SESSION_LOST_S is ended by the sweep.
    alive_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=200, blank=True)

    objects = AgentRecordManager()

    class Meta:
        ordering = ["-opened_at", "-id"]
        indexes = [models.Index(fields=["alive_at"], condition=Q(ended_at__isnull=True),
                                name="gateway_session_open_alive")]
        constraints = [
            models.CheckConstraint(condition=Q(held_revision__isnull=True) | Q(held_revision__gte=1),
                                   name="gateway_session_held_revision_positive"),
        ]

    def __str__(self):
        return f"{self.agent.name} session {self.mcp_session_id[:8]} (run {self.run_id})"

"""Pre-aggregated counts for the dashboard (maintained by runs.dashboard.rollup).

Hour grain: `hour` is whole hours since the Unix epoch (UTC), so any window
aligned to an hour (24 h, 7 d, 30 d) reads at most (hours x categories) rows,
whatever the number of runs and attempts. Only live operations are counted
(runs an evaluation made are left out), and only once a run has finished: a
finished run never changes again, so its rows are written once, exactly.
"""
from __future__ import annotations

from django.db import models

from core.projects import ProjectScopedManager


class RunRollup(models.Model):
    """Finished runs per hour: by final status (hour created) or by stop reason (hour finished)."""

    CREATED = "created"
    FINISHED = "finished"

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=10, choices=[(CREATED, CREATED), (FINISHED, FINISHED)])
    hour = models.IntegerField()
    category = models.CharField(max_length=40)
    runs = models.PositiveBigIntegerField(default=0)

    objects = ProjectScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "kind", "hour", "category"], name="run_rollup_key")]

    def __str__(self):
        return f"{self.kind} h{self.hour} {self.category}: {self.runs}"


class StopRollup(models.Model):
    """Finished runs per (hour finished, stop reason, capability of the attempt that stopped the run,
    "" when none did: a stop while planning, say): the dashboard's stops per capability."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    hour = models.IntegerField()
    stop_reason = models.CharField(max_length=40)
    capability_name = models.CharField(max_length=80, blank=True)
    runs = models.PositiveBigIntegerField(default=0)

    objects = ProjectScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "hour", "stop_reason", "capability_name"],
                                               name="stop_rollup_key")]

    def __str__(self):
        return f"h{self.hour} {self.stop_reason} {self.capability_name or '-'}: {self.runs}"


class AttemptRollup(models.Model):
    """Attempts of finished runs per (hour started, capability, latency bin).

    The latency bin is floor(ln(latency_s) * runs.dashboard.rollup.BINS_PER_E): percentiles
    are read from these bins (rank by rank, interpolated between the bin's own
    minimum and maximum), so they are exact when a bin holds one distinct value
    and within a bin's width (about 10 %) otherwise.
    """

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    hour = models.IntegerField()
    capability_name = models.CharField(max_length=80)
    bin = models.IntegerField()
    attempts = models.PositiveBigIntegerField(default=0)
    errors = models.PositiveBigIntegerField(default=0)
    repeated = models.PositiveBigIntegerField(default=0)
    latency_sum = models.FloatField(default=0.0)
    latency_min = models.FloatField()
    latency_max = models.FloatField()

    objects = ProjectScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "hour", "capability_name", "bin"], name="attempt_rollup_key")]

    def __str__(self):
        return f"h{self.hour} {self.capability_name} bin {self.bin}: {self.attempts}"


class ApprovalRollup(models.Model):
    """Decisions (approved or rejected) per (hour decided, bin of the wait): time to decision.

    Written in the transaction that records the decision (runs.services.approval_decide);
    a decision never changes afterwards. Bins as in AttemptRollup, over seconds waited.
    """

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    hour = models.IntegerField()
    bin = models.IntegerField()
    decisions = models.PositiveBigIntegerField(default=0)
    wait_sum = models.FloatField(default=0.0)
    wait_min = models.FloatField()
    wait_max = models.FloatField()

    objects = ProjectScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "hour", "bin"], name="approval_rollup_key")]

    def __str__(self):
        return f"h{self.hour} bin {self.bin}: {self.decisions}"


# -- usage: tokens and cost (runs.dashboard.usage) ---------------------------------------------
#
# A finished run's tokens, cost and tool calls, counted once at the hour it finished, along four
# dimensions. Model, owner and agent each hold one value per run, so they share one table and every
# grouping of it adds up to the total. Labels are many per run (one value per key), so they have a
# table of their own, one row per (key, value): the runs of one key's values add up to the runs
# carrying that key. Capabilities are many per run too: a run's tokens and cost are shared among the
# capabilities it called in proportion to its calls of each ("" for a run that called none), so they
# too add up to the total.


class UsageRollup(models.Model):
    """Finished runs per (hour finished, model, owner, agent): runs, tokens, cost, tool calls.

    model: the LLM planner's model ("" for planners without one); agent_id: the gateway agent whose
    session the run was (0 for none)."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    hour = models.IntegerField()
    model = models.CharField(max_length=200, blank=True)
    owner_id = models.IntegerField()
    agent_id = models.IntegerField(default=0)
    runs = models.PositiveBigIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    tool_calls = models.PositiveBigIntegerField(default=0)

    objects = ProjectScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "hour", "model", "owner_id", "agent_id"],
                                               name="usage_rollup_key")]
        indexes = [models.Index(fields=["owner_id", "hour"], name="usage_rollup_owner_hour_idx")]

    def __str__(self):
        return f"h{self.hour} {self.model or '-'} owner {self.owner_id} agent {self.agent_id}: {self.tokens} tokens"


class UsageLabelRollup(models.Model):
    """Finished runs per (hour finished, label key, label value): a run counts once under each of its labels."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    hour = models.IntegerField()
    key = models.CharField(max_length=63)
    value = models.CharField(max_length=200)
    runs = models.PositiveBigIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    tool_calls = models.PositiveBigIntegerField(default=0)

    objects = ProjectScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "hour", "key", "value"], name="usage_label_rollup_key")]
        indexes = [models.Index(fields=["key", "value", "hour"], name="usage_label_key_value_hour_idx")]

    def __str__(self):
        return f"h{self.hour} {self.key}={self.value}: {self.tokens} tokens"


class UsageCapabilityRollup(models.Model):
    """Finished runs' usage per (hour finished, capability): calls, runs calling it, and the share of
    their tokens and cost attributed to it (in proportion to calls; hence floats)."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    hour = models.IntegerField()
    capability_name = models.CharField(max_length=80, blank=True)
    calls = models.PositiveBigIntegerField(default=0)
    runs = models.PositiveBigIntegerField(default=0)
    tokens = models.FloatField(default=0.0)
    cost = models.FloatField(default=0.0)

    objects = ProjectScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "hour", "capability_name"], name="usage_capability_rollup_key")]

    def __str__(self):
        return f"h{self.hour} {self.capability_name or '-'}: {self.calls} calls"

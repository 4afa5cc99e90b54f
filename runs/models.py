"""Durable records of agent runs: what was planned, tried, observed and decided.

Every row here is written by runs.services / runs.worker.persistence as it happens, so
the trace of a run can be reviewed after an incident exactly as it unfolded.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from core.choices import (
    FINISHED_STATUSES,
    LIVE_STATUSES,
    ApprovalKind,
    ApprovalState,
    AttemptKind,
    DecisionKind,
    ErrorCategory,
    ErrorCode,
    ObservationStatus,
    ReplanReason,
    RunStatus,
    SideEffectStatus,
    StallKind,
    StepStatus,
    StopReason,
    values_of,
)
from core.projects import ProjectScopedManager
from runtime.stop import StopKind


class RunRecordManager(ProjectScopedManager):
    """A run's records are in the run's project."""

    path = "run__project"


class Planner(models.TextChoices):
    SCRIPTED = "scripted"
    RULES = "rules"
    LLM = "llm", "LLM (OpenAI-compatible)"
    EXTERNAL = "external", "external agent (API)"
    # An MCP client through the gateway: each tools/call is a one-step plan (gateway/).
    GATEWAY = "gateway", "MCP client (gateway)"
    # The evaluation's baseline: one single-step call, no replanning.
    DIRECT = "direct", "direct call (evaluation baseline)"


def _when_finished(counter: str) -> models.Case:
    """A run's counter once it has finished (its status says so: every finished run has a stop
    reason, run_stop_reason_iff_finished), NULL before."""
    return models.Case(models.When(status__in=[status.value for status in FINISHED_STATUSES], then=F(counter)),
                       default=None)


class Run(models.Model):
    project = models.ForeignKey("agentops.Project", on_delete=models.PROTECT, related_name="+")
    goal = models.TextField()
    completion = models.JSONField(help_text="Application-owned completion criteria.")
    budgets = models.JSONField()
    planner = models.CharField(max_length=20, choices=Planner.choices)
    planner_config = models.JSONField(default=dict, blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs")
    require_plan_approval = models.BooleanField(default=False)
    # Set on runs an evaluation made; dashboards of live operations leave them out.
    evaluation = models.ForeignKey("evaluation.Evaluation", null=True, blank=True, on_delete=models.CASCADE,
                                   related_name="runs", db_index=False)  # covered by the composite indexes
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    stop_reason = models.CharField(max_length=40, choices=StopReason.choices, blank=True)
    stop_detail = models.TextField(blank=True)
    # No foreign-key constraint to attempts (partitioned on PostgreSQL: runs.partitions); on_delete still applies.
    stop_attempt = models.ForeignKey("Attempt", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                     db_constraint=False)
    # A call running for more than a second, while it runs (runs.trace.calls_in_flight): shown on the trace.
    call_in_flight = models.JSONField(null=True, blank=True)
    # Only with a stalled stop reason: repeated_without_progress or planner_exhausted.
    stall_kind = models.CharField(max_length=30, choices=StallKind.choices, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # Usage counters, updated with every step so dashboards never scan attempts.
    iterations = models.PositiveIntegerField(default=0)
    revisions = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    retries = models.PositiveIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    side_effects_committed = models.PositiveIntegerField(default=0)
    approvals_requested = models.PositiveIntegerField(default=0)
    repeated_attempts = models.PositiveIntegerField(default=0)
    # {key: value}, set at start (runs.labels); RunLabel rows index them for filters.
    labels = models.JSONField(default=dict, blank=True)
    trace_id = models.CharField(max_length=32, unique=True)
    # The runtime's checkpoint (runtime.state.RunState) without its steps' progress, which the current
    # revision's Step rows hold (runs/checkpoint.py).
    state = models.JSONField(default=dict, blank=True)
    # Which worker advances the run, until when: only one worker at a time.
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Fencing token: raised by every claim, so a worker that lost the lease cannot write.
    lease_token = models.PositiveBigIntegerField(default=0)
    next_action_at = models.DateTimeField(null=True, blank=True)
    # When the run's advance task was last sent (when it became due, for a countdown): the
    # orphan sweep takes a run nobody claimed for the broker's visibility timeout since as lost.
    task_sent_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # A fork (runs/forks.py): the run it started from, and the call it starts at (1-based, in the
    # source's order): the source's calls before it are this run's inherited history.
    forked_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks")
    forked_at = models.PositiveIntegerField(null=True, blank=True)
    # The runs list's sorts by usage, kept by the database: a counter once the run has finished,
    # NULL while it runs. Every pass changes the counters; an index on them would make every
    # update of the run write a new entry in each (no HOT update). These stay NULL through the
    # passes of a live run, so their indexes are untouched until the stop, which changes the
    # status (and finished_at) anyway; a later correction of a finished run's tokens or cost
    # follows by itself.
    final_tool_calls = models.GeneratedField(expression=_when_finished("tool_calls"),
                                             output_field=models.PositiveIntegerField(null=True), db_persist=True)
    final_tokens = models.GeneratedField(expression=_when_finished("tokens"),
                                         output_field=models.PositiveBigIntegerField(null=True), db_persist=True)
    final_cost = models.GeneratedField(expression=_when_finished("cost"),
                                       output_field=models.FloatField(null=True), db_persist=True)

    objects = ProjectScopedManager()

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [
            ("start_run", "Can start runs"),
            ("cancel_run", "Can cancel runs"),
            # Without it an operator cancels and resubmits only their own runs.
            ("manage_all_runs", "Can cancel and resubmit runs of other users"),
            ("reconcile_run", "Can record what a person found about a side effect whose outcome is unknown"),
        ]
        indexes = [
            models.Index(fields=["status", "-created_at"], name="run_status_created_idx"),
            models.Index(fields=["stop_reason", "-finished_at"], name="run_stop_finished_idx"),
            # The runs list's capped count under status + stop reason filters, from the index alone.
            models.Index(fields=["status", "stop_reason"], name="run_status_stop_idx"),
            models.Index(fields=["owner", "-created_at"], name="run_owner_created_idx"),
            models.Index(fields=["planner", "-created_at"], name="run_planner_created_idx"),
            # The dashboard reads live runs (and their attempts) from the tables: few, whatever the total.
            models.Index(fields=["evaluation", "created_at", "status", "id"],
                         condition=Q(status__in=list(LIVE_STATUSES)), name="run_live_idx"),
            # Keyset pagination of the runs list: every sort key with the id as tie-break.
            models.Index(fields=["-created_at", "-id"], name="run_created_id_idx"),
            models.Index(fields=["finished_at", "id"], name="run_finished_id_idx"),
            # The dashboard counts live runs (evaluation IS NULL) over a time window.
            models.Index(fields=["evaluation", "created_at"], name="run_eval_created_idx"),
            models.Index(fields=["evaluation", "finished_at"], name="run_eval_finished_idx"),
            # The runs list sorts by usage through these (keyset: value, then id; live runs, NULL,
            # after the finished ones). No index names a column that a pass changes (the counters,
            # state, lease, next_action_at, task_sent_at, call_in_flight, updated_at): a pass that
            # does not stop the run is then a HOT update (migration 0028 leaves room on each page).
            models.Index(fields=["final_tool_calls", "id"], name="run_final_tool_calls_id_idx"),
            models.Index(fields=["final_tokens", "id"], name="run_final_tokens_id_idx"),
            models.Index(fields=["final_cost", "id"], name="run_final_cost_id_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=values_of(RunStatus)), name="run_status_valid"),
            models.CheckConstraint(condition=Q(planner__in=values_of(Planner)), name="run_planner_valid"),
            models.CheckConstraint(condition=Q(stop_reason="") | Q(stop_reason__in=values_of(StopReason)),
                                   name="run_stop_reason_valid"),
            # A finished run always says why; a live one never claims a stop reason.
            models.CheckConstraint(
                condition=(Q(status__in=list(FINISHED_STATUSES)) & ~Q(stop_reason=""))
                | (~Q(status__in=list(FINISHED_STATUSES)) & Q(stop_reason="")),
                name="run_stop_reason_iff_finished",
            ),
            models.CheckConstraint(condition=Q(cost__gte=0), name="run_cost_nonnegative"),
            models.CheckConstraint(
                condition=Q(stall_kind="") | (Q(stall_kind__in=values_of(StallKind)) & Q(stop_reason=StopKind.STALLED.value)),
                name="run_stall_kind_only_when_stalled",
            ),
        ]

    def __str__(self):
        return f"Run {self.pk}: {self.goal[:60]}"

    @property
    def tokens_estimated(self) -> int:
        """Of `tokens`: what planner calls lost with their worker were counted at without an answer."""
        return int(((self.state or {}).get("usage") or {}).get("estimated_tokens") or 0)

    @property
    def cost_estimated(self) -> float:
        return float(((self.state or {}).get("usage") or {}).get("estimated_cost") or 0.0)

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES


class PlanRevision(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="plan_revisions")
    number = models.PositiveIntegerField()
    accepted = models.BooleanField()
    steps = models.JSONField(default=list)
    reason_code = models.CharField(max_length=30, choices=ReplanReason.choices)
    reason = models.TextField(blank=True)
    # No foreign-key constraint to attempts (partitioned on PostgreSQL: runs.partitions); on_delete still applies.
    triggering_attempt = models.ForeignKey("Attempt", null=True, blank=True, on_delete=models.SET_NULL,
                                           related_name="triggered_revisions", db_constraint=False)
    changes = models.JSONField(default=dict, blank=True)
    validation_errors = models.JSONField(default=list, blank=True)
    tokens = models.PositiveIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    planner_output = models.TextField(blank=True)
    capabilities_seen = models.JSONField(default=list, blank=True)
    needs_approval = models.BooleanField(default=False)
    # Who proposed this plan: the external agent's user who submitted it, else the run's owner (whose
    # planner it is). Its steps run with the owner's and the proposer's permissions; four-eyes refuses both.
    proposed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = RunRecordManager()

    class Meta:
        ordering = ["run", "number"]
        constraints = [
            models.UniqueConstraint(fields=["run", "number"], name="revision_number_unique_per_run"),
            models.CheckConstraint(condition=Q(number__gte=1), name="revision_number_positive"),
            models.CheckConstraint(condition=Q(reason_code__in=values_of(ReplanReason)), name="revision_reason_valid"),
        ]

    def __str__(self):
        return f"run {self.run_id} rev {self.number}"


class Step(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps")
    revision = models.ForeignKey(PlanRevision, on_delete=models.CASCADE, related_name="plan_steps")
    index = models.PositiveIntegerField()
    key = models.CharField(max_length=64, help_text="The step id within its plan (s1, s2, ...).")
    capability_name = models.CharField(max_length=80)
    capability_version = models.ForeignKey("capabilities.CapabilityVersion", null=True, blank=True,
                                           on_delete=models.PROTECT, related_name="steps")
    arguments = models.JSONField(default=dict)
    arguments_hash = models.CharField(max_length=64)
    expected_outcome = models.TextField(blank=True)
    depends_on = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=20, choices=StepStatus.choices, default=StepStatus.PENDING)
    approval_state = models.CharField(max_length=20, choices=ApprovalState.choices, default=ApprovalState.NOT_REQUIRED)
    # The runtime's progress of this step (runtime.state.StepProgress.progress_dict()), kept here rather
    # than in the run's checkpoint so a pass writes only the steps it changed (runs/checkpoint.py).
    # None: as the plan left it (pending, no attempt).
    progress = models.JSONField(null=True, blank=True)

    objects = RunRecordManager()

    class Meta:
        ordering = ["revision", "index"]
        constraints = [
            models.UniqueConstraint(fields=["revision", "index"], name="step_index_unique_per_revision"),
            models.UniqueConstraint(fields=["revision", "key"], name="step_key_unique_per_revision"),
            models.CheckConstraint(condition=Q(status__in=values_of(StepStatus)), name="step_status_valid"),
            models.CheckConstraint(condition=Q(approval_state__in=values_of(ApprovalState)),
                                   name="step_approval_state_valid"),
        ]

    def __str__(self):
        return f"{self.key} {self.capability_name}"


class Attempt(models.Model):
    # Each insert keeps up every index of this table (the worker writes one or more per pass):
    # each index below names the query that needs it (docs/performance.md, "Indexes on the
    # attempts table"). The foreign keys' own indexes are left out where a composite index
    # starts with the column, or where no query reads attempts by it.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempts",
                            db_index=False)  # attempt_run_time_id_idx and three more start with it
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="attempts",
                             db_index=False)  # attempt_number_unique_per_step starts with it
    # Unique (attempt_uid_unique, in Meta: a unique=True field would also get a pattern-ops index
    # for LIKE on PostgreSQL, and no query matches uids by prefix).
    uid = models.CharField(max_length=32, help_text="The runtime's attempt id.")
    number = models.PositiveIntegerField()
    kind = models.CharField(max_length=10, choices=AttemptKind.choices, default=AttemptKind.CALL)
    capability_name = models.CharField(max_length=80)
    # No index: no query reads attempts by version (the capability page goes by name), and no
    # version is ever deleted (PROTECT; versions are the registry's history).
    capability_version = models.ForeignKey("capabilities.CapabilityVersion", null=True, blank=True,
                                           on_delete=models.PROTECT, related_name="attempts", db_index=False)
    signature = models.TextField()
    signature_hash = models.CharField(max_length=64)
    idempotency_key = models.CharField(max_length=128, blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    latency_s = models.FloatField()
    status = models.CharField(max_length=10, choices=ObservationStatus.choices)
    state_changed = models.BooleanField(default=False)
    output = models.JSONField(null=True, blank=True)
    output_ref = models.ForeignKey("capabilities.StoredOutput", null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+", db_index=False)  # attempt_output_ref_idx: the set ones
    error_code = models.CharField(max_length=20, choices=ErrorCode.choices, blank=True)
    error_category = models.CharField(max_length=20, choices=ErrorCategory.choices, blank=True)
    error_message = models.TextField(blank=True)
    retry_guidance = models.CharField(max_length=300, blank=True)
    retry_after_s = models.FloatField(null=True, blank=True)
    # The answer's HTTP status, where the capability spoke HTTP (the observation's extra).
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    # A failure's group (runs.failures.fingerprint); "" for an ok attempt.
    fingerprint = models.CharField(max_length=32, blank=True, default="")
    side_effect_status = models.CharField(max_length=15, choices=SideEffectStatus.choices,
                                          default="not_committed")
    repeated_without_progress = models.BooleanField(default=False)
    # Write-ahead intent of a state-changing call: committed before the call is sent,
    # completed with the outcome after. One left in flight means the outcome is unknown.
    in_flight = models.BooleanField(default=False)
    worker = models.CharField(max_length=100, blank=True)
    lease_token = models.PositiveBigIntegerField(null=True, blank=True)
    trace_id = models.CharField(max_length=32)
    span_id = models.CharField(max_length=16)
    # This attempt's entry in the runtime's history window (runtime.history.HistoryEntry.to_dict()):
    # written once with the row; the checkpoint's head names it by uid (runs/checkpoint.py).
    history_entry = models.JSONField(null=True, blank=True)

    objects = RunRecordManager()

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [
            # A capability's calls, newest first: the capability page's recent calls and the usage
            # window (runs.dashboard.capability_usage), the explorer's capability filter (keyset).
            models.Index(fields=["capability_name", "-started_at", "-id"], name="attempt_capability_time_idx"),
            # A run's attempts in trace order; with the id, its pages are read from the index alone.
            # Also the run's attempts for a cascade delete (retention) and the explorer's run filter.
            models.Index(fields=["run", "started_at", "id"], name="attempt_run_time_id_idx"),
            # Repeated signatures within a run (stall highlighting: runs.trace.review, .timeline).
            models.Index(fields=["run", "signature_hash"], name="attempt_run_signature_idx"),
            # "Capability used" filter of the runs list (run ids by capability, or EXISTS), index-only.
            models.Index(fields=["capability_name", "run"], name="attempt_capability_run_idx"),
            # A run's calls per capability (trace gauges and filter), index-only.
            models.Index(fields=["run", "capability_name"], name="attempt_run_capability_idx"),
            # The tool-call explorer's filters, newest first (runs.explorer), keyset by (started_at, id).
            models.Index(fields=["-started_at", "-id"], name="attempt_time_id_idx"),
            # Failed calls only: status=ok (most rows) is read through attempt_time_id_idx, its first
            # page among the first rows; a failure status or code is rare enough to need its own.
            models.Index(fields=["status", "-started_at", "-id"], name="attempt_status_time_idx",
                         condition=~Q(status="ok")),
            models.Index(fields=["error_code", "-started_at", "-id"], name="attempt_code_time_idx",
                         condition=~Q(error_code="")),
            # A failure group's calls (runs.failures): ok attempts have no fingerprint.
            models.Index(fields=["fingerprint", "-started_at", "-id"], name="attempt_fingerprint_time_idx",
                         condition=~Q(fingerprint="")),
            # A claiming worker looks for its run's unresolved intents.
            models.Index(fields=["run"], condition=Q(in_flight=True), name="attempt_in_flight_idx"),
            # Retention: which stored outputs the deleted runs' attempts referenced, and whether
            # other attempts still do (runs.retention); also the foreign key's check when one is
            # deleted. Most attempts keep their output inline: only the set ones are indexed.
            models.Index(fields=["output_ref"], condition=Q(output_ref__isnull=False), name="attempt_output_ref_idx"),
        ]
        constraints = [
            # The trace's links and the compare page find an attempt by its uid.
            models.UniqueConstraint(fields=["uid"], name="attempt_uid_unique"),
            models.UniqueConstraint(fields=["step", "number"], name="attempt_number_unique_per_step"),
            models.CheckConstraint(condition=Q(number__gte=1), name="attempt_number_positive"),
            models.CheckConstraint(condition=Q(status__in=values_of(ObservationStatus)), name="attempt_status_valid"),
            models.CheckConstraint(condition=Q(error_code="") | Q(error_code__in=values_of(ErrorCode)),
                                   name="attempt_error_code_valid"),
            # An ok observation has no error code; a failure always names one.
            models.CheckConstraint(condition=(Q(status="ok") & Q(error_code="")) | (~Q(status="ok") & ~Q(error_code="")),
                                   name="attempt_error_code_iff_failed"),
            models.CheckConstraint(condition=Q(side_effect_status__in=values_of(SideEffectStatus)),
                                   name="attempt_side_effect_status_valid"),
            models.CheckConstraint(condition=Q(latency_s__gte=0), name="attempt_latency_nonnegative"),
        ]

    def __str__(self):
        return f"{self.capability_name} #{self.number} ({self.status})"


class PlannerCall(models.Model):
    """A planner call that spends tokens (an LLM endpoint), written ahead like a side-effecting attempt:
    committed before it is made, closed by the pass that counts it. One left in flight was lost with
    its worker; the next worker counts it (at the answer's figures, or its ceiling as an estimate)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="planner_calls")
    uid = models.CharField(max_length=32, unique=True, help_text="The runtime's call id.")
    revision = models.PositiveIntegerField(help_text="The plan revision the call asked for.")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    # The most the call may spend, written ahead: what it is counted at when its answer never came.
    max_tokens = models.PositiveBigIntegerField()
    max_cost = models.FloatField()
    # When the answer reached the worker; tokens and cost then say what the provider reported.
    answered_at = models.DateTimeField(null=True, blank=True)
    tokens = models.PositiveBigIntegerField(default=0, help_text="What the run counted for this call.")
    cost = models.FloatField(default=0.0)
    in_flight = models.BooleanField(default=True)
    lost = models.BooleanField(default=False, help_text="Its worker was lost before the call was counted.")
    estimated = models.BooleanField(default=False, help_text="Counted at its maximum: no answer was recorded.")
    worker = models.CharField(max_length=100, blank=True)
    lease_token = models.PositiveBigIntegerField(null=True, blank=True)

    objects = RunRecordManager()

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [
            models.Index(fields=["run", "started_at"], name="planner_call_run_time_idx"),
            # A claiming worker looks for its run's lost planner calls.
            models.Index(fields=["run"], condition=Q(in_flight=True), name="planner_call_in_flight_idx"),
        ]

    def __str__(self):
        return f"run {self.run_id} planner call for revision {self.revision}"


class Decision(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="decisions")
    # No foreign-key constraint to attempts (partitioned on PostgreSQL: runs.partitions); on_delete still applies.
    attempt = models.OneToOneField(Attempt, null=True, blank=True, on_delete=models.CASCADE, related_name="decision",
                                   db_constraint=False)
    decision = models.CharField(max_length=30, choices=DecisionKind.choices)
    reason = models.TextField()
    usage = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = RunRecordManager()

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(decision__in=values_of(DecisionKind)), name="decision_kind_valid"),
        ]

    def __str__(self):
        return f"{self.decision}: {self.reason[:60]}"


class Approval(models.Model):
    """One approval request and, once, its decision. Never edited after that.

    It binds to the exact arguments (hash) and plan revision shown to the
    operator: changed arguments or a new revision need a new approval.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    kind = models.CharField(max_length=10, choices=ApprovalKind.choices)
    revision = models.ForeignKey(PlanRevision, on_delete=models.CASCADE, related_name="approvals")
    step = models.ForeignKey(Step, null=True, blank=True, on_delete=models.CASCADE, related_name="approvals")
    capability_name = models.CharField(max_length=80, blank=True)
    arguments = models.JSONField(default=dict, blank=True)
    arguments_hash = models.CharField(max_length=64, blank=True)
    plan_hash = models.CharField(max_length=64, blank=True)
    requested_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    state = models.CharField(max_length=20, choices=ApprovalState.choices, default=ApprovalState.PENDING)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="approval_decisions")
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = models.TextField(blank=True)

    objects = RunRecordManager()

    class Meta:
        ordering = ["requested_at", "id"]
        permissions = [("decide_approval", "Can approve or reject steps and plans")]
        indexes = [
            models.Index(fields=["state", "requested_at"], name="approval_state_requested_idx"),
            models.Index(fields=["run", "state"], name="approval_run_state_idx"),
            # Time to decision on the dashboard.
            models.Index(fields=["state", "decided_at"], name="approval_state_decided_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=values_of(ApprovalKind)), name="approval_kind_valid"),
            # A request is asked (pending) and then decided or expired; "not required" is a step's state only.
            models.CheckConstraint(condition=Q(state__in=[s for s in values_of(ApprovalState)
                                                          if s != ApprovalState.NOT_REQUIRED]),
                                   name="approval_state_valid"),
            models.CheckConstraint(condition=~Q(kind="step") | Q(step__isnull=False), name="approval_step_has_step"),
            # A decided approval records who and when; a pending one neither.
            models.CheckConstraint(
                condition=(Q(state=ApprovalState.PENDING) & Q(decided_at__isnull=True))
                | (Q(state=ApprovalState.EXPIRED) & Q(decided_at__isnull=False))
                | (Q(state__in=[ApprovalState.APPROVED, ApprovalState.REJECTED]) & Q(decided_at__isnull=False)
                   & Q(decided_by__isnull=False)),
                name="approval_decision_complete",
            ),
            # At most one open request per run at a time.
            models.UniqueConstraint(fields=["run"], condition=Q(state=ApprovalState.PENDING),
                                    name="approval_one_pending_per_run"),
        ]

    def __str__(self):
        return f"{self.kind} approval for run {self.run_id} ({self.state})"


class PlanSubmission(models.Model):
    """A plan an external agent submitted through the API for one revision of its run."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="plan_submissions")
    revision = models.PositiveIntegerField(help_text="The revision number this plan answers (1 = first plan).")
    plan = models.JSONField(help_text="A list of steps, or {\"steps\": [...]}.")
    tokens = models.PositiveIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    reason_code = models.CharField(max_length=30, blank=True)
    reason = models.TextField(blank=True)
    no_further_plan = models.BooleanField(default=False, help_text="The agent has nothing more to propose.")
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    submitted_at = models.DateTimeField(auto_now_add=True)

    objects = RunRecordManager()

    class Meta:
        ordering = ["run", "revision"]
        constraints = [
            models.UniqueConstraint(fields=["run", "revision"], name="plan_submission_once_per_revision"),
            models.CheckConstraint(condition=Q(revision__gte=1), name="plan_submission_revision_positive"),
            models.CheckConstraint(condition=Q(cost__gte=0), name="plan_submission_cost_nonnegative"),
        ]

    def __str__(self):
        return f"run {self.run_id} plan for revision {self.revision}"


class RunLabel(models.Model):
    """One label of a run, for filtering: (key, value, run) is the index a filter rides."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="label_rows", db_index=False)
    key = models.CharField(max_length=63)
    value = models.CharField(max_length=200)

    objects = RunRecordManager()

    class Meta:
        indexes = [models.Index(fields=["key", "value", "run"], name="runlabel_key_value_run_idx")]
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="runlabel_one_value_per_key")]

    def __str__(self):
        return f"{self.key}={self.value}"


class SavedView(models.Model):
    """A user's named runs-list filter (the list's query string), to come back to."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_run_views")
    name = models.CharField(max_length=80)
    query = models.CharField(max_length=2000, blank=True, help_text="The runs list's query string.")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ProjectScopedManager()

    class Meta:
        ordering = ["user", "name"]
        constraints = [models.UniqueConstraint(fields=["user", "project", "name"], name="savedview_name_unique_per_user")]

    def __str__(self):
        return self.name


class Reconciliation(models.Model):
    """What a person found about the side effect a run stopped on (terminal_failure:outcome_unknown):
    committed or not, and the evidence. The attempt keeps what the runtime saw (unknown); this is
    the person's finding beside it, once per run."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="reconciliation")
    # No foreign-key constraint to attempts (partitioned on PostgreSQL: runs.partitions); on_delete still applies.
    attempt = models.ForeignKey(Attempt, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                db_constraint=False)
    committed = models.BooleanField(help_text="Did the side effect happen?")
    evidence = models.TextField(help_text="What was checked, and what it showed.")
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    decided_at = models.DateTimeField(auto_now_add=True)

    objects = RunRecordManager()

    def __str__(self):
        return f"run {self.run_id}: {'committed' if self.committed else 'not committed'}"


class OpenLongPoll(models.Model):
    """A planning long poll being held (runs.long_polls): counted per user for the cap, across every
    web process. A process that dies leaves its rows, which stop counting at expires_at."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    run_id = models.BigIntegerField()
    opened_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["user", "expires_at"], name="longpoll_user_expires_idx")]

    def __str__(self):
        return f"{self.user_id} on run {self.run_id} until {self.expires_at:%H:%M:%S}"


class RunRequestKey(models.Model):
    """The Idempotency-Key a client sent with a request that starts runs (runs.request_keys): a run
    (POST /api/runs/start/, .../fork/) or a bulk job (POST /api/runs/bulk/). A retry with the same key
    gets that run or job back instead of a second one."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+",
                                db_index=False)   # the unique constraint leads with it
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    # sha256 of the request it came with (the endpoint and its validated input): a retry must match.
    digest = models.CharField(max_length=64)
    # What the request started: one of the two.
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    bulk_action = models.ForeignKey("runs.BulkAction", null=True, blank=True, on_delete=models.CASCADE,
                                    related_name="+")
    created_at = models.DateTimeField()

    objects = ProjectScopedManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "user", "key"], name="run_request_key_once"),
            models.CheckConstraint(condition=Q(run__isnull=False, bulk_action__isnull=True)
                                   | Q(run__isnull=True, bulk_action__isnull=False), name="run_request_key_one_target"),
        ]
        indexes = [models.Index(fields=["created_at"], name="run_request_key_created_idx")]

    def __str__(self):
        return f"{self.key} -> {'run' if self.run_id is not None else 'bulk action'} " \
               f"{self.run_id or self.bulk_action_id}"

    @property
    def started(self):
        return self.run if self.run_id is not None else self.bulk_action

from runs.models_bulk import BulkAction  # noqa: E402,F401  (bulk actions by filter, runs.bulk)
from runs.models_failures import FailureGroup, FailureGroupDay  # noqa: E402,F401  (runs.failures)
from runs.models_rollup import (  # noqa: E402,F401  (dashboard rollups, runs.dashboard.rollup and .usage)
    ApprovalRollup,
    AttemptRollup,
    RunRollup,
    StopRollup,
    UsageCapabilityRollup,
    UsageLabelRollup,
    UsageRollup,
)

"""The runs API: one view per operation, calling the same services as the pages."""
from __future__ import annotations

from django.db.models import Exists, OuterRef
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from capabilities.models import StoredOutput
from core.api import PAGE_PARAMETERS, ApiView, Pagination, paginated, validated
from core.choices import DecisionChannel, ErrorCategory, ErrorCode, RunStatus, SideEffectStatus, StopReason
from core.permissions import require_perm
from runs import forks, search, selectors, services
from runs.api.fields import LabelFiltersField, SearchQueryField
from runs.api.idempotency import IDEMPOTENCY_KEY, started
from runs.models import Approval, Attempt, Decision, Planner, PlanRevision, Run
from runs.selectors import RunFilters
from runs.trace import reconciliation
from runs.trace.as_json import approval_dict, attempt_values, revision_dict, run_dict

# The answers' shapes, for OpenAPI: runs.trace.as_json makes them (the trace download writes the
# same items), these only document them, as the model has a field where it can;
# tests/runs/test_trace_json.py checks each against what trace_json makes.


class BudgetUsageOutput(serializers.Serializer):
    name = serializers.CharField()
    used = serializers.FloatField()
    limit = serializers.FloatField()
    fraction = serializers.FloatField(help_text="used / limit, 0..1")
    exhausted = serializers.BooleanField(help_text="This budget stopped the run.")
    capability = serializers.CharField(required=False, help_text="A capability_calls row's capability.")
    estimated = serializers.FloatField(required=False, help_text="tokens and cost: the part of used counted at "
                                                                 "the maximum of planner calls lost with their worker.")


class RunOutput(serializers.ModelSerializer):
    owner = serializers.CharField()
    stop_reason = serializers.ChoiceField(choices=StopReason.choices, allow_null=True,
                                          help_text="null while the run has not stopped")
    stop_attempt = serializers.CharField(allow_null=True, help_text="uid of the attempt the run stopped on")
    revisions = serializers.IntegerField(help_text="Replans after the first plan, as max_revisions counts them.")
    plans = serializers.IntegerField(help_text="Every plan received, the first included.")
    budget_usage = BudgetUsageOutput(many=True)
    tokens_estimated = serializers.IntegerField(help_text="Of tokens: planner calls lost with their worker, "
                                                          "counted at their maximum (no answer was recorded).")
    cost_estimated = serializers.FloatField(help_text="Of cost: the same calls at the model's price.")
    forked_from = serializers.IntegerField(allow_null=True, help_text="A fork: the run it started from.")
    forked_at = serializers.IntegerField(allow_null=True, help_text="A fork: the source's call it starts at "
                                                                    "(1-based); the calls before it are inherited.")

    class Meta:
        model = Run
        fields = ["id", "goal", "completion", "budgets", "planner", "owner", "require_plan_approval", "status",
                  "stop_reason", "stop_detail", "stop_attempt", "stall_kind", "iterations", "revisions", "plans",
                  "tool_calls", "retries", "tokens", "cost", "side_effects_committed", "approvals_requested",
                  "repeated_attempts", "trace_id", "created_at", "started_at", "finished_at", "deadline_at",
                  "cancel_requested_at", "budget_usage", "labels", "tokens_estimated", "cost_estimated",
                  "forked_from", "forked_at"]


class RevisionOutput(serializers.ModelSerializer):
    triggering_attempt = serializers.CharField(allow_null=True,
                                               help_text="The attempt whose observation caused this revision.")

    class Meta:
        model = PlanRevision
        fields = ["number", "accepted", "reason_code", "reason", "triggering_attempt", "steps", "changes",
                  "validation_errors", "tokens", "cost", "planner_output", "capabilities_seen", "needs_approval",
                  "created_at"]


class AttemptOutputRefOutput(serializers.ModelSerializer):
    uri = serializers.CharField(help_text="Serves the whole output (the trace page's output.json).")

    class Meta:
        model = StoredOutput
        fields = ["uri", "sha256", "size_bytes"]


class AttemptObservationOutput(serializers.ModelSerializer):
    """The runtime's normalized observation (runtime/observation.py), as stored."""

    output = serializers.JSONField(allow_null=True, help_text="The output, or a preview of one stored by reference.")
    output_ref = AttemptOutputRefOutput(allow_null=True)
    error_code = serializers.ChoiceField(choices=ErrorCode.choices, allow_null=True)
    error_category = serializers.ChoiceField(choices=ErrorCategory.choices, allow_null=True)
    side_effect = serializers.ChoiceField(choices=SideEffectStatus.choices)

    class Meta:
        model = Attempt
        fields = ["status", "state_changed", "output", "output_ref", "error_code", "error_category", "error_message",
                  "retry_guidance", "retry_after_s", "side_effect"]


class AttemptDecisionOutput(serializers.ModelSerializer):
    class Meta:
        model = Decision
        fields = ["decision", "reason", "usage", "created_at"]


class AttemptOutput(serializers.ModelSerializer):
    revision = serializers.IntegerField()
    step = serializers.CharField(help_text="The step's key within its revision.")
    label = serializers.CharField(help_text="Unique within the run, as the trace page shows it: r2·s1#1.")
    capability = serializers.CharField()
    capability_version = serializers.IntegerField(allow_null=True)
    arguments = serializers.JSONField()
    observation = AttemptObservationOutput()
    decision = AttemptDecisionOutput(allow_null=True)

    class Meta:
        model = Attempt
        fields = ["uid", "revision", "step", "number", "kind", "label", "capability", "capability_version",
                  "arguments", "signature", "signature_hash", "idempotency_key", "started_at", "ended_at",
                  "latency_s", "trace_id", "span_id", "repeated_without_progress", "observation", "decision"]


class ApprovalOutput(serializers.ModelSerializer):
    run_goal = serializers.CharField()
    revision = serializers.IntegerField()
    step = serializers.CharField(allow_null=True)
    capability = serializers.CharField(allow_blank=True)
    decided_by = serializers.CharField(allow_null=True)

    class Meta:
        model = Approval
        fields = ["id", "run", "run_goal", "kind", "revision", "step", "capability", "arguments", "arguments_hash",
                  "plan_hash", "state", "requested_at", "expires_at", "decided_at", "decided_by", "comment"]


class RunListApi(ApiView):
    permission_classes = [require_perm("runs.view_run")]

    class RunFilterInput(serializers.Serializer):
        status = serializers.ChoiceField(choices=RunStatus.choices, required=False)
        stop_reason = serializers.CharField(required=False)
        planner = serializers.ChoiceField(choices=Planner.choices, required=False)
        owner = serializers.CharField(required=False)
        label = LabelFiltersField(required=False,
                                  help_text="key=value (or key: any value); repeat for several, all must match")
        capability = serializers.CharField(required=False, max_length=80, help_text="runs that called it")
        goal = serializers.CharField(required=False, max_length=200, help_text="text the goal contains")
        stall_kind = serializers.CharField(required=False, max_length=40)
        q = SearchQueryField(required=False,
                             help_text='goals, stop details and the text of tool calls (arguments, outputs, '
                                       'errors): words and "quoted phrases", all must match')
        created_from = serializers.DateTimeField(required=False)
        created_to = serializers.DateTimeField(required=False)

        def validate_stall_kind(self, value):
            field = next((f for f in Run._meta.get_fields() if f.name == "stall_kind"), None)
            allowed = [c[0] for c in (field.choices or [])] if field is not None else []
            if allowed and value not in allowed:
                raise serializers.ValidationError(f"one of {', '.join(allowed)}")
            return value

    query_input = RunFilterInput

    @extend_schema(operation_id="runs_list", parameters=[RunFilterInput, *PAGE_PARAMETERS], responses=paginated(RunOutput))
    def get(self, request):
        filters = dict(self.query)
        paginator = Pagination()
        runs = Run.objects.select_related("owner", "stop_attempt").order_by("-created_at", "-id")
        searched = {k: filters.pop(k) for k in ("label", "goal", "stall_kind", "q")
                    if k in filters}
        runs = search.apply_search(runs, RunFilters(labels=searched.get("label", ()), goal=searched.get("goal", ""),
                                                    stall_kind=searched.get("stall_kind", ""),
                                                    q=searched.get("q", "")))
        for field, value in filters.items():
            if field == "capability":
                runs = runs.filter(Exists(Attempt.objects.filter(run=OuterRef("pk"), capability_name=value)))
                continue
            lookup = {"owner": "owner__username", "created_from": "created_at__gte",
                      "created_to": "created_at__lte"}.get(field, field)
            runs = runs.filter(**{lookup: value})
        page = paginator.paginate_queryset(runs, request, view=self)
        return paginator.get_paginated_response([run_dict(run) for run in page])


class RunStartApi(ApiView):
    permission_classes = [require_perm("runs.start_run")]

    class RunStartInput(serializers.Serializer):
        goal = serializers.CharField(max_length=10_000)
        completion = serializers.JSONField(help_text='e.g. {"capability": "search_documents", '
                                                     '"path": "documents.0.id", "exists": true}')
        budgets = serializers.JSONField(required=False, default=dict)
        planner = serializers.ChoiceField(choices=Planner.choices, default="rules")
        planner_config = serializers.JSONField(required=False, default=dict)
        require_plan_approval = serializers.BooleanField(default=False)
        labels = serializers.DictField(child=serializers.CharField(max_length=200), required=False, default=dict,
                                       help_text='e.g. {"team": "payments", "agent": "triage"}')

    @extend_schema(request=RunStartInput, parameters=[IDEMPOTENCY_KEY], responses={201: RunOutput})
    def post(self, request):
        data = validated(self.RunStartInput, request.data)
        return started(request, "runs.start", data, lambda: services.run_start(owner=request.user, **data), run_dict)


class RunDetailApi(ApiView):
    permission_classes = [require_perm("runs.view_run")]

    @extend_schema(responses=RunOutput)
    def get(self, request, run_id: int):
        return Response(run_dict(get_object_or_404(Run.objects.select_related("owner", "stop_attempt"), pk=run_id)))


class RunCancelApi(ApiView):
    permission_classes = [require_perm("runs.cancel_run")]

    @extend_schema(request=None, responses=RunOutput)
    def post(self, request, run_id: int):
        get_object_or_404(Run, pk=run_id)
        return Response(run_dict(services.run_cancel(run_id=run_id, user=request.user)))


class RunReconcileApi(ApiView):
    """What a person found about the unknown side effect the run stopped on (runs.trace.reconciliation)."""
    permission_classes = [require_perm("runs.reconcile_run")]

    class ReconcileInput(serializers.Serializer):
        committed = serializers.BooleanField(help_text="Did the side effect happen?")
        evidence = serializers.CharField(max_length=5000, help_text="What was checked, and what it showed.")

    class ReconcileOutput(serializers.Serializer):
        run = serializers.IntegerField(source="run_id")
        attempt = serializers.CharField(source="attempt.uid", allow_null=True, default=None)
        committed = serializers.BooleanField()
        evidence = serializers.CharField()
        decided_by = serializers.CharField(source="decided_by.username")
        decided_at = serializers.DateTimeField()
        next = serializers.SerializerMethodField(help_text="What may follow: resume the run from the reconciled "
                                                           "call (POST /api/runs/{id}/fork/), or leave it closed.")

        def get_next(self, _obj) -> str:
            return reconciliation.AFTER_RECORDING

    @extend_schema(request=ReconcileInput, responses={201: ReconcileOutput})
    def post(self, request, run_id: int):
        get_object_or_404(Run, pk=run_id)
        found = reconciliation.run_reconcile(run_id=run_id, user=request.user,
                                             **validated(self.ReconcileInput, request.data))
        return Response(self.ReconcileOutput(found).data, status=201)


class RunForkApi(ApiView):
    """Fork a finished run before one of its calls, or resume it after its end (runs.forks)."""
    permission_classes = [require_perm("runs.start_run")]

    class ForkInput(serializers.Serializer):
        at = serializers.IntegerField(required=False, min_value=1, help_text=(
            "The source's call the fork starts at (1-based, in the trace's order): the calls before it are "
            "inherited history, not repeated. Omitted (or the number of calls + 1): resume after the end."))
        attempt = serializers.CharField(required=False, max_length=32,
                                        help_text="Or the uid of the call the fork starts at (not with `at`).")
        budgets = serializers.JSONField(required=False, help_text="New budgets (default: the source's).")
        planner = serializers.ChoiceField(choices=Planner.choices, required=False, help_text=(
            "Another planner (default: the source's); not gateway or direct, which no fork can continue."))
        planner_config = serializers.JSONField(required=False,
                                               help_text="New planner settings (default: the source's).")

    @extend_schema(request=ForkInput, parameters=[IDEMPOTENCY_KEY], responses={201: RunOutput})
    def post(self, request, run_id: int):
        get_object_or_404(Run, pk=run_id)
        data = validated(self.ForkInput, request.data)
        return started(request, f"runs.fork:{run_id}", data,
                       lambda: forks.run_fork(run_id=run_id, user=request.user, **data), run_dict)


class RunRevisionsApi(ApiView):
    permission_classes = [require_perm("runs.view_run")]

    @extend_schema(responses=RevisionOutput(many=True))
    def get(self, request, run_id: int):
        run = get_object_or_404(Run, pk=run_id)
        return Response([revision_dict(revision) for revision in selectors.trace_revisions(run=run)])


class RunAttemptsApi(ApiView):
    permission_classes = [require_perm("runs.view_run")]

    @extend_schema(operation_id="runs_attempts_list", parameters=PAGE_PARAMETERS, responses=paginated(AttemptOutput))
    def get(self, request, run_id: int):
        run = get_object_or_404(Run, pk=run_id)
        paginator = Pagination()
        page = paginator.paginate_queryset(selectors.trace_attempt_rows(run=run), request, view=self)
        return paginator.get_paginated_response(attempt_values(run, page))


class ApprovalListApi(ApiView):
    permission_classes = [require_perm("runs.view_approval")]

    class ApprovalFilterInput(serializers.Serializer):
        state = serializers.ChoiceField(choices=["pending", "approved", "rejected", "expired"], default="pending")
        run = serializers.IntegerField(required=False)

    query_input = ApprovalFilterInput

    @extend_schema(operation_id="approvals_list", parameters=[ApprovalFilterInput, *PAGE_PARAMETERS],
                   responses=paginated(ApprovalOutput))
    def get(self, request):
        filters = self.query
        approvals = Approval.objects.filter(state=filters["state"]).select_related(
            "run", "revision", "step", "decided_by").order_by("requested_at", "id")
        if "run" in filters:
            approvals = approvals.filter(run_id=filters["run"])
        paginator = Pagination()
        page = paginator.paginate_queryset(approvals, request, view=self)
        return paginator.get_paginated_response([approval_dict(approval) for approval in page])


class ApprovalDecideApi(ApiView):
    permission_classes = [require_perm("runs.decide_approval")]

    class ApprovalDecideInput(serializers.Serializer):
        decision = serializers.ChoiceField(choices=["approve", "reject"])
        comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)
        expected_hash = serializers.CharField(
            max_length=64, help_text="Required: the hash you reviewed (the approval's `arguments_hash` for a step, "
                                     "`plan_hash` for a plan); a request bound to anything else is refused with 409.")
        expected_revision = serializers.IntegerField(
            required=False, allow_null=True, default=None, min_value=1,
            help_text="Optional: the plan revision number you reviewed it in; another revision is refused with 409.")

    @extend_schema(request=ApprovalDecideInput, responses=ApprovalOutput)
    def post(self, request, approval_id: int):
        data = validated(self.ApprovalDecideInput, request.data)
        get_object_or_404(Approval, pk=approval_id)
        approval = services.approval_decide(approval_id=approval_id, user=request.user,
                                            approve=data["decision"] == "approve",
                                            comment=data["comment"],
                                            expected_hash=data["expected_hash"],
                                            expected_revision=data["expected_revision"], channel=DecisionChannel.API)
        return Response(approval_dict(approval))

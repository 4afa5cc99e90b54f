"""The runs API: one view per operation, calling the same services as the pages."""
from __future__ import annotations

from django.db.models import Exists, OuterRef
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import PAGE_PARAMETERS, Pagination, paginated
from core.choices import (
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
    StopReason,
)
from core.permissions import require_perm
from runs import search, selectors, services
from runs.labels import label_filters_parse
from runs.models import Approval, Attempt, Planner, Run
from runs.selectors import RunFilters
from runs.trace_json import approval_dict, attempt_values, revision_dict, run_dict


# The answers' shapes, for OpenAPI. runs.trace_json makes them (the trace download writes the
# same items); tests/runs/test_trace_json.py checks each of these against what it makes.


class BudgetUsageOutput(serializers.Serializer):
    name = serializers.CharField()
    used = serializers.FloatField()
    limit = serializers.FloatField()
    fraction = serializers.FloatField(help_text="used / limit, 0..1")
    exhausted = serializers.BooleanField(help_text="This budget stopped the run.")
    capability = serializers.CharField(required=False, help_text="A capability_calls row's capability.")


class RunOutput(serializers.Serializer):
    id = serializers.IntegerField()
    goal = serializers.CharField()
    completion = serializers.JSONField()
    budgets = serializers.JSONField()
    planner = serializers.ChoiceField(choices=Planner.choices)
    owner = serializers.CharField()
    require_plan_approval = serializers.BooleanField()
    status = serializers.ChoiceField(choices=RunStatus.choices)
    stop_reason = serializers.ChoiceField(choices=StopReason.choices, allow_null=True,
                                          help_text="null while the run has not stopped")
    stop_detail = serializers.CharField(allow_blank=True)
    stop_attempt = serializers.CharField(allow_null=True, help_text="uid of the attempt the run stopped on")
    stall_kind = serializers.ChoiceField(choices=[("", ""), *StallKind.choices], allow_blank=True)
    iterations = serializers.IntegerField()
    revisions = serializers.IntegerField(help_text="Replans after the first plan, as max_revisions counts them.")
    plans = serializers.IntegerField(help_text="Every plan received, the first included.")
    tool_calls = serializers.IntegerField()
    retries = serializers.IntegerField()
    tokens = serializers.IntegerField()
    cost = serializers.FloatField()
    side_effects_committed = serializers.IntegerField()
    approvals_requested = serializers.IntegerField()
    repeated_attempts = serializers.IntegerField()
    trace_id = serializers.CharField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    deadline_at = serializers.DateTimeField(allow_null=True)
    cancel_requested_at = serializers.DateTimeField(allow_null=True)
    budget_usage = BudgetUsageOutput(many=True)
    labels = serializers.DictField(child=serializers.CharField())


class RevisionOutput(serializers.Serializer):
    number = serializers.IntegerField()
    accepted = serializers.BooleanField()
    reason_code = serializers.ChoiceField(choices=ReplanReason.choices)
    reason = serializers.CharField(allow_blank=True)
    triggering_attempt = serializers.CharField(allow_null=True,
                                               help_text="The attempt whose observation caused this revision.")
    steps = serializers.JSONField()
    changes = serializers.JSONField()
    validation_errors = serializers.JSONField()
    tokens = serializers.IntegerField()
    cost = serializers.FloatField()
    planner_output = serializers.CharField(allow_blank=True)
    capabilities_seen = serializers.JSONField()
    needs_approval = serializers.BooleanField()
    created_at = serializers.DateTimeField()


class AttemptOutputRefOutput(serializers.Serializer):
    uri = serializers.CharField(help_text="The whole output (the page's output.json).")
    sha256 = serializers.CharField()
    size_bytes = serializers.IntegerField()


class AttemptObservationOutput(serializers.Serializer):
    """The runtime's normalized observation (runs/runtime/observation.py)."""

    status = serializers.ChoiceField(choices=ObservationStatus.choices)
    state_changed = serializers.BooleanField()
    output = serializers.JSONField(allow_null=True, help_text="The output, or a preview of one stored by reference.")
    output_ref = AttemptOutputRefOutput(allow_null=True)
    error_code = serializers.ChoiceField(choices=ErrorCode.choices, allow_null=True)
    error_category = serializers.ChoiceField(choices=ErrorCategory.choices, allow_null=True)
    error_message = serializers.CharField(allow_blank=True)
    retry_guidance = serializers.CharField(allow_blank=True)
    retry_after_s = serializers.FloatField(allow_null=True)
    side_effect = serializers.ChoiceField(choices=SideEffectStatus.choices)


class AttemptDecisionOutput(serializers.Serializer):
    decision = serializers.ChoiceField(choices=DecisionKind.choices)
    reason = serializers.CharField(allow_blank=True)
    usage = serializers.JSONField(help_text="The run's budget usage when it was decided.")
    created_at = serializers.DateTimeField()


class AttemptOutput(serializers.Serializer):
    uid = serializers.CharField()
    revision = serializers.IntegerField()
    step = serializers.CharField(help_text="The step's key within its revision.")
    number = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=AttemptKind.choices)
    label = serializers.CharField(help_text="Unique within the run, as the trace page shows it: r2·s1#1.")
    capability = serializers.CharField()
    capability_version = serializers.IntegerField(allow_null=True)
    arguments = serializers.JSONField()
    signature = serializers.CharField()
    signature_hash = serializers.CharField()
    idempotency_key = serializers.CharField(allow_blank=True)
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField()
    latency_s = serializers.FloatField()
    trace_id = serializers.CharField()
    span_id = serializers.CharField()
    repeated_without_progress = serializers.BooleanField()
    observation = AttemptObservationOutput()
    decision = AttemptDecisionOutput(allow_null=True)


class ApprovalOutput(serializers.Serializer):
    id = serializers.IntegerField()
    run = serializers.IntegerField()
    run_goal = serializers.CharField()
    kind = serializers.ChoiceField(choices=ApprovalKind.choices)
    revision = serializers.IntegerField()
    step = serializers.CharField(allow_null=True)
    capability = serializers.CharField(allow_blank=True)
    arguments = serializers.JSONField()
    arguments_hash = serializers.CharField(allow_blank=True)
    plan_hash = serializers.CharField(allow_blank=True)
    state = serializers.ChoiceField(choices=ApprovalState.choices)
    requested_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    decided_at = serializers.DateTimeField(allow_null=True)
    decided_by = serializers.CharField(allow_null=True)
    comment = serializers.CharField(allow_blank=True)


class RunListApi(APIView):
    permission_classes = [require_perm("runs.view_run")]

    class RunFilterInput(serializers.Serializer):
        status = serializers.ChoiceField(choices=RunStatus.choices, required=False)
        stop_reason = serializers.CharField(required=False)
        planner = serializers.ChoiceField(choices=Planner.choices, required=False)
        owner = serializers.CharField(required=False)
        label = serializers.ListField(child=serializers.CharField(max_length=300), required=False,
                                      help_text="key=value (or key: any value); repeat for several, all must match")
        capability = serializers.CharField(required=False, max_length=80, help_text="runs that called it")
        goal = serializers.CharField(required=False, max_length=200, help_text="text the goal contains")
        stall_kind = serializers.CharField(required=False, max_length=40)
        created_from = serializers.DateTimeField(required=False)
        created_to = serializers.DateTimeField(required=False)

        def validate_stall_kind(self, value):
            field = next((f for f in Run._meta.get_fields() if f.name == "stall_kind"), None)
            allowed = [c[0] for c in (field.choices or [])] if field is not None else []
            if allowed and value not in allowed:
                raise serializers.ValidationError(f"one of {', '.join(allowed)}")
            return value

        def validate_label(self, value):
            wanted, problems = label_filters_parse(value)
            if problems:
                raise serializers.ValidationError(problems)
            return wanted

    @extend_schema(operation_id="runs_list", parameters=[RunFilterInput, *PAGE_PARAMETERS], responses=paginated(RunOutput))
    def get(self, request):
        filters = self.RunFilterInput(data=request.query_params)
        filters.is_valid(raise_exception=True)
        paginator = Pagination()
        runs = Run.objects.select_related("owner", "stop_attempt").order_by("-created_at", "-id")
        searched = {k: filters.validated_data.pop(k) for k in ("label", "goal", "stall_kind")
                    if k in filters.validated_data}
        runs = search.apply_search(runs, RunFilters(labels=searched.get("label", ()), goal=searched.get("goal", ""),
                                                    stall_kind=searched.get("stall_kind", "")))
        for field, value in filters.validated_data.items():
            if field == "capability":
                runs = runs.filter(Exists(Attempt.objects.filter(run=OuterRef("pk"), capability_name=value)))
                continue
            lookup = {"owner": "owner__username", "created_from": "created_at__gte",
                      "created_to": "created_at__lte"}.get(field, field)
            runs = runs.filter(**{lookup: value})
        page = paginator.paginate_queryset(runs, request, view=self)
        return paginator.get_paginated_response([run_dict(run) for run in page])


class RunStartApi(APIView):
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

    @extend_schema(request=RunStartInput, responses={201: RunOutput})
    def post(self, request):
        data = self.RunStartInput(data=request.data)
        data.is_valid(raise_exception=True)
        run = services.run_start(owner=request.user, **data.validated_data)
        return Response(run_dict(run), status=201)


class RunDetailApi(APIView):
    permission_classes = [require_perm("runs.view_run")]

    @extend_schema(responses=RunOutput)
    def get(self, request, run_id: int):
        return Response(run_dict(get_object_or_404(Run.objects.select_related("owner", "stop_attempt"), pk=run_id)))


class RunCancelApi(APIView):
    permission_classes = [require_perm("runs.cancel_run")]

    @extend_schema(request=None, responses=RunOutput)
    def post(self, request, run_id: int):
        get_object_or_404(Run, pk=run_id)
        return Response(run_dict(services.run_cancel(run_id=run_id, user=request.user)))


class RunRevisionsApi(APIView):
    permission_classes = [require_perm("runs.view_run")]

    @extend_schema(responses=RevisionOutput(many=True))
    def get(self, request, run_id: int):
        run = get_object_or_404(Run, pk=run_id)
        return Response([revision_dict(revision) for revision in selectors.trace_revisions(run=run)])


class RunAttemptsApi(APIView):
    permission_classes = [require_perm("runs.view_run")]

    @extend_schema(operation_id="runs_attempts_list", parameters=PAGE_PARAMETERS, responses=paginated(AttemptOutput))
    def get(self, request, run_id: int):
        run = get_object_or_404(Run, pk=run_id)
        paginator = Pagination()
        page = paginator.paginate_queryset(selectors.trace_attempt_rows(run=run), request, view=self)
        return paginator.get_paginated_response(attempt_values(run, page))


class ApprovalListApi(APIView):
    permission_classes = [require_perm("runs.view_approval")]

    class ApprovalFilterInput(serializers.Serializer):
        state = serializers.ChoiceField(choices=["pending", "approved", "rejected", "expired"], default="pending")
        run = serializers.IntegerField(required=False)

    @extend_schema(operation_id="approvals_list", parameters=[ApprovalFilterInput, *PAGE_PARAMETERS],
                   responses=paginated(ApprovalOutput))
    def get(self, request):
        filters = self.ApprovalFilterInput(data=request.query_params)
        filters.is_valid(raise_exception=True)
        approvals = Approval.objects.filter(state=filters.validated_data["state"]).select_related(
            "run", "revision", "step", "decided_by").order_by("requested_at", "id")
        if "run" in filters.validated_data:
            approvals = approvals.filter(run_id=filters.validated_data["run"])
        paginator = Pagination()
        page = paginator.paginate_queryset(approvals, request, view=self)
        return paginator.get_paginated_response([approval_dict(approval) for approval in page])


class ApprovalDecideApi(APIView):
    permission_classes = [require_perm("runs.decide_approval")]

    class ApprovalDecideInput(serializers.Serializer):
        decision = serializers.ChoiceField(choices=["approve", "reject"])
        comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)
        expected_hash = serializers.CharField(required=False, allow_null=True, default=None,
                                              help_text="The arguments (or plan) hash you reviewed.")

    @extend_schema(request=ApprovalDecideInput, responses=ApprovalOutput)
    def post(self, request, approval_id: int):
        data = self.ApprovalDecideInput(data=request.data)
        data.is_valid(raise_exception=True)
        get_object_or_404(Approval, pk=approval_id)
        approval = services.approval_decide(approval_id=approval_id, user=request.user,
                                            approve=data.validated_data["decision"] == "approve",
                                            comment=data.validated_data["comment"],
                                            expected_hash=data.validated_data["expected_hash"])
        return Response(approval_dict(approval))

"""The runs API: one view per operation, calling the same services as the pages."""
from __future__ import annotations

from django.db.models import Exists, OuterRef
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import PAGE_PARAMETERS, Pagination, paginated
from core.choices import RunStatus
from core.permissions import require_perm
from runs import search, services
from runs.budget_usage import revisions_used, run_budget_usage
from runs.labels import label_filters_parse
from runs.models import Approval, Attempt, Planner, PlanRevision, Run
from runs.selectors import RunFilters


class RunOutput(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username")
    budget_usage = serializers.SerializerMethodField()
    # Replans after the first plan, as the max_revisions budget and the page count them;
    # `plans` is every plan received, the first included.
    revisions = serializers.SerializerMethodField()
    plans = serializers.IntegerField(source="revisions", read_only=True)

    class Meta:
        model = Run
        fields = ["id", "goal", "completion", "budgets", "planner", "owner", "require_plan_approval", "status",
                  "stop_reason", "stop_detail", "stall_kind", "iterations", "revisions", "plans", "tool_calls",
                  "retries", "tokens", "cost",
                  "side_effects_committed", "approvals_requested", "repeated_attempts", "trace_id", "created_at",
                  "started_at", "finished_at", "deadline_at", "cancel_requested_at", "budget_usage", "labels"]

    def get_budget_usage(self, run) -> list[dict]:
        return run_budget_usage(run)

    def get_revisions(self, run) -> int:
        return revisions_used(run)


class RevisionOutput(serializers.ModelSerializer):
    triggering_attempt = serializers.CharField(source="triggering_attempt.uid", default=None, allow_null=True,
                                               help_text="The attempt whose observation caused this revision.")

    class Meta:
        model = PlanRevision
        fields = ["number", "accepted", "steps", "reason_code", "reason", "triggering_attempt", "changes",
                  "validation_errors", "tokens", "cost", "planner_output", "capabilities_seen", "needs_approval",
                  "created_at"]


class AttemptOutput(serializers.ModelSerializer):
    step = serializers.CharField(source="step.key")
    revision = serializers.IntegerField(source="step.revision.number")
    capability_version = serializers.IntegerField(source="capability_version.number", default=None, allow_null=True)
    decision = serializers.SerializerMethodField()
    arguments = serializers.JSONField(source="step.arguments")
    output_ref = serializers.SerializerMethodField()

    class Meta:
        model = Attempt
        fields = ["uid", "revision", "step", "number", "kind", "capability_name", "capability_version", "arguments",
                  "signature", "idempotency_key", "started_at", "ended_at", "latency_s", "status", "state_changed",
                  "output", "output_ref", "error_code", "error_category", "error_message", "retry_guidance",
                  "retry_after_s", "side_effect_status", "repeated_without_progress", "trace_id", "span_id",
                  "decision"]

    def get_decision(self, attempt) -> dict | None:
        decision = getattr(attempt, "decision", None)
        return {"decision": decision.decision, "reason": decision.reason, "usage": decision.usage} if decision else None

    def get_output_ref(self, attempt) -> dict | None:
        ref = attempt.output_ref
        return {"sha256": ref.sha256, "size_bytes": ref.size_bytes} if ref else None


class ApprovalOutput(serializers.ModelSerializer):
    revision = serializers.IntegerField(source="revision.number")
    step = serializers.CharField(source="step.key", default=None, allow_null=True)
    decided_by = serializers.CharField(source="decided_by.username", default=None, allow_null=True)
    run_goal = serializers.CharField(source="run.goal")

    class Meta:
        model = Approval
        fields = ["id", "run", "run_goal", "kind", "revision", "step", "capability_name", "arguments",
                  "arguments_hash", "plan_hash", "state", "requested_at", "expires_at", "decided_by", "decided_at",
                  "comment"]


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
        runs = Run.objects.select_related("owner").order_by("-created_at", "-id")
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
        return paginator.get_paginated_response(RunOutput(page, many=True).data)


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
        return Response(RunOutput(run).data, status=201)


class RunDetailApi(APIView):
    permission_classes = [require_perm("runs.view_run")]

    @extend_schema(responses=RunOutput)
    def get(self, request, run_id: int):
        return Response(RunOutput(get_object_or_404(Run.objects.select_related("owner"), pk=run_id)).data)


class RunCancelApi(APIView):
    permission_classes = [require_perm("runs.cancel_run")]

    @extend_schema(request=None, responses=RunOutput)
    def post(self, request, run_id: int):
        get_object_or_404(Run, pk=run_id)
        return Response(RunOutput(services.run_cancel(run_id=run_id, user=request.user)).data)


class RunRevisionsApi(APIView):
    permission_classes = [require_perm("runs.view_run")]

    @extend_schema(responses=RevisionOutput(many=True))
    def get(self, request, run_id: int):
        run = get_object_or_404(Run, pk=run_id)
        revisions = run.plan_revisions.select_related("triggering_attempt").order_by("number")
        return Response(RevisionOutput(revisions, many=True).data)


class RunAttemptsApi(APIView):
    permission_classes = [require_perm("runs.view_run")]

    @extend_schema(operation_id="runs_attempts_list", parameters=PAGE_PARAMETERS, responses=paginated(AttemptOutput))
    def get(self, request, run_id: int):
        run = get_object_or_404(Run, pk=run_id)
        attempts = (Attempt.objects.filter(run=run)
                    .select_related("step__revision", "capability_version", "decision", "output_ref")
                    .order_by("started_at", "id"))
        paginator = Pagination()
        page = paginator.paginate_queryset(attempts, request, view=self)
        return paginator.get_paginated_response(AttemptOutput(page, many=True).data)


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
        return paginator.get_paginated_response(ApprovalOutput(page, many=True).data)


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
        return Response(ApprovalOutput(approval).data)

"""The evaluation API: start an evaluation, follow it, list the suites.

One view per operation, calling the same services and selectors as the pages.
"""
from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from core.api import PAGE_PARAMETERS, ApiView, page_response, paginated, validated
from core.errors import InvalidInput
from core.permissions import MethodPermission, require_perm
from evaluation import selectors, services
from evaluation.models import Evaluation, EvaluationResult, EvaluationSuite


class SuiteOutput(serializers.ModelSerializer):
    task_count = serializers.SerializerMethodField()
    task_names = serializers.SerializerMethodField()

    class Meta:
        model = EvaluationSuite
        fields = ["id", "name", "description", "bundled", "task_count", "task_names", "created_at", "updated_at"]

    def get_task_count(self, suite) -> int:
        return len(suite.tasks or [])

    def get_task_names(self, suite) -> list[str]:
        return [t.get("name", "") for t in suite.tasks or [] if isinstance(t, dict)]


class EvaluationOutput(serializers.ModelSerializer):
    suite = serializers.CharField(source="suite.name")
    started_by = serializers.CharField(source="started_by.username")
    progress = serializers.SerializerMethodField()

    class Meta:
        model = Evaluation
        fields = ["id", "suite", "suite_id", "label", "planning_mode", "status", "started_by", "progress", "summary",
                  "error", "created_at", "started_at", "finished_at"]

    def get_progress(self, evaluation) -> dict:
        return {"tasks_done": evaluation.tasks_done, "tasks_total": evaluation.tasks_total}


class ResultOutput(serializers.ModelSerializer):
    run_id = serializers.IntegerField(allow_null=True)
    trace_url = serializers.SerializerMethodField()
    verdict = serializers.SerializerMethodField()

    class Meta:
        model = EvaluationResult
        fields = ["task", "mode", "run_id", "trace_url", "verified_success", "status", "stop_reason", "tool_calls",
                  "repeated_actions", "revisions", "retries", "failed_observations", "recovered", "tokens", "cost",
                  "simulated_latency_s", "wall_latency_s", "verdict", "details"]

    def get_trace_url(self, result) -> str | None:
        return f"/runs/{result.run_id}/" if result.run_id else None

    def get_verdict(self, result) -> dict | None:
        return (result.details or {}).get("verdict")


class EvaluationDetailOutput(EvaluationOutput):
    results = serializers.SerializerMethodField()

    class Meta(EvaluationOutput.Meta):
        fields = EvaluationOutput.Meta.fields + ["results"]

    def get_results(self, evaluation) -> list[dict]:
        return ResultOutput(selectors.results_of(evaluation), many=True).data


class EvaluationListStartApi(ApiView):
    """GET: recent evaluations. POST: queue an evaluation of a suite (202)."""

    permission_classes = [MethodPermission]
    required_perms = {"GET": "evaluation.view_evaluation", "POST": "evaluation.run_evaluation"}

    class Input(serializers.Serializer):
        suite = serializers.CharField(max_length=120, help_text="The suite's id or name, e.g. \"standard\".")
        label = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
        planning_mode = serializers.ChoiceField(choices=["scripted", "rules", "llm"], required=False,
                                                allow_null=True, default=None,
                                                help_text="The planner in planning mode; default: the suite's.")
        planner_config = serializers.JSONField(required=False, default=dict,
                                               help_text="That planner's settings (llm: endpoint, model, ...).")

    @extend_schema(operation_id="evaluations_list", parameters=PAGE_PARAMETERS, responses=paginated(EvaluationOutput))
    def get(self, request):
        rows = Evaluation.objects.select_related("suite", "started_by").order_by("-created_at", "-id")
        return page_response(self, request, rows, EvaluationOutput)

    @extend_schema(request=Input, responses={202: inline_serializer(
        "EvaluationQueued", {"id": serializers.IntegerField(), "status": serializers.CharField(),
                             "url": serializers.CharField()})})
    def post(self, request):
        data = validated(self.Input, request.data)
        suite = selectors.suite_get(data["suite"])
        if suite is None:
            raise InvalidInput(f"No evaluation suite {data['suite']!r}.", fields={"suite": "no such suite"})
        evaluation = services.evaluation_start(user=request.user, suite_id=suite.pk,
                                               label=data["label"], planning_mode=data["planning_mode"],
                                               planner_config=data["planner_config"])
        return Response({"id": evaluation.pk, "status": evaluation.status,
                         "url": f"/api/evaluations/{evaluation.pk}/"}, status=202)


class EvaluationDetailApi(ApiView):
    permission_classes = [require_perm("evaluation.view_evaluation")]

    @extend_schema(responses=EvaluationDetailOutput)
    def get(self, request, evaluation_id: int):
        evaluation = selectors.evaluation_get(evaluation_id)
        if evaluation is None:
            raise Http404
        return Response(EvaluationDetailOutput(evaluation).data)


class EvaluationSuiteListApi(ApiView):
    permission_classes = [require_perm("evaluation.view_evaluationsuite")]

    @extend_schema(responses=SuiteOutput(many=True))
    def get(self, request):
        return Response(SuiteOutput(selectors.suite_list(), many=True).data)


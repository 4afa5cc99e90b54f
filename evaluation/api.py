"""The evaluation API: start an evaluation, follow it, list the suites.

One view per operation, calling the same services and selectors as the pages.
"""
from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import extend_schema, extend_schema_field, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from core.api import PAGE_PARAMETERS, ApiView, page_response, paginated, validated
from core.errors import InvalidInput
from core.permissions import MethodPermission, require_perm
from core.roles import EDIT_SUITES
from evaluation import selectors, services
from evaluation.models import Evaluation, EvaluationResult, EvaluationSuite, SuiteVersion


class SuiteOutput(serializers.ModelSerializer):
    task_count = serializers.SerializerMethodField()
    task_names = serializers.SerializerMethodField()

    class Meta:
        model = EvaluationSuite
        fields = ["id", "name", "description", "bundled", "version", "task_count", "task_names", "created_at",
                  "updated_at"]

    def get_task_count(self, suite) -> int:
        return len(suite.tasks or [])

    def get_task_names(self, suite) -> list[str]:
        return [t.get("name", "") for t in suite.tasks or [] if isinstance(t, dict)]


class SuiteVersionOutput(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)
    task_count = serializers.SerializerMethodField()
    task_names = serializers.SerializerMethodField()

    class Meta:
        model = SuiteVersion
        fields = ["number", "created_by", "created_at", "summary", "changes", "task_count", "task_names"]

    def get_task_count(self, version) -> int:
        return len(version.tasks or [])

    def get_task_names(self, version) -> list[str]:
        return [t.get("name", "") for t in version.tasks or [] if isinstance(t, dict)]


class EvaluationOutput(serializers.ModelSerializer):
    suite = serializers.CharField(source="suite.name")
    suite_version = serializers.IntegerField(source="suite_version.number", allow_null=True, default=None)
    started_by = serializers.CharField(source="started_by.username")
    progress = serializers.SerializerMethodField()

    class Meta:
        model = Evaluation
        fields = ["id", "suite", "suite_id", "suite_version", "label", "planning_mode", "status", "started_by",
                  "progress", "summary", "error", "created_at", "started_at", "finished_at"]

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


RegressionOutput = inline_serializer("EvaluationRegression", {
    "baselines": serializers.DictField(
        child=serializers.DictField(allow_null=True),
        help_text="previous_version: the last completed evaluation of an earlier suite version; same_version: "
                  "the completed one before this of the same version (null when there is none)."),
    "tasks": serializers.ListField(child=serializers.DictField(), help_text=(
        "Per task: verdict, passed, planning_success, the expectations, source (the run it came from, its "
        "scores), and against.<baseline> = {change: new|fixed|regressed|unchanged, verdict, passed}.")),
    "removed": serializers.DictField(child=serializers.ListField(child=serializers.CharField())),
    "counts": serializers.DictField(child=serializers.DictField(child=serializers.IntegerField())),
})


class EvaluationDetailOutput(EvaluationOutput):
    results = serializers.SerializerMethodField()
    regression = serializers.SerializerMethodField()

    class Meta(EvaluationOutput.Meta):
        fields = EvaluationOutput.Meta.fields + ["results", "regression"]

    def get_results(self, evaluation) -> list[dict]:
        return ResultOutput(selectors.results_of(evaluation), many=True).data

    @extend_schema_field(RegressionOutput)
    def get_regression(self, evaluation) -> dict | None:
        if evaluation.status != Evaluation.Status.COMPLETED:
            return None
        return selectors.regression(evaluation).as_dict()


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
        rows = Evaluation.objects.select_related("suite", "suite_version", "started_by").order_by("-created_at", "-id")
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



class EvaluationSuiteVersionListApi(ApiView):
    """A suite's versions, newest first: who changed it, when, and which tasks were added or removed."""

    permission_classes = [require_perm("evaluation.view_evaluationsuite")]

    @extend_schema(parameters=PAGE_PARAMETERS, responses=paginated(SuiteVersionOutput))
    def get(self, request, suite_id: int):
        suite = EvaluationSuite.objects.filter(pk=suite_id).first()
        if suite is None:
            raise Http404
        rows = SuiteVersion.objects.filter(suite=suite).select_related("created_by").order_by("-number")
        return page_response(self, request, rows, SuiteVersionOutput)


class EvaluationSuiteRemoveTasksApi(ApiView):
    """POST: remove tasks from a suite by name: one new version (a bundled suite follows its file: 409)."""

    permission_classes = [require_perm(EDIT_SUITES)]

    class RemoveTasksInput(serializers.Serializer):
        tasks = serializers.ListField(child=serializers.CharField(max_length=200), min_length=1, max_length=500,
                                      help_text="The names of the tasks to remove.")

    @extend_schema(request=RemoveTasksInput, responses={201: SuiteVersionOutput})
    def post(self, request, suite_id: int):
        data = validated(self.RemoveTasksInput, request.data)
        change = services.suite_tasks_change(user=request.user, suite_id=suite_id, remove=data["tasks"])
        return Response(SuiteVersionOutput(change.version).data, status=201)

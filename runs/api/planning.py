"""The external planner's API: what a run needs now, and the plans an agent submits.

GET  /api/runs/<id>/planning/?wait=25   what the runtime needs (long-poll up to 25 s)
POST /api/runs/<id>/plans/              a plan (or "no further plan") for one revision

Reading needs runs.view_run, like every other read of a run. Submitting needs
runs.start_run and being the run's owner, or runs.manage_all_runs (a lead operator): a plan
someone else submits runs with the intersection of the owner's and the submitter's permissions,
and the capabilities listed are the ones the reader could use in the plan they submit.

Under ASGI the long poll is held on the event loop by runs.api.planning_front; this view then
answers at once.
"""
from __future__ import annotations

from functools import partial

from asgiref.sync import async_to_sync, sync_to_async
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from core.api import ApiView, validated
from core.permissions import require_perm
from runs import services
from runs.models import PlanSubmission, Run
from runs.planning_hold import HELD_BY_FRONT, hold_until_change
from runs.planning_needs import planning_needs

MAX_WAIT_S = 25


class PlanningOutput(serializers.Serializer):
    run = serializers.IntegerField()
    needs_plan = serializers.BooleanField(help_text="True when the run waits for a plan for `revision` from you.")
    plan_submitted = serializers.BooleanField(help_text="A plan for `revision` arrived; the runtime is on it.")
    revision = serializers.IntegerField(help_text="The revision number the next plan gets (1 = first plan).")
    goal = serializers.CharField()
    completion = serializers.JSONField()
    reason_code = serializers.CharField(allow_null=True, help_text="Why a plan is needed; null for the first.")
    reason = serializers.CharField(allow_blank=True)
    validation_errors = serializers.ListField(child=serializers.DictField(),
                                              help_text="Why the previous plan was rejected: fix every one.")
    previous_plan = serializers.ListField(child=serializers.DictField())
    observations = serializers.ListField(child=serializers.DictField(),
                                         help_text="Recent normalized attempts, oldest first.")
    capabilities = serializers.ListField(child=serializers.DictField(),
                                         help_text="What a plan you submit may use: the capabilities both the "
                                                   "run's owner and you may use (name, description, schema, "
                                                   "side_effect, requires_approval).")
    budgets = serializers.JSONField()
    usage = serializers.JSONField()
    deadline_at = serializers.DateTimeField(allow_null=True)
    status = serializers.CharField()
    stop_reason = serializers.CharField(allow_null=True)
    stop_detail = serializers.CharField(allow_blank=True)


class SubmissionOutput(serializers.ModelSerializer):
    submitted_by = serializers.CharField(source="submitted_by.username")

    class Meta:
        model = PlanSubmission
        fields = ["run", "revision", "plan", "tokens", "cost", "reason_code", "reason", "no_further_plan",
                  "submitted_by", "submitted_at"]


class RunPlanningApi(ApiView):
    permission_classes = [require_perm("runs.view_run")]

    class PlanningQueryInput(serializers.Serializer):
        wait = serializers.IntegerField(required=False, default=0, min_value=0, max_value=MAX_WAIT_S,
                                        help_text="Long-poll: wait up to this many seconds for a plan to be needed "
                                                  "or the run to change.")

    query_input = PlanningQueryInput

    @extend_schema(parameters=[OpenApiParameter("wait", int, description="seconds to wait (0-25)")],
                   responses={200: PlanningOutput,
                              429: OpenApiResponse(description="Too many open long polls; Retry-After says when "
                                                               "to try again.")},
                   description="With `wait`, the answer comes when a plan is needed, the run changes or `wait` "
                               "seconds have passed. One user holds at most AGENTOPS_LONG_POLL_MAX_PER_USER open "
                               "long polls; one more is answered 429 with Retry-After.")
    def get(self, request, run_id: int):
        params = self.query
        run = get_object_or_404(Run.objects.select_related("owner"), pk=run_id)
        front = getattr(request._request, "scope", {}).get(HELD_BY_FRONT)
        if front is not None:   # served by the ASGI router: the front has held the wait on the event loop
            if front.refused is not None:
                raise front.refused
        elif params["wait"]:    # under WSGI: the same wait, in this request's thread
            async_to_sync(hold_until_change)(user_id=request.user.pk, run_id=run.pk, wait_s=params["wait"],
                                             db=partial(sync_to_async, thread_sensitive=True))
            run = get_object_or_404(Run.objects.select_related("owner"), pk=run_id)
        return Response(PlanningOutput(planning_needs(run, proposer_id=request.user.pk)).data)


class RunPlanSubmitApi(ApiView):
    permission_classes = [require_perm("runs.start_run")]

    # Named apart from the other views' Input: OpenAPI component names must be unique.
    class PlanSubmitInput(serializers.Serializer):
        revision = serializers.IntegerField(min_value=1, help_text="The revision GET .../planning/ asked for.")
        steps = serializers.ListField(child=serializers.JSONField(), required=False, max_length=1_000,
                                      help_text="[{id, capability, arguments, expected_outcome, depends_on}]; the "
                                                "runtime validates them like any plan.")
        no_further_plan = serializers.BooleanField(default=False)
        tokens = serializers.IntegerField(min_value=0, max_value=2_000_000_000, default=0,
                                          help_text="Tokens your model spent on this plan (counted in the budget).")
        cost = serializers.FloatField(min_value=0, max_value=1_000_000, default=0.0)
        reason_code = serializers.ChoiceField(choices=["dependency_failed", "new_information", "result_not_found",
                                                       "step_unnecessary", "path_blocked"],
                                              required=False, allow_blank=True, default="")
        reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=5_000)

        def validate(self, data):
            if data["no_further_plan"] and data.get("steps"):
                raise serializers.ValidationError({"steps": "Send steps or no_further_plan: true, not both."})
            if not data["no_further_plan"] and "steps" not in data:
                raise serializers.ValidationError({"steps": "A plan needs steps (or send no_further_plan: true)."})
            return data

    @extend_schema(request=PlanSubmitInput, responses={202: SubmissionOutput})
    def post(self, request, run_id: int):
        data = validated(self.PlanSubmitInput, request.data)
        get_object_or_404(Run, pk=run_id)
        submission = services.plan_submit(run_id=run_id, user=request.user, **data)
        return Response(SubmissionOutput(submission).data, status=202)

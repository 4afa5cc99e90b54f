"""Add runs to an evaluation suite over the API (review.datasets), as the run page and the runs
list's bulk action do."""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from core.api import ApiView, validated
from core.permissions import require_perm
from core.roles import EDIT_SUITES
from evaluation.suites import MAX_TASKS
from evaluation.verdicts import VerdictCode
from review import datasets
from review.models import ReviewQueue


class SuiteExpectationInput(serializers.Serializer):
    """The suite runs are added to, and the expected outcome they are added with."""
    suite = serializers.CharField(max_length=120, help_text="The suite's id or name.")
    create = serializers.BooleanField(  # type: ignore[assignment]
        default=False, help_text="Make a new suite when no suite has that name.")
    verdict_expected = serializers.ChoiceField(choices=[v.value for v in VerdictCode], required=False,
                                               allow_null=True, default=None)
    completion_expected = serializers.BooleanField(required=False, allow_null=True, default=None,
                                                   help_text="Should planning mode verify success?")
    note = serializers.CharField(max_length=datasets.MAX_NOTE, required=False, allow_blank=True, default="")
    expected_from_score = serializers.CharField(
        max_length=60, required=False, allow_blank=True, default="",
        help_text="A boolean score config ('was the run's outcome right?'): yes expects the run's own outcome, "
                  "no the opposite.")


class AddRunsInput(SuiteExpectationInput):
    runs = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=2**63 - 1), min_length=1,
                                 max_length=MAX_TASKS, help_text="Finished runs of this project.")


AddRunsOutput = inline_serializer("SuiteRunsAdded", {
    "suite": inline_serializer("SuiteRef", {"id": serializers.IntegerField(), "name": serializers.CharField(),
                                            "version": serializers.IntegerField()}),
    "version": serializers.IntegerField(allow_null=True, help_text="The new version; null when nothing was added."),
    "created": serializers.BooleanField(),
    "added": serializers.ListField(child=serializers.IntegerField()),
    "already_present": serializers.ListField(child=serializers.IntegerField()),
    "refused": serializers.ListField(child=inline_serializer("RunRefused", {
        "run": serializers.IntegerField(), "reason": serializers.CharField()})),
})


class SuiteAddRunsApi(ApiView):
    """POST: the runs become tasks of the suite, with the expected outcome: one new version (201), or
    200 with version null when every run is in the suite already. All or nothing: a run not found is
    404, a run that cannot become a task (still live, no completion criteria) 409."""

    permission_classes = [require_perm(EDIT_SUITES)]

    @extend_schema(request=AddRunsInput, responses={201: AddRunsOutput, 200: AddRunsOutput})
    def post(self, request):
        data = validated(AddRunsInput, request.data)
        expectation = datasets.expectation_from(data)
        result = datasets.suite_add_runs(user=request.user, suite=data["suite"], run_ids=data["runs"],
                                         expectation=expectation, create=data["create"])
        return Response(result.as_dict(), status=201 if result.version else 200)


class QueueAddToSuiteInput(SuiteExpectationInput):
    state = serializers.ChoiceField(choices=list(datasets.QUEUE_STATES), default="done",
                                    help_text="done: the done items; all; disagreement: the four-eyes items whose "
                                              "reviewers disagreed")


class QueueAddToSuiteApi(ApiView):
    """POST: the runs of the queue's items become tasks of the suite, in one new version (201; 200 with
    version null when every run is in it already); a run that cannot become a task is listed in `refused`."""

    permission_classes = [require_perm(EDIT_SUITES)]

    @extend_schema(request=QueueAddToSuiteInput, responses={201: AddRunsOutput, 200: AddRunsOutput})
    def post(self, request, queue_id: int):
        queue = get_object_or_404(ReviewQueue, pk=queue_id)
        data = validated(QueueAddToSuiteInput, request.data)
        expectation = datasets.expectation_from(data)
        result = datasets.suite_add_queue(user=request.user, queue=queue, state=data["state"], suite=data["suite"],
                                          expectation=expectation, create=data["create"])
        return Response(result.as_dict(), status=201 if result.version else 200)

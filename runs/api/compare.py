"""`GET /api/runs/compare/?a=<id>&b=<id>`: two runs side by side, as the compare page shows them.

The page and this view read through the same runs.trace.compare_page; these serializers only
document its shape for OpenAPI (tests/runs/test_compare_api.py checks an answer against them).
"""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from core.api import ApiView
from core.permissions import require_perm
from runs.trace.compare_page import (
    MAX_ROWS_PER_PAGE,
    ROWS_PER_PAGE,
    RunMissing,
    compare_dict,
    compare_page,
    compare_runs_get,
)


class DiffLineOutput(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["added", "removed", "context", "hunk"])
    text = serializers.CharField()


class ValueDiffOutput(serializers.Serializer):
    same = serializers.BooleanField(allow_null=True, help_text="null: only the first part of a value cut off at "
                                                               "the cap was compared, and it was alike.")
    lines = DiffLineOutput(many=True, help_text="A unified diff of A's against B's canonical pretty JSON.")
    notes = serializers.ListField(child=serializers.CharField(), help_text="Values cut off, diff lines not shown.")


class CompareAttemptOutput(serializers.Serializer):
    uid = serializers.CharField()
    label = serializers.CharField(help_text="As the trace shows it: r2·s1#1.")  # type: ignore[assignment]
    number = serializers.IntegerField()
    kind = serializers.CharField()
    status = serializers.CharField()
    error_code = serializers.CharField(allow_null=True)
    latency_s = serializers.FloatField()
    side_effect = serializers.CharField()
    repeated_without_progress = serializers.BooleanField()


class CompareStepOutput(serializers.Serializer):
    revision = serializers.IntegerField()
    key = serializers.CharField(help_text="The step's id within its plan.")
    index = serializers.IntegerField()
    label = serializers.CharField(help_text="r2·s1")  # type: ignore[assignment]
    capability = serializers.CharField()
    status = serializers.CharField()
    arguments_hash = serializers.CharField()
    attempt_count = serializers.IntegerField()
    attempts = CompareAttemptOutput(many=True, help_text="The first attempts (at most 10).")
    last = CompareAttemptOutput(allow_null=True, help_text="The step's outcome: its last attempt.")


class CompareRowOutput(serializers.Serializer):
    position = serializers.IntegerField()
    match = serializers.ChoiceField(choices=["matched", "only_a", "only_b"])
    differs = serializers.BooleanField(help_text="Unmatched, or other arguments, outcome or number of attempts.")
    a = CompareStepOutput(allow_null=True)
    b = CompareStepOutput(allow_null=True)
    arguments = ValueDiffOutput()
    outcome = ValueDiffOutput(help_text="The last attempts' outputs; for a failure its status, code and message.")


class CompareRevisionChangeOutput(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["added", "removed", "changed", "note"])
    text = serializers.CharField()


class CompareRevisionOutput(serializers.Serializer):
    number = serializers.IntegerField()
    accepted = serializers.BooleanField()
    reason_code = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)
    steps = serializers.IntegerField()
    changes = CompareRevisionChangeOutput(many=True)
    tokens = serializers.IntegerField()
    cost = serializers.FloatField()
    created_at = serializers.CharField()


class CompareRunOutput(serializers.Serializer):
    id = serializers.IntegerField()
    goal = serializers.CharField()
    status = serializers.CharField()
    stop_reason = serializers.CharField(allow_null=True)
    stop_detail = serializers.CharField(allow_blank=True)
    stall_kind = serializers.CharField(allow_blank=True)
    stop_attempt = serializers.CharField(allow_null=True, help_text="The label of the attempt the run stopped on.")
    planner = serializers.CharField()
    owner = serializers.CharField()
    labels = serializers.DictField(child=serializers.CharField())
    created_at = serializers.CharField()
    started_at = serializers.CharField(allow_null=True)
    finished_at = serializers.CharField(allow_null=True)
    plans = serializers.IntegerField(help_text="Every plan received, the first included.")
    revisions = CompareRevisionOutput(many=True, help_text="The first 50 plans.")
    revisions_not_shown = serializers.IntegerField()


class CompareUsageOutput(serializers.Serializer):
    name = serializers.CharField()
    label = serializers.CharField()  # type: ignore[assignment]
    a = serializers.FloatField(allow_null=True)
    b = serializers.FloatField(allow_null=True)
    delta = serializers.FloatField(allow_null=True, help_text="b - a")


class CompareSummaryOutput(serializers.Serializer):
    rows = serializers.IntegerField()
    matched = serializers.IntegerField()
    only_a = serializers.IntegerField()
    only_b = serializers.IntegerField()
    differing = serializers.IntegerField()


class CompareOutput(serializers.Serializer):
    a = CompareRunOutput()
    b = CompareRunOutput()
    usage = CompareUsageOutput(many=True)
    summary = CompareSummaryOutput(help_text="Over every aligned row, not only this page's.")
    differences_only = serializers.BooleanField()
    page = serializers.IntegerField()
    pages = serializers.IntegerField()
    count = serializers.IntegerField(help_text="Rows (of those that differ, with differences=true).")
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = CompareRowOutput(many=True, help_text="The page's aligned rows.")


class RunCompareApi(ApiView):
    permission_classes = [require_perm("runs.view_run")]

    class CompareInput(serializers.Serializer):
        a = serializers.IntegerField(min_value=1, max_value=2**63 - 1, help_text="The id of run A.")
        b = serializers.IntegerField(min_value=1, max_value=2**63 - 1, help_text="The id of run B.")
        differences = serializers.BooleanField(default=False, help_text="Only the rows that differ.")
        page = serializers.IntegerField(min_value=1, default=1, help_text="Page of aligned rows, from 1.")
        page_size = serializers.IntegerField(min_value=1, max_value=MAX_ROWS_PER_PAGE, default=ROWS_PER_PAGE,
                                             help_text=f"Rows per page (default {ROWS_PER_PAGE}, at most "
                                                       f"{MAX_ROWS_PER_PAGE}).")

        def validate(self, attrs):
            if attrs["a"] == attrs["b"]:
                raise serializers.ValidationError({"b": "a and b are the same run: choose two different runs."})
            return attrs

    query_input = CompareInput

    @extend_schema(operation_id="runs_compare", parameters=[CompareInput], responses=CompareOutput)
    def get(self, request):
        query = self.query
        try:
            a, b = compare_runs_get(a_id=query["a"], b_id=query["b"])
        except RunMissing as exc:
            raise NotFound(exc.message) from None
        page = compare_page(a, b, page_number=query["page"], per_page=query["page_size"],
                            differences_only=query["differences"])
        body = compare_dict(page)
        url = request.build_absolute_uri()
        rows = page.rows_page
        body["next"] = replace_query_param(url, "page", rows.next_page_number()) if rows.has_next() else None
        body["previous"] = (replace_query_param(url, "page", rows.previous_page_number())
                            if rows.has_previous() else None)
        return Response(body)

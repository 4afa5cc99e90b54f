"""Across runs over the API: tool calls (keyset pages) and failure groups, the pages' selectors."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from core.api import ApiView
from core.choices import ErrorCategory, ErrorCode, ObservationStatus, SideEffectStatus
from core.errors import InvalidInput
from core.permissions import require_perm
from runs import explorer, failures
from runs.api.fields import LabelFiltersField, SearchQueryField
from runs.pagination import InvalidCursor


class CallOutput(serializers.Serializer):
    uid = serializers.CharField()
    run = serializers.IntegerField()
    label = serializers.CharField(help_text="As the trace shows it: r2·s1#1.")  # type: ignore[assignment]
    capability = serializers.CharField()
    kind = serializers.CharField()
    started_at = serializers.DateTimeField()
    latency_s = serializers.FloatField()
    status = serializers.ChoiceField(choices=ObservationStatus.choices)
    error_code = serializers.CharField(allow_blank=True)
    error_category = serializers.CharField(allow_blank=True)
    error_message = serializers.CharField(allow_blank=True)
    http_status = serializers.IntegerField(allow_null=True)
    side_effect = serializers.ChoiceField(choices=SideEffectStatus.choices)
    link = serializers.CharField(help_text="The attempt in its run's trace page.")


class CallPageOutput(serializers.Serializer):
    count = serializers.IntegerField(allow_null=True, help_text="Exact up to 1,000; above, an estimate (PostgreSQL) or null.")
    count_exact = serializers.BooleanField()
    next = serializers.CharField(allow_null=True, help_text="Cursor for the next page (pass as `after`).")
    previous = serializers.CharField(allow_null=True, help_text="Cursor for the previous page (pass as `before`).")
    results = CallOutput(many=True)


def call_dict(a) -> dict:
    return {"uid": a.uid, "run": a.run_id, "label": f"r{a.step.revision.number}·{a.step.key}#{a.number}",
            "capability": a.capability_name, "kind": a.kind, "started_at": a.started_at, "latency_s": a.latency_s,
            "status": a.status, "error_code": a.error_code, "error_category": a.error_category,
            "error_message": a.error_message, "http_status": a.http_status, "side_effect": a.side_effect_status,
            "link": f"/runs/{a.run_id}/?attempt={a.uid}#attempt-{a.uid}"}


class CallListApi(ApiView):
    """Every tool call (attempt) across runs, newest first, in keyset pages."""
    permission_classes = [require_perm("runs.view_run")]

    class CallFilterInput(serializers.Serializer):
        q = SearchQueryField(required=False,
                             help_text='arguments, outputs and errors: words and "quoted phrases", all must match')
        capability = serializers.CharField(required=False, max_length=80)
        status = serializers.ChoiceField(choices=ObservationStatus.choices, required=False)
        error_code = serializers.ChoiceField(choices=ErrorCode.choices, required=False)
        error_category = serializers.ChoiceField(choices=ErrorCategory.choices, required=False)
        http_status = serializers.IntegerField(required=False, min_value=100, max_value=599)
        latency_min_s = serializers.FloatField(required=False, min_value=0)
        latency_max_s = serializers.FloatField(required=False, min_value=0)
        side_effect_status = serializers.ChoiceField(choices=SideEffectStatus.choices, required=False)
        label = LabelFiltersField(required=False,  # type: ignore[assignment]
                                  help_text="run label key=value (or key); repeat for several, all must match")
        owner = serializers.CharField(required=False, max_length=150, help_text="the run owner's username")
        agent = serializers.CharField(required=False, max_length=100, help_text="the gateway agent's name")
        started_from = serializers.DateTimeField(required=False)
        started_to = serializers.DateTimeField(required=False)
        run = serializers.IntegerField(required=False, min_value=1)
        fingerprint = serializers.RegexField(r"^[0-9a-f]{32}$", required=False, help_text="a failure group's")
        evaluation_runs = serializers.BooleanField(required=False, default=False,
                                                   help_text="include the calls of evaluation runs")
        page_size = serializers.IntegerField(required=False, min_value=1, max_value=500, default=50)
        after = serializers.CharField(required=False, max_length=200)
        before = serializers.CharField(required=False, max_length=200)

    query_input = CallFilterInput

    @extend_schema(operation_id="calls_list", parameters=[CallFilterInput], responses=CallPageOutput)
    def get(self, request):
        query = dict(self.query)
        paging = {k: query.pop(k, None) for k in ("page_size", "after", "before")}
        if "label" in query:
            query["labels"] = tuple(query.pop("label"))
        try:
            page = explorer.attempt_page(filters=explorer.AttemptFilters(**query), per_page=paging["page_size"] or 50,
                                         after=paging["after"], before=paging["before"])
        except InvalidCursor as exc:
            raise InvalidInput(str(exc), fields={"after" if paging["after"] else "before": "invalid cursor"}) from None
        return Response({"count": page.count, "count_exact": page.count_exact,
                         "next": page.next_cursor if page.has_next else None,
                         "previous": page.previous_cursor if page.has_previous else None,
                         "results": [call_dict(a) for a in page.object_list]})


class FailureGroupOutput(serializers.Serializer):
    fingerprint = serializers.CharField()
    capability = serializers.CharField(source="capability_name")
    error_code = serializers.CharField()
    error_category = serializers.CharField(allow_blank=True)
    http_status = serializers.IntegerField(allow_null=True)
    message = serializers.CharField(allow_blank=True, help_text="normalized: numbers, ids and UUIDs taken out")
    first_seen = serializers.DateTimeField()
    last_seen = serializers.DateTimeField()
    attempts = serializers.IntegerField()
    runs = serializers.IntegerField(help_text="runs affected")
    trend = serializers.ListField(child=serializers.IntegerField(),
                                  help_text=f"failures per day (UTC), the last {failures.TREND_DAYS} days, oldest first")
    new = serializers.BooleanField(help_text="only runs still live have hit it so far")
    calls = serializers.CharField(help_text="the group's calls in the explorer")


class FailureGroupPageOutput(serializers.Serializer):
    page = serializers.IntegerField()
    has_next = serializers.BooleanField()
    results = FailureGroupOutput(many=True)


class FailureGroupListApi(ApiView):
    """Failed calls across runs grouped by fingerprint (runs.failures)."""
    permission_classes = [require_perm("runs.view_run")]

    class GroupFilterInput(serializers.Serializer):
        capability = serializers.CharField(required=False, max_length=80)
        error_code = serializers.ChoiceField(choices=ErrorCode.choices, required=False)
        error_category = serializers.ChoiceField(choices=ErrorCategory.choices, required=False)
        http_status = serializers.IntegerField(required=False, min_value=100, max_value=599)
        seen_within_days = serializers.IntegerField(required=False, min_value=1, max_value=3650)
        sort = serializers.ChoiceField(choices=list(failures.GROUP_SORTS), required=False)
        page = serializers.IntegerField(required=False, min_value=1, max_value=100_000, default=1)
        page_size = serializers.IntegerField(required=False, min_value=1, max_value=200, default=50)

    query_input = GroupFilterInput

    @extend_schema(operation_id="failure_groups_list", parameters=[GroupFilterInput], responses=FailureGroupPageOutput)
    def get(self, request):
        query = dict(self.query)
        number, size = query.pop("page", 1), query.pop("page_size", 50)
        groups, more = failures.group_list(filters=failures.GroupFilters(**query), limit=size,
                                           offset=(number - 1) * size)
        return Response({"page": number, "has_next": more, "results": FailureGroupOutput(groups, many=True).data})

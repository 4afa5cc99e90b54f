"""Usage and cost over the API: the usage page's figures (runs.dashboard.usage), for the same readers."""
from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from core.api import ApiView
from core.permissions import require_perm
from runs.dashboard import usage


class UsageQueryInput(serializers.Serializer):
    window = serializers.ChoiceField(choices=list(usage.WINDOWS), default=usage.DEFAULT_WINDOW)
    group = serializers.ChoiceField(choices=list(usage.GROUPS), default=usage.DEFAULT_GROUP,
                                    help_text="label: every label at once (a run counts under each), or with "
                                              "label_key, that key's values and the runs without it")
    label_key = serializers.CharField(required=False, default="", allow_blank=True, max_length=63,
                                      help_text="with group=label: split the runs by this key's values")

    def validate(self, data):
        problems = usage.query_problems(window=data["window"], group=data["group"], measure="tokens",
                                        label_key=data["label_key"])
        if problems:
            raise serializers.ValidationError(problems)
        return data


class UsageRowOutput(serializers.Serializer):
    key = serializers.CharField(help_text="the group's stored value: a model, a user id, an agent id (0: none), "
                                          "a capability (\"\": no tool call), or key=value (\"\": the runs "
                                          "without label_key)")
    name = serializers.CharField(source="label", help_text="as the page shows it (a username, an agent's name, ...)")
    runs = serializers.IntegerField()
    tokens = serializers.FloatField(help_text="whole for every grouping but capability (a share of each run's)")
    cost = serializers.FloatField()
    calls = serializers.IntegerField(help_text="tool calls (attempts, for capability)")
    tokens_by_bucket = serializers.ListField(child=serializers.FloatField())
    cost_by_bucket = serializers.ListField(child=serializers.FloatField())


class UsageOutput(serializers.Serializer):
    window = serializers.CharField()
    group = serializers.CharField()
    label_key = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    bucket_starts = serializers.ListField(child=serializers.DateTimeField())
    overlapping = serializers.BooleanField(help_text="true when a run may count in several rows (every label)")
    rows = UsageRowOutput(many=True)
    totals = UsageRowOutput()
    live = serializers.DictField(help_text="runs still going: {runs, tokens, cost} so far, not in the rows")


class UsageApi(ApiView):
    """Tokens, cost, runs and tool calls of the runs finished in a window, by one grouping, per bucket."""

    permission_classes = [require_perm("runs.view_run")]
    query_input = UsageQueryInput

    @extend_schema(operation_id="usage_report", parameters=[UsageQueryInput], responses=UsageOutput)
    def get(self, request):
        report = usage.usage_report(window_key=self.query["window"], group=self.query["group"],
                                    label_key=self.query["label_key"], now=timezone.now())
        data = {"window": report.window.key, "group": report.group, "label_key": report.label_key,
                "start": report.start, "end": report.end, "bucket_starts": report.bucket_starts,
                "overlapping": report.overlapping, "rows": report.rows, "totals": report.totals, "live": report.live}
        return Response(UsageOutput(data).data)

"""GET /api/review/score-insights/: a score config's distribution and trend, overall and by group."""
from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from core.api import ApiView
from core.permissions import require_perm
from review import insights
from review.api import ScoreConfigOutput


class ScoreInsightsQueryInput(serializers.Serializer):
    config = serializers.CharField(max_length=60, help_text="The score config's name.")
    window = serializers.ChoiceField(choices=list(insights.WINDOWS), default=insights.DEFAULT_WINDOW)
    group = serializers.ChoiceField(choices=list(insights.GROUPS), default=insights.DEFAULT_GROUP,
                                    help_text="capability: an attempt's score under its capability, a run's under "
                                              "each capability the run called; label: needs label_key")
    label_key = serializers.CharField(required=False, default="", allow_blank=True, max_length=63,
                                      help_text="with group=label: split the scores by this key's values")

    def validate(self, data):
        problems = insights.query_problems(window=data["window"], group=data["group"], label_key=data["label_key"])
        if problems:
            raise serializers.ValidationError(problems)
        return data


class FiguresOutput(serializers.Serializer):
    key = serializers.CharField(help_text="the group's stored value: a capability, a planner, an agent id (0: "
                                          "none), a label value (\"\": runs without the key)")
    name = serializers.CharField(source="label", help_text="as the page shows it")
    n = serializers.IntegerField(help_text="scores")
    mean = serializers.FloatField(allow_null=True, help_text="numeric: the mean; boolean: the share of yes; "
                                                             "categorical: the headline category's share")
    bins = serializers.ListField(child=serializers.IntegerField(), help_text="scores per bin (the report's bins)")
    n_by_bucket = serializers.ListField(child=serializers.IntegerField())
    trend = serializers.ListField(child=serializers.FloatField(allow_null=True),
                                  help_text="`mean` per time bucket (null: no score in it)")


class ScoreInsightsOutput(serializers.Serializer):
    config = ScoreConfigOutput()
    window = serializers.CharField(source="window.key")
    group = serializers.CharField()
    label_key = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    bucket_starts = serializers.ListField(child=serializers.DateTimeField())
    bins = serializers.ListField(source="bin_labels", child=serializers.CharField(),
                                 help_text="numeric: ten equal ranges; boolean: no, yes; categorical: the "
                                           "categories, then (other) for values the config no longer has")
    headline = serializers.CharField(help_text="categorical: the most frequent category (what `mean` is the share of)")
    overlapping = serializers.BooleanField(help_text="true when a score may count in several groups (capability)")
    overall = FiguresOutput()
    groups = FiguresOutput(many=True)
    more_groups = serializers.IntegerField(help_text=f"groups beyond the {insights.MAX_GROUPS} most frequent")


class ScoreInsightsApi(ApiView):
    """A score config's scores written in a window: their spread and trend, overall and by one grouping."""

    permission_classes = [require_perm("review.view_score")]
    query_input = ScoreInsightsQueryInput

    @extend_schema(operation_id="review_score_insights", parameters=[ScoreInsightsQueryInput],
                   responses=ScoreInsightsOutput)
    def get(self, request):
        report = insights.score_insights(config=insights.config_named(self.query["config"]), window_key=self.query["window"],
                                         group=self.query["group"], label_key=self.query["label_key"],
                                         now=timezone.now())
        return Response(ScoreInsightsOutput(report).data)

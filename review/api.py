"""Score configs, root causes, scores, comments and incident summaries over the API: the pages' services."""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.response import Response

from core.api import PAGE_PARAMETERS, ApiView, page_response, paginated, validated
from core.permissions import MethodPermission
from core.roles import MANAGE_REVIEW_SETTINGS, REVIEW_RUNS
from review import selectors, services
from review.models import (
    Annotation,
    IncidentStatus,
    IncidentSummary,
    RootCauseCategory,
    Score,
    ScoreConfig,
    ScoreKind,
    ScoreSource,
)
from runs.models import Run

# -- outputs ---------------------------------------------------------------------------------------


class ScoreConfigOutput(serializers.ModelSerializer):
    class Meta:
        model = ScoreConfig
        fields = ["id", "name", "description", "kind", "min_value", "max_value", "categories", "enabled", "builtin",
                  "created_at", "updated_at"]


class RootCauseOutput(serializers.ModelSerializer):
    class Meta:
        model = RootCauseCategory
        fields = ["id", "name", "description", "enabled", "created_at"]


@extend_schema_field(OpenApiTypes.ANY)
class AnyValue(serializers.JSONField):
    """A score's value: a number (numeric), true or false (boolean), or a category's name (categorical)."""


class ScoreOutput(serializers.Serializer):
    """Read from a review.selectors.ShownScore."""
    id = serializers.IntegerField(source="score.pk")
    config = serializers.CharField(source="score.config.name")
    kind = serializers.ChoiceField(source="score.config.kind", choices=ScoreKind.choices)
    run = serializers.IntegerField(source="score.run_id")
    attempt = serializers.CharField(source="score.attempt.uid", allow_null=True, default=None,
                                    help_text="The attempt's uid; null for a score of the whole run.")
    value = AnyValue()
    stale = serializers.BooleanField(help_text="The value no longer fits its config (changed since).")
    source = serializers.ChoiceField(source="score.source", choices=ScoreSource.choices)  # type: ignore[assignment]
    source_name = serializers.CharField(source="score.source_name")
    author = serializers.CharField(source="score.author.username", allow_null=True, default=None)
    comment = serializers.CharField(source="score.comment")
    created_at = serializers.DateTimeField(source="score.created_at")
    updated_at = serializers.DateTimeField(source="score.updated_at")


class AnnotationOutput(serializers.Serializer):
    """Read from a review.selectors.ShownAnnotation."""
    id = serializers.IntegerField(source="annotation.pk")
    run = serializers.IntegerField(source="annotation.run_id")
    attempt = serializers.CharField(source="annotation.attempt.uid", allow_null=True, default=None)
    author = serializers.CharField(source="annotation.author.username", allow_null=True, default=None)
    body = serializers.CharField(source="annotation.body", help_text="Markdown, as written.")
    html = serializers.CharField(help_text="The body rendered and sanitized, as the trace shows it.")
    mentions = serializers.SerializerMethodField(help_text="The usernames the comment mentions.")
    created_at = serializers.DateTimeField(source="annotation.created_at")
    updated_at = serializers.DateTimeField(source="annotation.updated_at")

    def get_mentions(self, shown) -> list[str]:
        return [user.get_username() for user in shown.annotation.mentions.all()]


class IncidentOutput(serializers.Serializer):
    """Read from a review.selectors.ShownIncident."""
    run = serializers.IntegerField(source="incident.run_id")
    status = serializers.ChoiceField(source="incident.status", choices=IncidentStatus.choices)
    root_cause = serializers.CharField(source="incident.root_cause.name", allow_null=True, default=None)
    owner = serializers.CharField(source="incident.owner.username", allow_null=True, default=None)
    summary = serializers.CharField(source="incident.summary")
    html = serializers.CharField()
    links = serializers.ListField(source="incident.links", child=serializers.URLField())
    updated_by = serializers.CharField(source="incident.updated_by.username", allow_null=True, default=None)
    created_at = serializers.DateTimeField(source="incident.created_at")
    updated_at = serializers.DateTimeField(source="incident.updated_at")


# -- inputs ----------------------------------------------------------------------------------------

class ScoreConfigInput(serializers.Serializer):
    name = serializers.CharField(max_length=60)
    description = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)
    kind = serializers.ChoiceField(choices=ScoreKind.choices)
    min_value = serializers.FloatField(required=False, allow_null=True, default=None)
    max_value = serializers.FloatField(required=False, allow_null=True, default=None)
    categories = serializers.ListField(child=serializers.CharField(max_length=60), required=False, default=list,
                                       max_length=services.MAX_CATEGORIES)
    enabled = serializers.BooleanField(default=True)


class RootCauseInput(serializers.Serializer):
    name = serializers.CharField(max_length=80)
    description = serializers.CharField(max_length=300, required=False, default="", allow_blank=True)
    enabled = serializers.BooleanField(default=True)


class ScoreInput(serializers.Serializer):
    config = serializers.CharField(max_length=60, help_text="The score config's name.")
    value = AnyValue(help_text="A number (numeric), true or false (boolean), or a category's name (categorical).")
    comment = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)
    attempt = serializers.CharField(max_length=32, required=False, default="",
                                    help_text="An attempt's uid, to score that attempt rather than the run.")
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=[ScoreSource.PERSON, ScoreSource.CODE], default=ScoreSource.PERSON,
        help_text="code: written by a program, named by source_name.")
    source_name = serializers.CharField(max_length=80, required=False, default="", allow_blank=True)


class ScoreEditInput(serializers.Serializer):
    value = AnyValue()
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True)


class AnnotationInput(serializers.Serializer):
    body = serializers.CharField(max_length=10_000, help_text="Markdown; @username mentions notify.")
    attempt = serializers.CharField(max_length=32, required=False, default="")


class AnnotationEditInput(serializers.Serializer):
    body = serializers.CharField(max_length=10_000)


class IncidentInput(serializers.Serializer):
    status = serializers.ChoiceField(choices=IncidentStatus.choices, default=IncidentStatus.OPEN)
    root_cause = serializers.CharField(max_length=80, required=False, allow_null=True, allow_blank=True, default=None,
                                       help_text="A root-cause category's name.")
    owner = serializers.CharField(max_length=150, required=False, allow_null=True, allow_blank=True, default=None,
                                  help_text="A username.")
    summary = serializers.CharField(max_length=10_000, required=False, default="", allow_blank=True)
    links = serializers.ListField(child=serializers.CharField(max_length=2000), required=False, default=list,
                                  max_length=services.MAX_LINKS, help_text="http(s) URLs.")


# -- views -----------------------------------------------------------------------------------------

class ScoreConfigListApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"GET": "review.view_scoreconfig", "POST": MANAGE_REVIEW_SETTINGS}

    @extend_schema(operation_id="review_score_configs_list", responses=ScoreConfigOutput(many=True))
    def get(self, request):
        return Response(ScoreConfigOutput(ScoreConfig.objects.order_by("name"), many=True).data)

    @extend_schema(request=ScoreConfigInput, responses={201: ScoreConfigOutput})
    def post(self, request):
        config = services.score_config_save(user=request.user, **validated(ScoreConfigInput, request.data))
        return Response(ScoreConfigOutput(config).data, status=201)


class ScoreConfigDetailApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"GET": "review.view_scoreconfig", "PUT": MANAGE_REVIEW_SETTINGS,
                      "DELETE": MANAGE_REVIEW_SETTINGS}

    @extend_schema(responses=ScoreConfigOutput)
    def get(self, request, config_id: int):
        return Response(ScoreConfigOutput(get_object_or_404(ScoreConfig, pk=config_id)).data)

    @extend_schema(request=ScoreConfigInput, responses=ScoreConfigOutput)
    def put(self, request, config_id: int):
        get_object_or_404(ScoreConfig, pk=config_id)
        config = services.score_config_save(user=request.user, config_id=config_id,
                                            **validated(ScoreConfigInput, request.data))
        return Response(ScoreConfigOutput(config).data)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, config_id: int):
        get_object_or_404(ScoreConfig, pk=config_id)
        services.score_config_delete(user=request.user, config_id=config_id)
        return Response(status=204)


class RootCauseListApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"GET": "review.view_rootcausecategory", "POST": MANAGE_REVIEW_SETTINGS}

    @extend_schema(operation_id="review_root_causes_list", responses=RootCauseOutput(many=True))
    def get(self, request):
        return Response(RootCauseOutput(RootCauseCategory.objects.order_by("name"), many=True).data)

    @extend_schema(request=RootCauseInput, responses={201: RootCauseOutput})
    def post(self, request):
        category = services.root_cause_save(user=request.user, **validated(RootCauseInput, request.data))
        return Response(RootCauseOutput(category).data, status=201)


class RootCauseDetailApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"GET": "review.view_rootcausecategory", "PUT": MANAGE_REVIEW_SETTINGS,
                      "DELETE": MANAGE_REVIEW_SETTINGS}

    @extend_schema(responses=RootCauseOutput)
    def get(self, request, category_id: int):
        return Response(RootCauseOutput(get_object_or_404(RootCauseCategory, pk=category_id)).data)

    @extend_schema(request=RootCauseInput, responses=RootCauseOutput)
    def put(self, request, category_id: int):
        get_object_or_404(RootCauseCategory, pk=category_id)
        category = services.root_cause_save(user=request.user, category_id=category_id,
                                            **validated(RootCauseInput, request.data))
        return Response(RootCauseOutput(category).data)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, category_id: int):
        get_object_or_404(RootCauseCategory, pk=category_id)
        services.root_cause_delete(user=request.user, category_id=category_id)
        return Response(status=204)


class ScoreFilterInput(serializers.Serializer):
    config = serializers.CharField(max_length=60, required=False, help_text="Only this score config's scores.")
    attempt = serializers.CharField(max_length=32, required=False,
                                    help_text="Only this attempt's scores; `run` for the run's own.")
    source = serializers.ChoiceField(choices=ScoreSource.choices, required=False)  # type: ignore[assignment]


class RunScoreListApi(ApiView):
    """A run's scores (its attempts' included), oldest first; POST scores the run or one attempt (again: an edit)."""
    permission_classes = [MethodPermission]
    required_perms = {"GET": "review.view_score", "POST": REVIEW_RUNS}
    query_input = ScoreFilterInput

    @extend_schema(operation_id="review_run_scores_list", parameters=[ScoreFilterInput, *PAGE_PARAMETERS],
                   responses=paginated(ScoreOutput))
    def get(self, request, run_id: int):
        run = get_object_or_404(Run, pk=run_id)
        scores = selectors.scores_of(run, **self.query)
        return page_response(self, request, scores, ScoreOutput, item=selectors.shown_score)

    @extend_schema(request=ScoreInput, responses={201: ScoreOutput, 200: ScoreOutput})
    def post(self, request, run_id: int):
        run = get_object_or_404(Run, pk=run_id)
        data = validated(ScoreInput, request.data)
        score, created = services.score_set(user=request.user, run=run, config=data["config"], value=data["value"],
                                            comment=data["comment"], attempt_uid=data["attempt"] or None,
                                            source=data["source"], source_name=data["source_name"])
        return Response(ScoreOutput(selectors.shown_score(score)).data, status=201 if created else 200)


class ScoreDetailApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"GET": "review.view_score", "PATCH": REVIEW_RUNS}

    @extend_schema(responses=ScoreOutput)
    def get(self, request, score_id: int):
        return Response(ScoreOutput(selectors.shown_score(get_object_or_404(Score, pk=score_id))).data)

    @extend_schema(request=ScoreEditInput, responses=ScoreOutput)
    def patch(self, request, score_id: int):
        get_object_or_404(Score, pk=score_id)
        score = services.score_edit(user=request.user, score_id=score_id, **validated(ScoreEditInput, request.data))
        return Response(ScoreOutput(selectors.shown_score(score)).data)


class RunAnnotationListApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"GET": "review.view_annotation", "POST": REVIEW_RUNS}

    @extend_schema(operation_id="review_run_annotations_list", parameters=PAGE_PARAMETERS,
                   responses=paginated(AnnotationOutput))
    def get(self, request, run_id: int):
        run = get_object_or_404(Run, pk=run_id)
        return page_response(self, request, selectors.annotations_of(run), AnnotationOutput,
                             item=selectors.shown_annotation)

    @extend_schema(request=AnnotationInput, responses={201: AnnotationOutput})
    def post(self, request, run_id: int):
        run = get_object_or_404(Run, pk=run_id)
        data = validated(AnnotationInput, request.data)
        annotation = services.annotation_add(user=request.user, run=run, body=data["body"],
                                             attempt_uid=data["attempt"] or None)
        return Response(AnnotationOutput(selectors.shown_annotation(annotation)).data, status=201)


class AnnotationDetailApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"GET": "review.view_annotation", "PATCH": REVIEW_RUNS}

    @extend_schema(responses=AnnotationOutput)
    def get(self, request, annotation_id: int):
        return Response(AnnotationOutput(selectors.shown_annotation(get_object_or_404(Annotation, pk=annotation_id))).data)

    @extend_schema(request=AnnotationEditInput, responses=AnnotationOutput)
    def patch(self, request, annotation_id: int):
        get_object_or_404(Annotation, pk=annotation_id)
        annotation = services.annotation_edit(user=request.user, annotation_id=annotation_id,
                                              **validated(AnnotationEditInput, request.data))
        return Response(AnnotationOutput(selectors.shown_annotation(annotation)).data)


class RunIncidentApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"GET": "review.view_incidentsummary", "PUT": REVIEW_RUNS}

    @extend_schema(responses=IncidentOutput)
    def get(self, request, run_id: int):
        incident = get_object_or_404(IncidentSummary, run_id=get_object_or_404(Run, pk=run_id).pk)
        return Response(IncidentOutput(selectors.shown_incident(incident)).data)

    @extend_schema(request=IncidentInput, responses=IncidentOutput)
    def put(self, request, run_id: int):
        run = get_object_or_404(Run, pk=run_id)
        incident = services.incident_save(user=request.user, run=run, **validated(IncidentInput, request.data))
        return Response(IncidentOutput(selectors.shown_incident(incident)).data)

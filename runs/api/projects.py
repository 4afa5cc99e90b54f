"""Projects in the API: GET /api/projects/ (the projects the caller holds, their roles and limits) and
PUT /api/projects/<slug>/limits/ (a superuser sets a project's quotas and default budgets)."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from core.api import ApiView, validated
from core.models import Project
from core.project_access import held_projects
from runs.quotas import project_limits_save


class LimitsInput(serializers.Serializer):
    default_budgets = serializers.JSONField(required=False, default=dict,
                                            help_text="Budgets a run starts with where its request names none "
                                                      "(the start API's budget names).")
    runs_per_day = serializers.JSONField(required=False, default=None, allow_null=True,
                                         help_text="Runs the project may start per UTC day; null: no quota.")
    tokens_per_day = serializers.JSONField(required=False, default=None, allow_null=True,
                                           help_text="Tokens the day's runs may spend; null: no quota.")
    cost_per_day = serializers.JSONField(required=False, default=None, allow_null=True,
                                         help_text="Cost the day's runs may spend; null: no quota.")


class ProjectOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    roles = serializers.ListField(child=serializers.CharField(), help_text="The caller's roles there.")
    acting = serializers.BooleanField(help_text="Whether this request acts in it.")
    default_budgets = serializers.JSONField()
    runs_per_day = serializers.IntegerField(allow_null=True)
    tokens_per_day = serializers.IntegerField(allow_null=True)
    cost_per_day = serializers.FloatField(allow_null=True)


def _output(project: Project, roles: list[str], acting: bool) -> dict:
    return {"slug": project.slug, "name": project.name, "roles": roles, "acting": acting,
            "default_budgets": project.default_budgets, "runs_per_day": project.quota_runs_per_day,
            "tokens_per_day": project.quota_tokens_per_day, "cost_per_day": project.quota_cost_per_day}


class ProjectListApi(ApiView):
    permission_classes = [IsAuthenticated]

    @extend_schema(operation_id="projects_list", responses=ProjectOutput(many=True))
    def get(self, request):
        held = {p["pk"]: p["roles"] for p in held_projects(request.user)}
        acting = getattr(request._request, "agentops_project_id", None)
        return Response([_output(p, held[p.pk], p.pk == acting) for p in Project.objects.filter(pk__in=held)])


class ProjectLimitsApi(ApiView):
    permission_classes = [IsAuthenticated]

    @extend_schema(request=LimitsInput, responses=ProjectOutput)
    def put(self, request, slug: str):
        project = Project.objects.filter(slug=slug).first()
        if project is None or not request.user.is_superuser:
            raise NotFound("No such project.")   # its existence is none of the caller's business
        values = validated(LimitsInput, request.data)
        project = project_limits_save(actor=request.user, project=project, **values)
        return Response(_output(project, [], project.pk == getattr(request._request, "agentops_project_id", None)))

"""Bulk actions by filter over the API (runs.bulk): preview, start, progress."""
from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from core.api import ApiView, validated
from core.choices import DecisionChannel
from core.permissions import require_perm
from runs import bulk
from runs.api.idempotency import IDEMPOTENCY_KEY, started
from runs.models_bulk import BulkAction, BulkActionKind

QUERY_HELP = ("The runs list's query string, as on /runs/ (e.g. `status=active&label=team=payments`); "
              "evaluation runs are left out unless it says `evaluation_runs=show` or `only`.")


class BulkPreviewOutput(serializers.Serializer):
    class RefusedOutput(serializers.Serializer):
        reason = serializers.CharField()
        runs = serializers.IntegerField()

    action = serializers.CharField()
    query = serializers.CharField(help_text="The filter, normalised.")
    selected = serializers.IntegerField(help_text="Runs the filter selects.")
    eligible = serializers.IntegerField(help_text="Of those, runs you may act on now.")
    refused = RefusedOutput(many=True, help_text="Why not the rest, with how many runs each.")
    approvals = serializers.DictField(child=serializers.CharField(), help_text=(
        "approve/reject: each pending request you may decide, with the hash it binds to now; send it back as "
        "`expected_hashes` to decide those requests, each only while it is unchanged."))


class BulkActionOutput(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username")
    parameters = serializers.SerializerMethodField()

    class Meta:
        model = BulkAction
        fields = ["id", "action", "query", "parameters", "created_by", "status", "total", "done", "skipped", "failed",
                  "problems", "cursor", "created_at", "updated_at", "finished_at"]

    def get_parameters(self, job) -> dict:
        return {k: v for k, v in job.parameters.items() if k != "expected"}


def _preview_dict(preview: bulk.Preview) -> dict:
    return {"action": preview.action, "query": preview.query, "selected": preview.selected,
            "eligible": preview.eligible, "refused": [{"reason": why, "runs": n} for why, n in preview.refused],
            "approvals": preview.approvals}


class BulkPreviewApi(ApiView):
    """What a bulk action would do: nothing changes."""
    permission_classes = [require_perm("runs.view_run")]

    class BulkPreviewInput(serializers.Serializer):
        action = serializers.ChoiceField(choices=BulkActionKind.choices)
        query = serializers.CharField(allow_blank=True, max_length=2000, help_text=QUERY_HELP)

    @extend_schema(request=BulkPreviewInput, responses=BulkPreviewOutput)
    def post(self, request):
        data = validated(self.BulkPreviewInput, request.data)
        return Response(_preview_dict(bulk.bulk_preview(user=request.user, **data)))


class BulkStartApi(ApiView):
    """Start a bulk action over the runs a filter selects; its progress at GET /api/runs/bulk/{id}/."""
    permission_classes = [require_perm("runs.view_run")]

    class BulkStartInput(serializers.Serializer):
        action = serializers.ChoiceField(choices=BulkActionKind.choices)
        query = serializers.CharField(allow_blank=True, max_length=2000, help_text=QUERY_HELP)
        parameters = serializers.JSONField(required=False, default=dict, help_text=(
            'label: {"add": {"key": "value"}, "remove": ["key"]}; approve/reject: {"comment": "..."}; '
            'suite: {"suite": id or name, "create": bool, "completion_expected": bool, "verdict_expected": ..., '
            '"note": "...", "expected_from_score": "a boolean score config"} (one new suite version for all); '
            "cancel and fork take none."))
        expected_hashes = serializers.DictField(child=serializers.CharField(max_length=64), required=False, help_text=(
            "approve/reject (required): the preview's `approvals`, request id to the hash you reviewed."))

    @extend_schema(request=BulkStartInput, parameters=[IDEMPOTENCY_KEY], responses={201: BulkActionOutput})
    def post(self, request):
        data = validated(self.BulkStartInput, request.data)
        return started(request, "runs.bulk", data,
                       lambda: bulk.bulk_start(user=request.user, channel=DecisionChannel.API, **data),
                       lambda job: BulkActionOutput(job).data)


class BulkDetailApi(ApiView):
    permission_classes = [require_perm("runs.view_run")]

    @extend_schema(responses=BulkActionOutput)
    def get(self, request, job_id: int):
        try:
            job = bulk.bulk_get(user=request.user, job_id=job_id)
        except BulkAction.DoesNotExist:
            raise Http404("No such bulk action.") from None
        return Response(BulkActionOutput(job).data)

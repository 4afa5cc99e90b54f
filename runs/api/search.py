"""Saved views of the runs list, per user, over the API (the same services as the page)."""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from core.api import ApiView, validated
from core.permissions import require_perm
from runs import search
from runs.models import SavedView


class SavedViewOutput(serializers.ModelSerializer):
    class Meta:
        model = SavedView
        fields = ["id", "name", "query", "created_at"]


class SavedViewListApi(ApiView):
    permission_classes = [require_perm("runs.view_run")]

    class SavedViewInput(serializers.Serializer):
        name = serializers.CharField(max_length=80)
        query = serializers.CharField(max_length=2000, allow_blank=True, default="",
                                      help_text="a runs-list query string, e.g. label=team%3Dpayments&status=stopped")

    @extend_schema(responses=SavedViewOutput(many=True))
    def get(self, request):
        return Response(SavedViewOutput(search.saved_views(user=request.user), many=True).data)

    @extend_schema(request=SavedViewInput, responses={201: SavedViewOutput})
    def post(self, request):
        view = search.saved_view_save(user=request.user, **validated(self.SavedViewInput, request.data))
        return Response(SavedViewOutput(view).data, status=201)


class SavedViewDetailApi(ApiView):
    permission_classes = [require_perm("runs.view_run")]

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, view_id: int):
        get_object_or_404(SavedView, pk=view_id, user=request.user)
        search.saved_view_delete(user=request.user, view_id=view_id)
        return Response(status=204)

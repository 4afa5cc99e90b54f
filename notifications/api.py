"""Notification rules, channels and deliveries over the API (the same services as the pages)."""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import PAGE_PARAMETERS, Pagination, paginated
from core.permissions import require_perm
from notifications import channels, services
from notifications.models import Channel, Delivery, Rule, RuleEvent


class ChannelOutput(serializers.ModelSerializer):
    url = serializers.SerializerMethodField()

    class Meta:
        model = Channel
        fields = ["id", "name", "url", "enabled", "created_at"]

    def get_url(self, channel) -> str:
        return channels.masked(channel.url)


class RuleOutput(serializers.ModelSerializer):
    channels = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)

    class Meta:
        model = Rule
        fields = ["id", "name", "event", "params", "labels", "channels", "enabled", "created_at", "updated_at"]


class DeliveryOutput(serializers.ModelSerializer):
    class Meta:
        model = Delivery
        fields = ["id", "rule", "rule_name", "channel", "channel_name", "event_key", "run", "subject", "body", "link",
                  "status", "attempts", "next_attempt_at", "last_error", "created_at", "sent_at"]


class ChannelInput(serializers.Serializer):
    name = serializers.CharField(max_length=80)
    url = serializers.CharField(max_length=2000, help_text="An Apprise URL; secrets as ${AGENTOPS_NOTIFY_...}")
    enabled = serializers.BooleanField(default=True)


class RuleInput(serializers.Serializer):
    name = serializers.CharField(max_length=120)
    event = serializers.ChoiceField(choices=RuleEvent.choices)
    params = serializers.JSONField(required=False, default=dict)
    labels = serializers.DictField(child=serializers.CharField(max_length=200), required=False, default=dict)
    channels = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=2**31 - 1), min_length=1, max_length=50, help_text="channel ids")
    enabled = serializers.BooleanField(default=True)


class ChannelListApi(APIView):
    permission_classes = [require_perm("notifications.view_channel")]

    @extend_schema(responses=ChannelOutput(many=True))
    def get(self, request):
        return Response(ChannelOutput(Channel.objects.order_by("name"), many=True).data)

    @extend_schema(request=ChannelInput, responses={201: ChannelOutput})
    def post(self, request):
        data = ChannelInput(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(ChannelOutput(services.channel_save(user=request.user, **data.validated_data)).data,
                        status=201)


class ChannelDetailApi(APIView):
    permission_classes = [require_perm("notifications.view_channel")]

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, channel_id: int):
        get_object_or_404(Channel, pk=channel_id)
        services.channel_delete(user=request.user, channel_id=channel_id)
        return Response(status=204)


def _rule_arguments(data: dict) -> dict:
    data = dict(data)
    data["channel_ids"] = data.pop("channels")
    return data


class RuleListApi(APIView):
    permission_classes = [require_perm("notifications.view_rule")]

    @extend_schema(responses=RuleOutput(many=True))
    def get(self, request):
        return Response(RuleOutput(Rule.objects.prefetch_related("channels").order_by("name", "id"), many=True).data)

    @extend_schema(request=RuleInput, responses={201: RuleOutput})
    def post(self, request):
        data = RuleInput(data=request.data)
        data.is_valid(raise_exception=True)
        rule = services.rule_save(user=request.user, **_rule_arguments(data.validated_data))
        return Response(RuleOutput(rule).data, status=201)


class RuleDetailApi(APIView):
    permission_classes = [require_perm("notifications.view_rule")]

    @extend_schema(responses=RuleOutput)
    def get(self, request, rule_id: int):
        return Response(RuleOutput(get_object_or_404(Rule, pk=rule_id)).data)

    @extend_schema(request=RuleInput, responses=RuleOutput)
    def put(self, request, rule_id: int):
        get_object_or_404(Rule, pk=rule_id)
        data = RuleInput(data=request.data)
        data.is_valid(raise_exception=True)
        rule = services.rule_save(user=request.user, rule_id=rule_id, **_rule_arguments(data.validated_data))
        return Response(RuleOutput(rule).data)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, rule_id: int):
        get_object_or_404(Rule, pk=rule_id)
        services.rule_delete(user=request.user, rule_id=rule_id)
        return Response(status=204)


class DeliveryListApi(APIView):
    permission_classes = [require_perm("notifications.view_delivery")]

    class DeliveryFilterInput(serializers.Serializer):
        status = serializers.ChoiceField(choices=Delivery.Status.choices, required=False)

    @extend_schema(operation_id="notification_deliveries_list", parameters=[DeliveryFilterInput, *PAGE_PARAMETERS],
                   responses=paginated(DeliveryOutput))
    def get(self, request):
        filters = self.DeliveryFilterInput(data=request.query_params)
        filters.is_valid(raise_exception=True)
        deliveries = Delivery.objects.order_by("-created_at", "-id")
        if "status" in filters.validated_data:
            deliveries = deliveries.filter(status=filters.validated_data["status"])
        paginator = Pagination()
        page = paginator.paginate_queryset(deliveries, request, view=self)
        return paginator.get_paginated_response(DeliveryOutput(page, many=True).data)

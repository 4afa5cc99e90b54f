"""Notification rules, channels and deliveries over the API (the same services as the pages)."""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from core.api import PAGE_PARAMETERS, ApiView, page_response, paginated, validated
from core.permissions import require_perm
from notifications import channels, services
from notifications.errors import shown_error
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
    last_error = serializers.CharField(source="shown_error", help_text="'delivery failed' (the details: admins only)")

    class Meta:
        model = Delivery
        fields = ["id", "rule", "rule_name", "channel", "channel_name", "event_key", "run", "approval", "subject",
                  "body", "link", "status", "attempts", "next_attempt_at", "last_error", "created_at", "sent_at"]


class ChannelInput(serializers.Serializer):
    name = serializers.CharField(max_length=80)
    url = serializers.CharField(max_length=2000, help_text="An Apprise URL; secrets as ${AGENTOPS_NOTIFY_...}")
    enabled = serializers.BooleanField(default=True)


class RuleInput(serializers.Serializer):
    name = serializers.CharField(max_length=120)
    event = serializers.ChoiceField(choices=RuleEvent.choices)
    params = serializers.JSONField(required=False, default=dict)
    labels = serializers.DictField(child=serializers.CharField(max_length=200), required=False, default=dict)
    channels = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=2**31 - 1), min_length=1,
                                     max_length=50, help_text="channel ids")
    enabled = serializers.BooleanField(default=True)


class ChannelListApi(ApiView):
    permission_classes = [require_perm("notifications.view_channel")]

    @extend_schema(responses=ChannelOutput(many=True))
    def get(self, request):
        return Response(ChannelOutput(Channel.objects.order_by("name"), many=True).data)

    @extend_schema(request=ChannelInput, responses={201: ChannelOutput})
    def post(self, request):
        channel = services.channel_save(user=request.user, **validated(ChannelInput, request.data))
        return Response(ChannelOutput(channel).data, status=201)


class ChannelDetailApi(ApiView):
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


class RuleListApi(ApiView):
    permission_classes = [require_perm("notifications.view_rule")]

    @extend_schema(responses=RuleOutput(many=True))
    def get(self, request):
        return Response(RuleOutput(Rule.objects.prefetch_related("channels").order_by("name", "id"), many=True).data)

    @extend_schema(request=RuleInput, responses={201: RuleOutput})
    def post(self, request):
        rule = services.rule_save(user=request.user, **_rule_arguments(validated(RuleInput, request.data)))
        return Response(RuleOutput(rule).data, status=201)


class RuleDetailApi(ApiView):
    permission_classes = [require_perm("notifications.view_rule")]

    @extend_schema(responses=RuleOutput)
    def get(self, request, rule_id: int):
        return Response(RuleOutput(get_object_or_404(Rule, pk=rule_id)).data)

    @extend_schema(request=RuleInput, responses=RuleOutput)
    def put(self, request, rule_id: int):
        get_object_or_404(Rule, pk=rule_id)
        rule = services.rule_save(user=request.user, rule_id=rule_id,
                                  **_rule_arguments(validated(RuleInput, request.data)))
        return Response(RuleOutput(rule).data)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, rule_id: int):
        get_object_or_404(Rule, pk=rule_id)
        services.rule_delete(user=request.user, rule_id=rule_id)
        return Response(status=204)


class DeliveryListApi(ApiView):
    permission_classes = [require_perm("notifications.view_delivery")]

    class DeliveryFilterInput(serializers.Serializer):
        status = serializers.ChoiceField(choices=Delivery.Status.choices, required=False)

    query_input = DeliveryFilterInput

    @extend_schema(operation_id="notification_deliveries_list", parameters=[DeliveryFilterInput, *PAGE_PARAMETERS],
                   responses=paginated(DeliveryOutput))
    def get(self, request):
        filters = self.query
        deliveries = Delivery.objects.order_by("-created_at", "-id")
        if "status" in filters:
            deliveries = deliveries.filter(status=filters["status"])
        def shown(delivery):
            delivery.shown_error = shown_error(delivery.last_error, request.user)
            return delivery

        return page_response(self, request, deliveries, DeliveryOutput, item=shown)

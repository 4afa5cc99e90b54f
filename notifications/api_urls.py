from django.urls import path

from notifications import api

urlpatterns = [
    path("channels/", api.ChannelListApi.as_view(), name="api-notification-channel-list"),
    path("channels/<id:channel_id>/", api.ChannelDetailApi.as_view(), name="api-notification-channel-detail"),
    path("rules/", api.RuleListApi.as_view(), name="api-notification-rule-list"),
    path("rules/<id:rule_id>/", api.RuleDetailApi.as_view(), name="api-notification-rule-detail"),
    path("deliveries/", api.DeliveryListApi.as_view(), name="api-notification-delivery-list"),
]

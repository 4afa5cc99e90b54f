from django.urls import path

from capabilities import api

urlpatterns = [
    path("capabilities/", api.CapabilityListCreateApi.as_view(), name="api-capabilities"),
    path("capabilities/<str:name>/", api.CapabilityDetailApi.as_view(), name="api-capability"),
    path("capabilities/<str:name>/enable/", api.CapabilityEnableApi.as_view(), name="api-capability-enable"),
    path("capabilities/<str:name>/disable/", api.CapabilityDisableApi.as_view(), name="api-capability-disable"),
    path("capabilities/<str:name>/versions/", api.CapabilityVersionsApi.as_view(), name="api-capability-versions"),
    path("capabilities/<str:name>/try/", api.CapabilityTryApi.as_view(), name="api-capability-try"),
    path("mcp-servers/", api.McpServerCreateApi.as_view(), name="api-mcp-servers"),
    path("mcp-servers/<id:server_id>/tools/", api.McpServerToolsApi.as_view(), name="api-mcp-server-tools"),
    path("mcp-servers/<id:server_id>/import/", api.McpServerImportApi.as_view(), name="api-mcp-server-import"),
]

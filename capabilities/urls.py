from django.urls import path

from capabilities import views

app_name = "capabilities"
# Fixed paths contain "-", which a capability name never does, so they cannot collide with <name>.
urlpatterns = [
    path("", views.capability_list, name="list"),
    path("new-capability/", views.capability_create, name="create"),
    path("validate-schema/", views.validate_schema, name="validate_schema"),
    path("mcp-servers/new/", views.mcp_server_create, name="mcp_server_create"),
    path("mcp-servers/<id:server_id>/import/", views.mcp_import, name="mcp_import"),
    path("<str:name>/", views.capability_detail, name="detail"),
    path("<str:name>/edit/", views.capability_edit, name="edit"),
    path("<str:name>/enabled/", views.capability_set_enabled, name="set_enabled"),
    path("<str:name>/try/", views.capability_try, name="try"),
]

"""The registry's JSON API: one API view per URL, nested Input/Output serializers, services for writes.

Serializers only check types; ranges, schema validity and the URL allowlist are
checked by capabilities.policy and the kinds' config rules (so the pages and the API refuse the same things with the same
field-keyed messages, in the shared error body of core.api).
"""
from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response

from capabilities import policy, selectors, try_it
from capabilities.kinds.mcp import servers
from capabilities.kinds.table import BROWSER_KINDS
from capabilities.models import Capability, CapabilityVersion, Kind, McpServer
from core.api import PAGE_PARAMETERS, ApiView, page_response, validated
from core.permissions import MethodPermission


class RegistryApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms: dict[str, str] = {}


def _capability(name: str) -> Capability:
    try:
        return selectors.capability_get(name=name)
    except Capability.DoesNotExist:
        raise Http404 from None


# -- shared shapes -----------------------------------------------------------------------------------

def policy_fields(*, required: bool) -> dict[str, serializers.Field]:
    """Serializer fields for the policy; optional ones on input (omitted = default or unchanged)."""
    opt = {} if required else {"required": False}
    return {
        "description": serializers.CharField(allow_blank=True, **opt),
        "schema": serializers.JSONField(help_text="JSON Schema (draft 2020-12) of the arguments; an object.", **opt),
        "max_argument_bytes": serializers.IntegerField(**opt),
        "max_output_bytes": serializers.IntegerField(**opt),
        "timeout_s": serializers.FloatField(help_text="0 < timeout ≤ 3600", **opt),
        "retry_max_attempts": serializers.IntegerField(help_text="1..20; 1 means never retry", **opt),
        "retry_backoff_base_s": serializers.FloatField(**opt),
        "retry_backoff_cap_s": serializers.FloatField(**opt),
        "retry_on": serializers.ListField(child=serializers.ChoiceField(choices=policy.ERROR_CODES),
                                          help_text="Empty: the default retryable codes.", **opt),
        "side_effect": serializers.ChoiceField(choices=policy.SIDE_EFFECTS, **opt),
        "requires_approval": serializers.BooleanField(**opt),
        "idempotent": serializers.BooleanField(**opt),
        "status_lookup": serializers.BooleanField(**opt),
        "permission": serializers.CharField(allow_blank=True, help_text="app_label.codename, or empty", **opt),
        "rate_limit_calls": serializers.IntegerField(allow_null=True, **opt),
        "rate_limit_period_s": serializers.FloatField(allow_null=True, **opt),
        "polling_max_attempts": serializers.IntegerField(allow_null=True, **opt),
        "polling_interval_s": serializers.FloatField(allow_null=True, **opt),
        "polling_until": serializers.JSONField(
            allow_null=True, help_text='Stop condition on this output, e.g. {"path": "state", "equals": "done"}; '
                                       "null: the run's completion criteria.", **opt),
        "volatile_paths": serializers.ListField(
            child=serializers.CharField(), help_text="Dotted output paths left out of the outcome fingerprint.", **opt),
        "settle_s": serializers.FloatField(
            allow_null=True, help_text="Seconds after a call was sent during which it may still land; a status "
                                       "lookup's 'not committed' is believed only after it. null: the timeout.", **opt),
        "distinct_calls": serializers.BooleanField(
            help_text="Identical calls are distinct operations: the step id is part of the idempotency key.", **opt),
    }


def _serializer(name: str, fields: dict[str, serializers.Field]) -> type[serializers.Serializer]:
    return type(name, (serializers.Serializer,), dict(fields))


CapabilityOutput = _serializer("CapabilityOutput", {
    "name": serializers.CharField(),
    "kind": serializers.ChoiceField(choices=[k.value for k in Kind]),
    "enabled": serializers.BooleanField(),
    "version": serializers.IntegerField(),
    "mcp_server": serializers.CharField(allow_null=True),
    "config": serializers.JSONField(),
    "flags": serializers.ListField(child=serializers.CharField()),
    "created_at": serializers.DateTimeField(),
    "updated_at": serializers.DateTimeField(),
    **policy_fields(required=True),
})

DiffEntry = _serializer("CapabilityDiffEntry", {
    "field": serializers.CharField(),
    "old": serializers.JSONField(allow_null=True),
    "new": serializers.JSONField(allow_null=True),
})

VersionOutput = _serializer("CapabilityVersionOutput", {
    "number": serializers.IntegerField(),
    "created_at": serializers.DateTimeField(),
    "created_by": serializers.CharField(allow_null=True),
    "change_note": serializers.CharField(allow_blank=True),
    "config": serializers.JSONField(),
    "changes": DiffEntry(many=True, help_text="What changed against the previous version (empty for v1)."),
    **policy_fields(required=True),
})


def capability_data(capability: Capability) -> dict[str, Any]:
    version = capability.current_version
    return {"name": capability.name, "kind": capability.kind, "enabled": capability.enabled,
            "version": version.number, "mcp_server": capability.mcp_server.name if capability.mcp_server else None,
            "flags": selectors.capability_flags(version), "created_at": capability.created_at,
            "updated_at": capability.updated_at, **version.policy()}


def version_data(version: CapabilityVersion) -> dict[str, Any]:
    return {"number": version.number, "created_at": version.created_at,
            "created_by": version.created_by.get_username() if version.created_by else None,
            "change_note": version.change_note,
            "changes": [{"field": f, "old": o, "new": n} for f, o, n in getattr(version, "diff", [])],
            **version.policy()}


# -- capabilities --------------------------------------------------------------------------------------

class CapabilityListCreateApi(RegistryApi):
    required_perms = {"GET": "capabilities.view_capability", "POST": "capabilities.add_capability"}

    InputSerializer = _serializer("CapabilityCreateInput", {
        "name": serializers.CharField(max_length=80),
        "kind": serializers.ChoiceField(choices=list(BROWSER_KINDS),
                                        help_text="python capabilities come from code (sync), not the API"),
        "mcp_server": serializers.IntegerField(required=False, allow_null=True, help_text="MCP server id (mcp kind)"),
        "config": serializers.JSONField(required=False, help_text='http: {"url", "method", "headers", '
                                        '"secret_headers", "status_url"}; mcp: {"tool"}'),
        "change_note": serializers.CharField(required=False, allow_blank=True, max_length=300),
        **policy_fields(required=False),
    })

    PageOutput = _serializer("CapabilityPage", {
        "count": serializers.IntegerField(), "next": serializers.URLField(allow_null=True),
        "previous": serializers.URLField(allow_null=True), "results": CapabilityOutput(many=True)})

    class FilterInput(serializers.Serializer):
        q = serializers.CharField(required=False, allow_blank=True, max_length=200,
                                  help_text="search name and description")
        kind = serializers.ChoiceField(choices=[k.value for k in Kind], required=False)
        side_effect = serializers.ChoiceField(choices=list(policy.SIDE_EFFECTS), required=False)
        enabled = serializers.BooleanField(required=False, allow_null=True, default=None)

    query_input = FilterInput

    @extend_schema(operation_id="capabilities_list", responses=PageOutput,
                   parameters=[FilterInput, *PAGE_PARAMETERS])
    def get(self, request):
        qs = selectors.capability_list(search=self.query.get("q", ""), kind=self.query.get("kind", ""),
                                       side_effect=self.query.get("side_effect", ""), enabled=self.query["enabled"])
        return page_response(self, request, qs, CapabilityOutput, item=capability_data)

    @extend_schema(operation_id="capabilities_create", request=InputSerializer, responses={201: CapabilityOutput})
    def post(self, request):
        data = dict(validated(self.InputSerializer, request.data))
        capability = policy.capability_create(
            user=request.user, name=data.pop("name"), kind=data.pop("kind"), mcp_server=data.pop("mcp_server", None),
            config=data.pop("config", None), change_note=data.pop("change_note", ""), policy=data)
        capability = selectors.capability_get(name=capability.name)
        return Response(CapabilityOutput(capability_data(capability)).data, status=status.HTTP_201_CREATED)


class CapabilityDetailApi(RegistryApi):
    required_perms = {"GET": "capabilities.view_capability", "PATCH": "capabilities.change_capability"}

    InputSerializer = _serializer("CapabilityUpdateInput", {
        "config": serializers.JSONField(required=False, help_text="Replaces the whole config when given."),
        "change_note": serializers.CharField(required=False, allow_blank=True, max_length=300),
        "expected_version": serializers.IntegerField(
            required=False, allow_null=True, help_text="The version you edited; 409 if someone saved another since."),
        **policy_fields(required=False),
    })

    @extend_schema(operation_id="capabilities_retrieve", responses=CapabilityOutput)
    def get(self, request, name):
        return Response(CapabilityOutput(capability_data(_capability(name))).data)

    @extend_schema(operation_id="capabilities_update", request=InputSerializer, responses=CapabilityOutput,
                   description="Writes a NEW version with the given fields changed; versions are never edited.")
    def patch(self, request, name):
        capability = _capability(name)
        data = dict(validated(self.InputSerializer, request.data))
        policy.capability_update(user=request.user, capability_id=capability.pk, config=data.pop("config", None),
                                   change_note=data.pop("change_note", ""),
                                   expected_version=data.pop("expected_version", None), policy=data)
        return Response(CapabilityOutput(capability_data(_capability(name))).data)


class _SetEnabledApi(RegistryApi):
    required_perms = {"POST": "capabilities.change_capability"}
    enabled: bool

    def post(self, request, name):
        capability = _capability(name)
        policy.capability_set_enabled(user=request.user, capability_id=capability.pk, enabled=self.enabled)
        return Response(CapabilityOutput(capability_data(_capability(name))).data)


class CapabilityEnableApi(_SetEnabledApi):
    enabled = True

    @extend_schema(operation_id="capabilities_enable", request=None, responses=CapabilityOutput)
    def post(self, request, name):
        return super().post(request, name)


class CapabilityDisableApi(_SetEnabledApi):
    enabled = False

    @extend_schema(operation_id="capabilities_disable", request=None, responses=CapabilityOutput)
    def post(self, request, name):
        return super().post(request, name)


class CapabilityVersionsApi(RegistryApi):
    required_perms = {"GET": "capabilities.view_capability"}

    @extend_schema(operation_id="capabilities_versions", responses=VersionOutput(many=True))
    def get(self, request, name):
        versions = selectors.capability_versions(capability=_capability(name))
        return Response(VersionOutput([version_data(v) for v in versions], many=True).data)


class CapabilityTryApi(RegistryApi):
    required_perms = {"POST": "capabilities.view_capability"}

    class CapabilityTryInput(serializers.Serializer):
        arguments = serializers.JSONField(help_text="A JSON object, checked against the schema.")
        confirm = serializers.BooleanField(default=False,
                                           help_text="Required for write/external capabilities (they run for real).")

    InputSerializer = CapabilityTryInput

    class ObservationOutput(serializers.Serializer):
        status = serializers.CharField(help_text="ok | retryable | terminal")
        state_changed = serializers.BooleanField()
        output = serializers.JSONField(allow_null=True)
        output_ref = serializers.JSONField(allow_null=True)
        error_code = serializers.CharField(allow_null=True)
        error_category = serializers.CharField(allow_null=True)
        error_message = serializers.CharField(allow_blank=True)
        retry_guidance = serializers.CharField(allow_blank=True)
        retry_after_s = serializers.FloatField(allow_null=True)
        side_effect = serializers.CharField(help_text="committed | not_committed | unknown")
        latency_s = serializers.FloatField()
        attempt = serializers.IntegerField()
        trace_id = serializers.CharField(allow_blank=True)
        span_id = serializers.CharField(allow_blank=True)
        extra = serializers.JSONField()

    OutputSerializer = ObservationOutput

    @extend_schema(operation_id="capabilities_try", request=InputSerializer, responses=OutputSerializer,
                   description="Run the current version once (not as a run). Side-effecting capabilities need "
                               "confirm=true and the capability's permission.")
    def post(self, request, name):
        capability = _capability(name)
        data = validated(self.InputSerializer, request.data)
        observation = try_it.capability_try(user=request.user, capability_id=capability.pk,
                                              arguments=data["arguments"], confirm=data["confirm"])
        return Response(self.OutputSerializer(observation.to_dict()).data)


# -- MCP servers -----------------------------------------------------------------------------------------

McpServerOutput = _serializer("McpServerOutput", {
    "id": serializers.IntegerField(), "name": serializers.CharField(),
    "transport": serializers.ChoiceField(choices=McpServer.Transport.values),
    "command": serializers.CharField(allow_blank=True), "args": serializers.ListField(child=serializers.CharField()),
    "env_vars": serializers.ListField(child=serializers.CharField()), "url": serializers.CharField(allow_blank=True),
    "created_at": serializers.DateTimeField(),
})


class McpServerCreateApi(RegistryApi):
    required_perms = {"POST": "capabilities.add_mcpserver"}

    class McpServerCreateInput(serializers.Serializer):
        name = serializers.CharField(max_length=80)
        transport = serializers.ChoiceField(choices=McpServer.Transport.values)
        command = serializers.CharField(required=False, allow_blank=True, max_length=500)
        args = serializers.ListField(child=serializers.CharField(allow_blank=True), required=False)
        env_vars = serializers.ListField(child=serializers.CharField(), required=False,
                                         help_text="Names of environment variables passed to the server")
        url = serializers.CharField(required=False, allow_blank=True, max_length=500)

    InputSerializer = McpServerCreateInput

    @extend_schema(operation_id="mcp_servers_create", request=InputSerializer, responses={201: McpServerOutput})
    def post(self, request):
        server = servers.mcp_server_create(user=request.user, **validated(self.InputSerializer, request.data))
        return Response(McpServerOutput(server).data, status=status.HTTP_201_CREATED)


ToolOutput = _serializer("McpToolOutput", {
    "name": serializers.CharField(), "title": serializers.CharField(allow_blank=True),
    "description": serializers.CharField(allow_blank=True), "schema": serializers.JSONField(),
    "side_effect": serializers.ChoiceField(choices=policy.SIDE_EFFECTS, help_text="suggested, from untrusted hints"),
    "requires_approval": serializers.BooleanField(), "idempotent": serializers.BooleanField(),
    "notes": serializers.ListField(child=serializers.CharField()),
    "capability_name": serializers.CharField(help_text="suggested registry name"),
    "imported_as": serializers.CharField(allow_null=True), "annotations": serializers.JSONField(),
})


class McpServerToolsApi(RegistryApi):
    required_perms = {"POST": "capabilities.add_capability"}

    @extend_schema(operation_id="mcp_servers_tools", request=None, responses=ToolOutput(many=True),
                   description="Lists the server's tools with suggested policies. A POST: it contacts the "
                               "server, and for a stdio server starts its command (audited; needs "
                               "capabilities.run_stdio_mcpserver).")
    def post(self, request, server_id):
        if not McpServer.objects.filter(pk=server_id).exists():
            raise Http404
        tools = servers.mcp_server_tools(user=request.user, server_id=server_id)
        return Response(ToolOutput(tools, many=True).data)


class McpServerImportApi(RegistryApi):
    required_perms = {"POST": "capabilities.add_capability"}

    class McpImportInput(serializers.Serializer):
        tools = inline_serializer("McpImportItem", many=True, fields={
            "name": serializers.CharField(help_text="the tool's name on the server"),
            "capability_name": serializers.CharField(required=False),
            **{k: f for k, f in policy_fields(required=False).items() if k != "schema"},
        })

    InputSerializer = McpImportInput

    @extend_schema(operation_id="mcp_servers_import", request=InputSerializer,
                   responses={201: CapabilityOutput(many=True)},
                   description="Creates one mcp capability per tool with the confirmed policy; the argument "
                               "schema is the server's inputSchema. All or nothing.")
    def post(self, request, server_id):
        if not McpServer.objects.filter(pk=server_id).exists():
            raise Http404
        tools = validated(self.InputSerializer, request.data)["tools"]
        created = servers.mcp_tools_import(user=request.user, server_id=server_id, tools=[dict(t) for t in tools])
        data = [capability_data(selectors.capability_get(name=c.name)) for c in created]
        return Response(CapabilityOutput(data, many=True).data, status=status.HTTP_201_CREATED)

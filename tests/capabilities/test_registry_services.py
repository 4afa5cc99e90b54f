"""The registry's write services: versions, audit, validation, concurrency, permissions, sync."""
from __future__ import annotations

import pytest

from capabilities import services
from capabilities.models import Capability, CapabilityVersion
from capabilities.selectors import capability_version_diff, capability_versions
from core.errors import Conflict, InvalidInput, NotAllowed
from core.models import AuditEvent

pytestmark = pytest.mark.django_db


def audit_for(capability):
    return list(AuditEvent.objects.filter(target_type="capability", target_id=str(capability.pk))
                .order_by("created_at", "id").values_list("action", flat=True))


class TestCreate:
    def test_it_creates_version_1_with_the_policy_and_an_audit_event(self, make_http_capability, registry_admin):
        capability = make_http_capability(side_effect="write", requires_approval=True, timeout_s=4,
                                          permission="capabilities.create_ticket")
        version = capability.current_version
        assert (version.number, version.side_effect, version.requires_approval, version.timeout_s) == (1, "write", True, 4)
        assert version.created_by == registry_admin
        assert version.config == {"url": "https://api.example.com/orders", "method": "POST"}
        event = AuditEvent.objects.get(target_type="capability", target_id=str(capability.pk))
        assert (event.action, event.actor) == ("capability.created", registry_admin)

    def test_it_refuses_python_kind_because_code_registers_those(self, registry_admin, allowlist):
        with pytest.raises(InvalidInput) as exc:
            services.capability_create(user=registry_admin, name="x", kind="python", policy={}, config={})
        assert "kind" in exc.value.fields

    @pytest.mark.parametrize("name", ["Bad", "1abc", "has-dash", "x" * 81, ""])
    def test_it_refuses_malformed_names(self, make_http_capability, name):
        with pytest.raises(InvalidInput) as exc:
            make_http_capability(name)
        assert "name" in exc.value.fields

    def test_it_refuses_a_duplicate_name(self, make_http_capability):
        make_http_capability("orders")
        with pytest.raises(InvalidInput) as exc:
            make_http_capability("orders")
        assert exc.value.fields["name"] == ["A capability named orders already exists."]

    @pytest.mark.parametrize("schema, expected", [
        ({"type": "object", "properties": {"q": {"type": "strin"}}}, "Not a valid JSON Schema"),
        ({"type": "object", "required": "q"}, "Not a valid JSON Schema"),
        ({"type": "array"}, "must describe an object"),
        ({"properties": {}}, "must describe an object"),
        ([1, 2], "must be a JSON object"),
    ])
    def test_it_refuses_invalid_schemas_with_a_field_error(self, make_http_capability, schema, expected):
        with pytest.raises(InvalidInput) as exc:
            make_http_capability(schema=schema)
        assert expected in " ".join(exc.value.fields["schema"])

    @pytest.mark.parametrize("policy, field", [
        ({"timeout_s": 0}, "timeout_s"), ({"timeout_s": 3601}, "timeout_s"), ({"timeout_s": -1}, "timeout_s"),
        ({"retry_max_attempts": 0}, "retry_max_attempts"), ({"retry_max_attempts": 21}, "retry_max_attempts"),
        ({"retry_backoff_base_s": -0.1}, "retry_backoff_base_s"),
        ({"retry_backoff_base_s": 5, "retry_backoff_cap_s": 1}, "retry_backoff_cap_s"),
        ({"max_argument_bytes": 0}, "max_argument_bytes"), ({"max_output_bytes": 0}, "max_output_bytes"),
        ({"rate_limit_calls": 5}, "rate_limit_period_s"), ({"rate_limit_period_s": 60}, "rate_limit_calls"),
        ({"polling_max_attempts": 3}, "polling_interval_s"), ({"polling_interval_s": 2}, "polling_max_attempts"),
        ({"polling_max_attempts": 3, "polling_interval_s": 0}, "polling_interval_s"),
        ({"retry_on": ["timeout", "explosion"]}, "retry_on"),
        ({"side_effect": "dangerous"}, "side_effect"),
        ({"permission": "not a permission"}, "permission"),
        ({"requires_approval": "yes"}, "requires_approval"),
        ({"timeout_s": True}, "timeout_s"),
    ])
    def test_it_refuses_out_of_range_policy_values_by_field(self, make_http_capability, policy, field):
        with pytest.raises(InvalidInput) as exc:
            make_http_capability(**policy)
        assert field in exc.value.fields, exc.value.fields

    def test_it_lists_every_error_at_once(self, make_http_capability):
        with pytest.raises(InvalidInput) as exc:
            make_http_capability("Bad Name", timeout_s=0, retry_max_attempts=99, schema={"type": "array"})
        assert {"name", "timeout_s", "retry_max_attempts", "schema"} <= set(exc.value.fields)

    def test_it_accepts_rate_limit_and_polling_when_both_halves_are_set(self, make_http_capability):
        version = make_http_capability(rate_limit_calls=5, rate_limit_period_s=60, polling_max_attempts=3,
                                       polling_interval_s=2).current_version
        spec = version.to_spec()
        assert (spec.rate_limit.max_calls, spec.polling.interval_s) == (5, 2)

    @pytest.mark.parametrize("config, field", [
        ({"url": "https://evil.example.net/x"}, "config.url"),
        ({"url": "http://169.254.169.254/latest"}, "config.url"),
        ({"url": "ftp://api.example.com/x"}, "config.url"),
        ({"url": ""}, "config.url"),
        ({"url": "https://api.example.com/x", "method": "TRACE"}, "config.method"),
        ({"url": "https://api.example.com/x", "headers": {"Authorization": "Bearer s3cret"}}, "config.headers"),
        ({"url": "https://api.example.com/x", "secret_headers": {"Authorization": "Bearer s3cret"}},
         "config.secret_headers"),
        ({"url": "https://api.example.com/x", "secret_headers": {"X-Token": "lower_case"}}, "config.secret_headers"),
        ({"url": "https://api.example.com/x", "status_url": "https://elsewhere.test/s"}, "config.status_url"),
        ({"url": "https://api.example.com/x", "surprise": 1}, "config"),
    ])
    def test_it_refuses_http_configs_outside_the_rules(self, make_http_capability, config, field):
        with pytest.raises(InvalidInput) as exc:
            make_http_capability(config=config)
        assert field in exc.value.fields, exc.value.fields

    def test_it_accepts_allowlisted_urls_and_env_var_names_for_secrets(self, make_http_capability):
        capability = make_http_capability(config={
            "url": "https://hooks.example.org/orders/{idempotency_key}", "method": "put",
            "secret_headers": {"Authorization": "ORDERS_API_TOKEN"}})
        assert capability.current_version.config["method"] == "PUT"

    def test_status_lookup_needs_a_status_url_for_http(self, make_http_capability):
        with pytest.raises(InvalidInput) as exc:
            make_http_capability(status_lookup=True)
        assert "status_lookup" in exc.value.fields

    def test_a_side_effect_without_permission_is_allowed_and_flagged(self, make_http_capability):
        from capabilities.selectors import capability_flags

        capability = make_http_capability(side_effect="external")
        assert capability_flags(capability.current_version) == ["side effect without a permission",
                                                                "side effect without approval"]


class TestUpdate:
    def test_an_edit_writes_a_new_version_and_keeps_the_old_one(self, make_http_capability, registry_admin):
        capability = make_http_capability(timeout_s=4)
        version = services.capability_update(user=registry_admin, capability_id=capability.pk,
                                             policy={"timeout_s": 8, "requires_approval": True},
                                             change_note="slower upstream", expected_version=1)
        capability.refresh_from_db()
        assert version.number == 2 and capability.current_version == version
        old = CapabilityVersion.objects.get(capability=capability, number=1)
        assert (old.timeout_s, old.requires_approval) == (4, False)
        assert (version.timeout_s, version.requires_approval, version.change_note) == (8, True, "slower upstream")
        assert audit_for(capability) == ["capability.created", "capability.updated"]
        event = AuditEvent.objects.filter(action="capability.updated").get()
        assert event.actor == registry_admin
        assert ["timeout_s", 4, 8] in event.details["changes"]

    def test_an_edit_without_changes_is_refused(self, make_http_capability, registry_admin):
        capability = make_http_capability(timeout_s=4)
        with pytest.raises(InvalidInput, match="No changes"):
            services.capability_update(user=registry_admin, capability_id=capability.pk, policy={"timeout_s": 4})
        assert capability.versions.count() == 1

    def test_a_stale_expected_version_is_a_conflict(self, make_http_capability, registry_admin):
        capability = make_http_capability()
        services.capability_update(user=registry_admin, capability_id=capability.pk, policy={"timeout_s": 3},
                                   expected_version=1)
        with pytest.raises(Conflict, match="changed by someone else"):
            services.capability_update(user=registry_admin, capability_id=capability.pk, policy={"timeout_s": 5},
                                       expected_version=1)
        assert capability.versions.count() == 2

    def test_an_invalid_edit_writes_nothing(self, make_http_capability, registry_admin):
        capability = make_http_capability()
        with pytest.raises(InvalidInput) as exc:
            services.capability_update(user=registry_admin, capability_id=capability.pk,
                                       policy={"schema": {"type": "object", "properties": 3}})
        assert "schema" in exc.value.fields
        assert capability.versions.count() == 1 and audit_for(capability) == ["capability.created"]

    def test_a_config_change_is_validated_against_the_allowlist(self, make_http_capability, registry_admin):
        capability = make_http_capability()
        with pytest.raises(InvalidInput) as exc:
            services.capability_update(user=registry_admin, capability_id=capability.pk,
                                       config={"url": "https://attacker.test/"})
        assert "config.url" in exc.value.fields

    def test_a_python_capabilitys_function_cannot_be_edited(self, registry_admin):
        search = Capability.objects.get(name="search_documents")
        with pytest.raises(InvalidInput) as exc:
            services.capability_update(user=registry_admin, capability_id=search.pk,
                                       config={"function": "os:system"})
        assert "config" in exc.value.fields


class TestDiff:
    def test_it_lists_changed_policy_fields_and_schema_leaves(self, make_http_capability, registry_admin):
        capability = make_http_capability(timeout_s=4)
        new_schema = {"type": "object", "properties": {"item": {"type": "string", "maxLength": 40},
                                                       "qty": {"type": "integer"}}, "required": ["item"]}
        services.capability_update(user=registry_admin, capability_id=capability.pk,
                                   policy={"timeout_s": 6, "schema": new_schema, "side_effect": "write"})
        v1, v2 = CapabilityVersion.objects.filter(capability=capability).order_by("number")
        diff = capability_version_diff(v1, v2)
        assert ("timeout_s", 4, 6) in diff
        assert ("side_effect", "none", "write") in diff
        assert ("schema.properties.item.maxLength", None, 40) in diff
        assert ("schema.properties.qty", None, '{"type": "integer"}') in diff
        assert not any(field.startswith("schema.required") for field, _, _ in diff)

    def test_versions_carry_their_diff_against_the_previous_one(self, make_http_capability, registry_admin):
        capability = make_http_capability(timeout_s=4)
        services.capability_update(user=registry_admin, capability_id=capability.pk, policy={"timeout_s": 5})
        services.capability_update(user=registry_admin, capability_id=capability.pk, policy={"idempotent": True})
        v3, v2, v1 = capability_versions(capability=capability)
        assert (v3.diff, v2.diff, v1.diff) == ([("idempotent", False, True)], [("timeout_s", 4, 5)], [])


class TestEnableDisable:
    def test_disable_then_enable_each_leave_an_audit_event(self, make_http_capability, registry_admin):
        capability = make_http_capability()
        services.capability_set_enabled(user=registry_admin, capability_id=capability.pk, enabled=False)
        capability.refresh_from_db()
        assert capability.enabled is False
        assert capability.current_version.to_spec().enabled is False
        services.capability_set_enabled(user=registry_admin, capability_id=capability.pk, enabled=True)
        capability.refresh_from_db()
        assert capability.enabled is True
        assert audit_for(capability) == ["capability.created", "capability.disabled", "capability.enabled"]
        assert capability.versions.count() == 1

    def test_setting_the_same_state_again_writes_nothing(self, make_http_capability, registry_admin):
        capability = make_http_capability()
        services.capability_set_enabled(user=registry_admin, capability_id=capability.pk, enabled=True)
        assert audit_for(capability) == ["capability.created"]


class TestPermissions:
    def test_a_viewer_can_neither_create_edit_nor_disable(self, make_http_capability, viewer, allowlist):
        with pytest.raises(NotAllowed):
            services.capability_create(user=viewer, name="x_y", kind="http", policy={},
                                       config={"url": "https://api.example.com/"})
        capability = make_http_capability()
        with pytest.raises(NotAllowed):
            services.capability_update(user=viewer, capability_id=capability.pk, policy={"timeout_s": 2})
        with pytest.raises(NotAllowed):
            services.capability_set_enabled(user=viewer, capability_id=capability.pk, enabled=False)
        with pytest.raises(NotAllowed):
            services.mcp_server_create(user=viewer, name="srv", transport="stdio", command="python")
        assert capability.versions.count() == 1

    def test_an_operator_cannot_register_capabilities(self, operator, allowlist):
        with pytest.raises(NotAllowed):
            services.capability_create(user=operator, name="x_y", kind="http", policy={},
                                       config={"url": "https://api.example.com/"})


@pytest.mark.usefixtures("stdio_allowed")
class TestMcpServer:
    def test_it_adds_a_stdio_server_with_an_audit_event(self, registry_admin):
        server = services.mcp_server_create(user=registry_admin, name="inventory", transport="stdio",
                                            command="python", args=["server.py"], env_vars=["INVENTORY_TOKEN"])
        assert server.client_config()["args"] == ["server.py"]
        event = AuditEvent.objects.get(target_type="mcpserver")
        assert (event.action, event.actor) == ("mcp_server.added", registry_admin)

    @pytest.mark.parametrize("kwargs, field", [
        ({"transport": "stdio", "command": ""}, "command"),
        ({"transport": "http", "url": "https://not-allowed.test/mcp"}, "url"),
        ({"transport": "carrier-pigeon"}, "transport"),
        ({"transport": "stdio", "command": "python", "env_vars": ["my secret value"]}, "env_vars"),
    ])
    def test_it_refuses_incomplete_or_unsafe_servers(self, registry_admin, allowlist, kwargs, field):
        with pytest.raises(InvalidInput) as exc:
            services.mcp_server_create(user=registry_admin, name="srv", **kwargs)
        assert field in exc.value.fields

    def test_an_http_server_must_be_on_the_allowlist(self, registry_admin, allowlist):
        server = services.mcp_server_create(user=registry_admin, name="remote", transport="http",
                                            url="https://tools.example.org/mcp")
        assert server.url == "https://tools.example.org/mcp"


class TestSync:
    def test_migrate_left_the_demo_functions_registered(self):
        names = set(Capability.objects.filter(kind="python").values_list("name", flat=True))
        assert {"search_documents", "get_document", "create_ticket", "get_ticket_status",
                "send_notification"} <= names
        create = Capability.objects.get(name="create_ticket").current_version
        assert (create.side_effect, create.idempotent, create.status_lookup) == ("write", True, True)
        assert create.config["function"] == "capabilities.demo.functions:create_ticket"

    def test_sync_is_idempotent(self):
        versions = CapabilityVersion.objects.count()
        events = AuditEvent.objects.count()
        first = services.python_capabilities_sync(modules=services.DEMO_MODULES)
        second = services.python_capabilities_sync(modules=services.DEMO_MODULES)
        assert not first.created and not first.updated and not first.errors
        assert second.unchanged == first.unchanged
        assert CapabilityVersion.objects.count() == versions and AuditEvent.objects.count() == events

    def test_sync_creates_a_missing_capability_with_an_audit_event(self):
        from dataclasses import replace

        from capabilities.kinds.python.registry import registered_capabilities

        definition = replace(registered_capabilities()["get_document"], name="fetch_document")
        result = services.python_capabilities_sync(definitions={"fetch_document": definition})
        assert result.created == ["fetch_document"]
        capability = Capability.objects.get(name="fetch_document")
        assert (capability.kind, capability.current_version.number, capability.current_version.created_by) == (
            "python", 1, None)
        assert audit_for(capability) == ["capability.created"]

    def test_sync_never_re_enables_a_disabled_capability(self, registry_admin):
        search = Capability.objects.get(name="search_documents")
        services.capability_set_enabled(user=registry_admin, capability_id=search.pk, enabled=False)
        services.python_capabilities_sync(modules=services.DEMO_MODULES)
        search.refresh_from_db()
        assert search.enabled is False

    def test_sync_keeps_an_operators_edit_and_applies_only_what_the_code_changed(self, registry_admin):
        from dataclasses import replace

        from capabilities.kinds.python.registry import registered_capabilities

        search = Capability.objects.get(name="search_documents")
        services.capability_update(user=registry_admin, capability_id=search.pk, policy={"requires_approval": True})
        definitions = {name: d for name, d in registered_capabilities().items()
                       if d.dotted_path.startswith("capabilities.demo.")}
        definitions["search_documents"] = replace(definitions["search_documents"], timeout_s=7.0)
        result = services.python_capabilities_sync(definitions=definitions)
        assert result.updated == ["search_documents"]
        search.refresh_from_db()
        current = search.current_version
        assert (current.number, current.timeout_s, current.requires_approval) == (3, 7.0, True)
        assert current.created_by is None and current.change_note.startswith("Synced from code")
        again = services.python_capabilities_sync(definitions=definitions)
        assert again.updated == [] and "search_documents" in again.unchanged

    def test_the_command_reports_and_is_idempotent(self):
        from io import StringIO

        from django.core.management import call_command

        out = StringIO()
        call_command("sync_capabilities", stdout=out)
        call_command("sync_capabilities", stdout=out)
        assert "0 created, 0 updated" in out.getvalue()

    def test_the_demo_ticket_task_resolves_tickets_open_for_20_seconds(self):
        from datetime import timedelta

        from django.utils import timezone

        from capabilities.models import Ticket
        from capabilities.tasks import resolve_demo_tickets

        old = Ticket.objects.create(idempotency_key="k1", title="old")
        Ticket.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(seconds=21))
        new = Ticket.objects.create(idempotency_key="k2", title="new")
        assert resolve_demo_tickets() == 1
        assert resolve_demo_tickets() == 0
        old.refresh_from_db()
        new.refresh_from_db()
        assert (old.status, new.status) == ("resolved", "open") and old.resolved_at is not None

"""Creating and editing versions: validation, versions, the diff, audit, concurrency, permissions."""
from __future__ import annotations

import pytest

from capabilities import policy
from capabilities.kinds.mcp import servers
from capabilities.models import Capability, CapabilityVersion
from capabilities.policy import capability_version_diff
from capabilities.selectors import capability_versions
from core.errors import Conflict, InvalidInput, NotAllowed
from core.models import AuditEvent

from .conftest import audit_for

pytestmark = pytest.mark.django_db


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
            policy.capability_create(user=registry_admin, name="x", kind="python", policy={}, config={})
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
        version = policy.capability_update(user=registry_admin, capability_id=capability.pk,
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
            policy.capability_update(user=registry_admin, capability_id=capability.pk, policy={"timeout_s": 4})
        assert capability.versions.count() == 1

    def test_a_stale_expected_version_is_a_conflict(self, make_http_capability, registry_admin):
        capability = make_http_capability()
        policy.capability_update(user=registry_admin, capability_id=capability.pk, policy={"timeout_s": 3},
                                   expected_version=1)
        with pytest.raises(Conflict, match="changed by someone else"):
            policy.capability_update(user=registry_admin, capability_id=capability.pk, policy={"timeout_s": 5},
                                       expected_version=1)
        assert capability.versions.count() == 2

    def test_an_invalid_edit_writes_nothing(self, make_http_capability, registry_admin):
        capability = make_http_capability()
        with pytest.raises(InvalidInput) as exc:
            policy.capability_update(user=registry_admin, capability_id=capability.pk,
                                       policy={"schema": {"type": "object", "properties": 3}})
        assert "schema" in exc.value.fields
        assert capability.versions.count() == 1 and audit_for(capability) == ["capability.created"]

    def test_a_config_change_is_validated_against_the_allowlist(self, make_http_capability, registry_admin):
        capability = make_http_capability()
        with pytest.raises(InvalidInput) as exc:
            policy.capability_update(user=registry_admin, capability_id=capability.pk,
                                       config={"url": "https://attacker.test/"})
        assert "config.url" in exc.value.fields

    def test_a_python_capabilitys_function_cannot_be_edited(self, registry_admin):
        search = Capability.objects.get(name="search_documents")
        with pytest.raises(InvalidInput) as exc:
            policy.capability_update(user=registry_admin, capability_id=search.pk,
                                       config={"function": "os:system"})
        assert "config" in exc.value.fields


class TestDiff:
    def test_it_lists_changed_policy_fields_and_schema_leaves(self, make_http_capability, registry_admin):
        capability = make_http_capability(timeout_s=4)
        new_schema = {"type": "object", "properties": {"item": {"type": "string", "maxLength": 40},
                                                       "qty": {"type": "integer"}}, "required": ["item"]}
        policy.capability_update(user=registry_admin, capability_id=capability.pk,
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
        policy.capability_update(user=registry_admin, capability_id=capability.pk, policy={"timeout_s": 5})
        policy.capability_update(user=registry_admin, capability_id=capability.pk, policy={"idempotent": True})
        v3, v2, v1 = capability_versions(capability=capability)
        assert (v3.diff, v2.diff, v1.diff) == ([("idempotent", False, True)], [("timeout_s", 4, 5)], [])


class TestEnableDisable:
    def test_disable_then_enable_each_leave_an_audit_event(self, make_http_capability, registry_admin):
        capability = make_http_capability()
        policy.capability_set_enabled(user=registry_admin, capability_id=capability.pk, enabled=False)
        capability.refresh_from_db()
        assert capability.enabled is False
        assert capability.current_version.to_spec().enabled is False
        policy.capability_set_enabled(user=registry_admin, capability_id=capability.pk, enabled=True)
        capability.refresh_from_db()
        assert capability.enabled is True
        assert audit_for(capability) == ["capability.created", "capability.disabled", "capability.enabled"]
        assert capability.versions.count() == 1

    def test_setting_the_same_state_again_writes_nothing(self, make_http_capability, registry_admin):
        capability = make_http_capability()
        policy.capability_set_enabled(user=registry_admin, capability_id=capability.pk, enabled=True)
        assert audit_for(capability) == ["capability.created"]


class TestPermissions:
    def test_a_viewer_can_neither_create_edit_nor_disable(self, make_http_capability, viewer, allowlist):
        with pytest.raises(NotAllowed):
            policy.capability_create(user=viewer, name="x_y", kind="http", policy={},
                                       config={"url": "https://api.example.com/"})
        capability = make_http_capability()
        with pytest.raises(NotAllowed):
            policy.capability_update(user=viewer, capability_id=capability.pk, policy={"timeout_s": 2})
        with pytest.raises(NotAllowed):
            policy.capability_set_enabled(user=viewer, capability_id=capability.pk, enabled=False)
        with pytest.raises(NotAllowed):
            servers.mcp_server_create(user=viewer, name="srv", transport="stdio", command="python")
        assert capability.versions.count() == 1

    def test_an_operator_cannot_register_capabilities(self, operator, allowlist):
        with pytest.raises(NotAllowed):
            policy.capability_create(user=operator, name="x_y", kind="http", policy={},
                                       config={"url": "https://api.example.com/"})

"""Registry pages: list (search, filters, usage), detail, forms, live schema check, try it, permissions."""
from __future__ import annotations

import pytest
from django.urls import reverse

from capabilities import policy
from capabilities.models import Capability
from core.models import AuditEvent

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def http_form(**overrides):
    data = {"name": "create_order", "kind": "http", "url": "https://api.example.com/orders", "method": "POST",
            "headers": "", "secret_headers": '{"Authorization": "ORDERS_TOKEN"}', "status_url": "",
            "description": "Place an order", "schema": '{"type": "object", "properties": {"item": {"type": "string"}}}',
            "max_argument_bytes": "16384", "max_output_bytes": "65536", "timeout_s": "5",
            "retry_max_attempts": "3", "retry_backoff_base_s": "0.5", "retry_backoff_cap_s": "30",
            "side_effect": "write", "requires_approval": "on", "permission": "capabilities.create_ticket",
            "rate_limit_calls": "", "rate_limit_period_s": "", "polling_max_attempts": "", "polling_interval_s": "",
            "change_note": "first"}
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


class TestList:
    def test_it_lists_capabilities_with_kind_side_effect_and_flags(self, client_for, viewer, make_http_capability):
        make_http_capability("notify_partner", side_effect="external")
        response = client_for(viewer).get(reverse("capabilities:list"))
        assert response.status_code == 200
        html = response.content.decode()
        assert "notify_partner" in html and "search_documents" in html
        assert "side effect without a permission" in html and "side effect without approval" in html

    def test_search_answers_only_the_results_partial_to_htmx(self, client_for, viewer):
        response = client_for(viewer).get(reverse("capabilities:list"), {"q": "ticket"}, **HTMX)
        html = response.content.decode()
        assert 'id="capability-results"' in html and "<html" not in html
        assert "create_ticket" in html and "get_ticket_status" in html and "search_documents" not in html

    @pytest.mark.parametrize("params, present, absent", [
        ({"kind": "http"}, ["create_order"], ["search_documents"]),
        ({"kind": "python"}, ["search_documents"], ["create_order"]),
        ({"side_effect": "external"}, ["send_notification"], ["search_documents", "create_order"]),
        ({"enabled": "false"}, ["create_order"], ["search_documents"]),
    ])
    def test_filters(self, client_for, registry_admin, make_http_capability, params, present, absent):
        capability = make_http_capability("create_order", side_effect="write")
        policy.capability_set_enabled(user=registry_admin, capability_id=capability.pk, enabled=False)
        html = client_for(registry_admin).get(reverse("capabilities:list"), params, **HTMX).content.decode()
        for name in present:
            assert f">{name}<" in html
        for name in absent:
            assert f">{name}<" not in html

    def test_it_shows_24h_usage(self, client_for, viewer, make_attempt):
        for latency in (0.1, 0.2, 0.3):
            make_attempt("search_documents", latency_s=latency)
        make_attempt("search_documents", latency_s=2.0, status="retryable")
        html = client_for(viewer).get(reverse("capabilities:list"), {"q": "search_documents"}, **HTMX).content.decode()
        assert "<td>4</td>" in html and "25 %" in html and "2.000 s" in html

    def test_someone_without_the_view_permission_gets_403(self, client_for, nobody):
        assert client_for(nobody).get(reverse("capabilities:list")).status_code == 403


class TestDetail:
    def test_it_shows_policy_versions_with_diffs_attempts_and_audit(self, client_for, registry_admin,
                                                                    make_http_capability, make_attempt):
        capability = make_http_capability(timeout_s=4)
        policy.capability_update(user=registry_admin, capability_id=capability.pk, policy={"timeout_s": 9},
                                   change_note="upstream is slow")
        attempt = make_attempt("create_order", latency_s=0.4)
        html = client_for(registry_admin).get(reverse("capabilities:detail", args=["create_order"])).content.decode()
        assert "v2" in html and "upstream is slow" in html
        assert "<code>timeout_s</code>" in html and ">4.0<" in html and ">9.0<" in html
        assert f"/runs/{attempt.run_id}/#attempt-{attempt.uid}" in html
        assert "capability.updated" in html and "capability.created" in html
        assert "Disable" in html and "Edit (new version)" in html

    def test_schemas_and_config_are_shown_as_json_not_python(self, client_for, viewer, make_http_capability):
        make_http_capability(schema={"type": "object", "additionalProperties": False,
                                     "properties": {"item": {"type": "string"}}})
        html = client_for(viewer).get(reverse("capabilities:detail", args=["create_order"])).content.decode()
        assert "&quot;additionalProperties&quot;: false" in html
        assert "False" not in html and "&#x27;type&#x27;" not in html

    def test_a_viewer_sees_no_edit_or_disable_buttons(self, client_for, viewer):
        html = client_for(viewer).get(reverse("capabilities:detail", args=["search_documents"])).content.decode()
        assert "Disable" not in html and "Edit (new version)" not in html

    def test_an_unknown_name_is_404(self, client_for, viewer):
        assert client_for(viewer).get(reverse("capabilities:detail", args=["nope"])).status_code == 404

    def test_disable_and_enable_buttons_post_and_audit(self, client_for, registry_admin):
        client = client_for(registry_admin)
        url = reverse("capabilities:set_enabled", args=["search_documents"])
        assert client.post(url, {"enabled": "false"}).status_code == 302
        assert Capability.objects.get(name="search_documents").enabled is False
        client.post(url, {"enabled": "true"})
        assert Capability.objects.get(name="search_documents").enabled is True
        assert AuditEvent.objects.filter(action__in=["capability.disabled", "capability.enabled"]).count() == 2

    def test_a_viewer_cannot_disable(self, client_for, viewer):
        url = reverse("capabilities:set_enabled", args=["search_documents"])
        assert client_for(viewer).post(url, {"enabled": "false"}).status_code == 403
        assert Capability.objects.get(name="search_documents").enabled is True


class TestCreateAndEditForms:
    def test_the_create_form_registers_an_http_capability(self, client_for, registry_admin, allowlist):
        client = client_for(registry_admin)
        assert client.get(reverse("capabilities:create")).status_code == 200
        response = client.post(reverse("capabilities:create"), http_form())
        assert response.status_code == 302, response.content.decode()[:2000]
        version = Capability.objects.get(name="create_order").current_version
        assert version.config["secret_headers"] == {"Authorization": "ORDERS_TOKEN"}
        assert (version.side_effect, version.requires_approval, version.timeout_s) == ("write", True, 5)

    def test_errors_are_shown_beside_each_field(self, client_for, registry_admin, allowlist):
        response = client_for(registry_admin).post(reverse("capabilities:create"), http_form(
            name="Bad Name", url="https://evil.test/", timeout_s="0", schema='{"type": "array"}',
            secret_headers='{"Authorization": "Bearer abc"}', rate_limit_calls="5"))
        assert response.status_code == 400
        form = response.context["form"]
        assert {"name", "url", "timeout_s", "schema", "secret_headers", "rate_limit_period_s"} <= set(form.errors)
        html = response.content.decode()
        assert 'id="errors-url"' in html and "must describe an object" in html
        assert not Capability.objects.filter(kind="http").exists()

    def test_invalid_json_in_the_schema_box_is_a_field_error(self, client_for, registry_admin, allowlist):
        response = client_for(registry_admin).post(reverse("capabilities:create"), http_form(schema="{nope"))
        assert "Not valid JSON" in response.context["form"].errors["schema"][0]

    def test_the_edit_form_writes_a_new_version(self, client_for, registry_admin, make_http_capability):
        from capabilities.forms import CapabilityForm

        capability = make_http_capability(timeout_s=4)
        client = client_for(registry_admin)
        page = client.get(reverse("capabilities:edit", args=[capability.name]))
        assert page.status_code == 200 and 'name="expected_version"' in page.content.decode()
        data = self._form_data(CapabilityForm(capability=capability), timeout_s="12", change_note="more time")
        response = client.post(reverse("capabilities:edit", args=[capability.name]), data)
        assert response.status_code == 302, response.context["form"].errors
        capability.refresh_from_db()
        assert (capability.current_version.number, capability.current_version.timeout_s) == (2, 12)

    def test_an_edit_based_on_an_old_version_is_refused(self, client_for, registry_admin, make_http_capability):
        from capabilities.forms import CapabilityForm

        capability = make_http_capability(timeout_s=4)
        stale = self._form_data(CapabilityForm(capability=capability), timeout_s="12")
        policy.capability_update(user=registry_admin, capability_id=capability.pk, policy={"timeout_s": 6})
        response = client_for(registry_admin).post(reverse("capabilities:edit", args=[capability.name]), stale)
        assert response.status_code == 400
        assert "changed by someone else" in response.content.decode()
        capability.refresh_from_db()
        assert capability.current_version.timeout_s == 6

    def test_editing_a_python_capability_keeps_its_function(self, client_for, registry_admin):
        from capabilities.forms import CapabilityForm

        search = Capability.objects.get(name="search_documents")
        data = self._form_data(CapabilityForm(capability=search), requires_approval="on")
        response = client_for(registry_admin).post(reverse("capabilities:edit", args=["search_documents"]), data)
        assert response.status_code == 302, response.context["form"].errors
        search.refresh_from_db()
        assert search.current_version.requires_approval is True
        assert search.current_version.config["function"] == "capabilities.demo.functions:search_documents"

    def test_a_viewer_gets_403_on_the_forms(self, client_for, viewer):
        client = client_for(viewer)
        assert client.get(reverse("capabilities:create")).status_code == 403
        assert client.post(reverse("capabilities:create"), http_form()).status_code == 403
        assert client.get(reverse("capabilities:edit", args=["search_documents"])).status_code == 403
        assert client.get(reverse("capabilities:mcp_server_create")).status_code == 403

    @staticmethod
    def _form_data(form, **overrides):
        """What the browser would post for this unbound form, with some inputs changed."""
        data = {}
        for name, field in form.fields.items():
            value = form[name].value()
            if isinstance(value, list):
                data[name] = value
            elif isinstance(value, bool):
                if value:
                    data[name] = "on"
            elif value is not None:
                data[name] = field.prepare_value(value) if hasattr(field, "empty") else value
        data.update(overrides)
        return data


class TestLiveSchemaValidation:
    def url(self):
        return reverse("capabilities:validate_schema")

    def test_a_valid_object_schema_answers_an_ok_partial(self, client_for, registry_admin):
        response = client_for(registry_admin).post(self.url(), {"schema": '{"type": "object"}'}, **HTMX)
        html = response.content.decode()
        assert response.status_code == 200 and 'id="schema-errors"' in html and "Valid JSON Schema" in html
        assert "<html" not in html

    @pytest.mark.parametrize("text, message", [
        ('{"type": "object", "properties": {"a": {"type": 5}}}', "Not a valid JSON Schema"),
        ('{"type": "string"}', "must describe an object"),
        ('{"type": ', "Not valid JSON"),
    ])
    def test_problems_are_listed(self, client_for, registry_admin, text, message):
        html = client_for(registry_admin).post(self.url(), {"schema": text}, **HTMX).content.decode()
        assert message in html

    def test_the_schema_textarea_posts_as_you_type(self, client_for, registry_admin):
        html = client_for(registry_admin).get(reverse("capabilities:create")).content.decode()
        assert f'hx-post="{self.url()}"' in html and 'hx-trigger="keyup changed delay:400ms"' in html

    def test_a_viewer_cannot_use_it(self, client_for, viewer):
        assert client_for(viewer).post(self.url(), {"schema": "{}"}).status_code == 403


@pytest.mark.usefixtures("try_inline")
class TestTryIt:
    def url(self, name):
        return reverse("capabilities:try", args=[name])

    def test_a_read_only_python_capability_runs_and_shows_the_observation(self, client_for, viewer):
        response = client_for(viewer).post(self.url("search_documents"), {"arguments": '{"q": "travel"}'}, **HTMX)
        html = response.content.decode()
        assert response.status_code == 200 and 'id="try-panel"' in html and "<html" not in html
        assert 'class="pill ok"' in html and "POL-" in html and "not_committed" in html

    def test_arguments_failing_the_schema_are_all_listed(self, client_for, viewer):
        response = client_for(viewer).post(self.url("search_documents"),
                                           {"arguments": '{"limit": "many", "extra": 1}'}, **HTMX)
        html = response.content.decode()
        assert 'id="try-errors"' in html
        assert "&#x27;q&#x27; is a required property" in html
        assert "limit: &#x27;many&#x27; is not of type" in html and "extra" in html

    def test_a_side_effecting_one_needs_confirmation(self, client_for, operator):
        from capabilities.models import Ticket

        html = client_for(operator).post(self.url("create_ticket"), {"arguments": '{"title": "x"}'},
                                         **HTMX).content.decode()
        assert "confirm" in html and not Ticket.objects.exists()

    def test_a_side_effecting_one_needs_the_permission_even_when_confirmed(self, client_for, viewer):
        from capabilities.models import Ticket

        html = client_for(viewer).post(self.url("create_ticket"), {"arguments": '{"title": "x"}', "confirm": "on"},
                                       **HTMX).content.decode()
        assert "needs the permission capabilities.create_ticket" in html and not Ticket.objects.exists()

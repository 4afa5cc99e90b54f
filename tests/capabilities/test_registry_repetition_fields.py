"""volatile_paths, distinct_calls and polling until: registry fields like every other,
versioned, editable in the API and the browser form, and handed to the runtime."""
from __future__ import annotations

import pytest
from django.urls import reverse

from capabilities.models import Capability

pytestmark = pytest.mark.django_db

NEW_HTTP = {"name": "export_status", "kind": "http", "side_effect": "read", "timeout_s": 5,
            "schema": {"type": "object", "properties": {"job": {"type": "string"}}},
            "config": {"url": "https://api.example.com/exports", "method": "GET"}}


@pytest.fixture
def api(api_for, registry_admin, allowlist):
    return api_for(registry_admin)


class TestApi:
    def test_it_creates_and_versions_the_new_fields(self, api):
        created = api.post("/api/capabilities/", {**NEW_HTTP, "polling_max_attempts": 10, "polling_interval_s": 2,
                                                  "polling_until": {"path": "state", "in": ["done", "failed"]},
                                                  "volatile_paths": ["request_id", "meta.generated_at"]},
                           format="json")
        assert created.status_code == 201, created.json()
        body = created.json()
        assert body["polling_until"] == {"path": "state", "in": ["done", "failed"]}
        assert (body["volatile_paths"], body["distinct_calls"]) == (["request_id", "meta.generated_at"], False)
        patched = api.patch("/api/capabilities/export_status/", {"volatile_paths": ["request_id"],
                                                                 "distinct_calls": True}, format="json")
        assert patched.status_code == 200, patched.json()
        changes = api.get("/api/capabilities/export_status/versions/").json()[0]["changes"]
        assert {c["field"] for c in changes} == {"volatile_paths", "distinct_calls"}
        spec = Capability.objects.get(name="export_status").current_version.to_spec()
        assert spec.volatile_paths == ("request_id",) and spec.distinct_calls is True
        assert spec.polling.until == {"path": "state", "in": ["done", "failed"]}

    @pytest.mark.parametrize("field, value", [
        ("volatile_paths", "request_id"), ("volatile_paths", ["a..b"]), ("volatile_paths", ["has space"]),
        ("polling_until", {"path": "state"}), ("polling_until", {"path": "state", "in": "done"}),
        ("polling_until", {"path": "state", "equals": "done", "colour": "red"}),
    ])
    def test_bad_values_are_field_errors(self, api, field, value):
        extra = {"polling_max_attempts": 3, "polling_interval_s": 1} if field == "polling_until" else {}
        response = api.post("/api/capabilities/", {**NEW_HTTP, **extra, field: value}, format="json")
        assert response.status_code == 400, response.json()
        assert field in response.json()["error"]["fields"]

    def test_until_needs_a_polling_policy(self, api):
        response = api.post("/api/capabilities/", {**NEW_HTTP, "polling_until": {"path": "s", "exists": True}},
                            format="json")
        assert response.status_code == 400
        assert "needs a polling policy" in response.json()["error"]["fields"]["polling_until"][0]


class TestForm:
    def test_the_edit_form_sets_the_new_fields(self, api, client_for, registry_admin):
        from capabilities.forms import CapabilityForm

        assert api.post("/api/capabilities/", {**NEW_HTTP, "polling_max_attempts": 5, "polling_interval_s": 1},
                        format="json").status_code == 201
        capability = Capability.objects.get(name="export_status")
        client = client_for(registry_admin)
        page = client.get(reverse("capabilities:edit", args=[capability.name])).content.decode()
        assert 'name="volatile_paths"' in page and 'name="polling_until"' in page and 'name="distinct_calls"' in page
        form = CapabilityForm(capability=capability)
        data = {}
        for name, field in form.fields.items():
            value = form.initial.get(name, field.initial)
            if isinstance(value, bool):
                if value:
                    data[name] = "on"
                continue
            data[name] = field.prepare_value(value) if value is not None else ""
            if isinstance(data[name], list):
                data[name] = [str(v) for v in data[name]]
        data.update(volatile_paths="request_id\nmeta.generated_at\n", distinct_calls="on",
                    polling_until='{"path": "state", "equals": "done"}', change_note="repetition fields")
        response = client.post(reverse("capabilities:edit", args=[capability.name]), data)
        assert response.status_code == 302, response.context["form"].errors
        version = Capability.objects.get(name="export_status").current_version
        assert version.number == 2 and version.volatile_paths == ["request_id", "meta.generated_at"]
        assert version.distinct_calls is True and version.polling_until == {"path": "state", "equals": "done"}
        detail = client.get(reverse("capabilities:detail", args=[capability.name])).content.decode()
        assert "meta.generated_at" in detail and "&quot;equals&quot;: &quot;done&quot;" in detail

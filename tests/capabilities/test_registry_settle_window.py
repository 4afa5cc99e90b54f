"""settle_s: a registry field like every other, versioned, in the API and the form, handed to the runtime."""
from __future__ import annotations

import pytest
from django.urls import reverse

from capabilities.models import Capability

pytestmark = pytest.mark.django_db

NEW_HTTP = {"name": "send_payment", "kind": "http", "side_effect": "external", "timeout_s": 4,
            "status_lookup": True,
            "schema": {"type": "object", "properties": {"to": {"type": "string"}}},
            "config": {"url": "https://api.example.com/payments", "method": "POST",
                       "status_url": "https://api.example.com/payments/{idempotency_key}"}}


@pytest.fixture
def api(api_for, registry_admin, allowlist):
    return api_for(registry_admin)


def test_it_defaults_to_the_timeout_and_versions_a_change(api):
    created = api.post("/api/capabilities/", NEW_HTTP, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["settle_s"] is None
    assert Capability.objects.get(name="send_payment").current_version.to_spec().settle_window_s == 4
    patched = api.patch("/api/capabilities/send_payment/", {"settle_s": 30}, format="json")
    assert patched.status_code == 200, patched.json()
    changes = api.get("/api/capabilities/send_payment/versions/").json()[0]["changes"]
    assert {c["field"] for c in changes} == {"settle_s"}
    assert Capability.objects.get(name="send_payment").current_version.to_spec().settle_window_s == 30


@pytest.mark.parametrize("value", [-1, 86_401, "soon", [3], float("inf")])
def test_bad_values_are_field_errors(api, value):
    body = {**NEW_HTTP, "settle_s": value}
    response = api.post("/api/capabilities/", body, format="json") if value != float("inf") else api.post(
        "/api/capabilities/", '{"name": "x", "kind": "http", "settle_s": Infinity}', content_type="application/json")
    assert response.status_code == 400, response.content


def test_the_form_shows_and_sets_it(api, client_for, registry_admin):
    assert api.post("/api/capabilities/", NEW_HTTP, format="json").status_code == 201
    client = client_for(registry_admin)
    page = client.get(reverse("capabilities:edit", args=["send_payment"])).content.decode()
    assert 'name="settle_s"' in page and "Settle window" in page
    detail = client.get(reverse("capabilities:detail", args=["send_payment"])).content.decode()
    assert "the timeout (4.0 s)" in detail

"""Every API endpoint shares one error body, JSON-only parsing and size limits."""
import json

import pytest
from rest_framework.test import APIClient


@pytest.mark.django_db
class TestApiConventions:
    def test_it_refuses_anonymous_requests_with_the_error_body(self):
        response = APIClient().get("/api/runs/")
        assert response.status_code in (401, 403)
        assert set(response.json()["error"]) >= {"code", "message"}

    def test_it_accepts_token_authentication(self, operator):
        from core.tokens import token_create

        _, key = token_create(user=operator, name="test")
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        assert api.get("/api/runs/").status_code == 200

    def test_it_answers_malformed_json_with_400_and_a_clear_message(self, operator, api_for):
        response = api_for(operator).post("/api/runs/start/", data="{not json", content_type="application/json")
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "malformed_json" and "JSON" in error["message"]

    def test_it_refuses_non_json_bodies(self, operator, api_for):
        response = api_for(operator).post("/api/runs/start/", data={"goal": "x"}, format="multipart")
        assert response.status_code == 415
        assert "error" in response.json()

    def test_it_answers_oversized_bodies_with_413(self, operator, api_for, settings):
        body = json.dumps({"goal": "x" * (settings.API_MAX_BODY_BYTES + 10)})
        response = api_for(operator).post("/api/runs/start/", data=body, content_type="application/json")
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"

    def test_it_lists_every_invalid_field(self, operator, api_for):
        response = api_for(operator).post("/api/runs/start/", data={"goal": "", "completion": {"path": 1},
                                                                    "budgets": {"max_bogus": 1}}, format="json")
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "invalid" and "goal" in error["fields"]

    def test_service_validation_errors_keep_their_fields(self, operator, api_for):
        response = api_for(operator).post("/api/runs/start/", data={
            "goal": "Find it", "completion": {"capability": "search_documents"}, "budgets": {"max_bogus": 1}},
            format="json")
        assert response.status_code == 400
        fields = response.json()["error"]["fields"]
        assert "completion" in fields and "budgets" in fields

    def test_it_serves_a_valid_openapi_schema(self, viewer, client_for):
        response = client_for(viewer).get("/api/schema/", HTTP_ACCEPT="application/json")
        assert response.status_code == 200
        schema = json.loads(response.content) if response["Content-Type"].startswith("application/json") else None
        if schema is None:
            import yaml

            schema = yaml.safe_load(response.content)
        assert "/api/runs/start/" in schema["paths"]

    def test_it_serves_the_api_docs_page(self, viewer, client_for):
        assert client_for(viewer).get("/api/docs/").status_code == 200


def test_the_openapi_schema_generates_without_warnings(tmp_path):
    """`manage.py spectacular --validate --fail-on-warn`, in this process (a warning raises)."""
    from django.core.management import call_command
    from drf_spectacular.drainage import GENERATOR_STATS

    GENERATOR_STATS.reset()  # what schema requests of earlier tests left behind
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml"))
    assert (tmp_path / "schema.yml").read_text().startswith("openapi: 3")


def _api_operations():
    """(method, path, declared query parameters) of every operation the OpenAPI schema documents."""
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
            yield method, path, declared


def test_every_api_view_validates_its_query():
    """Every view under /api/ is an ApiView, so none can ignore a parameter it does not know."""
    from django.urls import URLPattern, URLResolver

    from agentops import api_urls
    from core.api import ApiView

    def views(patterns):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from views(pattern.url_patterns)
            elif isinstance(pattern, URLPattern):
                yield pattern.callback.view_class

    found = list(views(api_urls.urlpatterns))
    assert found and all(issubclass(view, ApiView) for view in found), [v for v in found if not issubclass(v, ApiView)]


@pytest.mark.django_db
def test_every_operation_refuses_an_unknown_query_parameter_by_name_and_takes_the_ones_it_documents(api_for):
    """Issue 35: unknown query parameters were ignored (a misspelt filter answered every run).
    The refusal comes before the handler, so nothing is read, changed or looked up."""
    import re

    from tests.conftest import _make_user

    admin = _make_user("ada", is_superuser=True, is_staff=True)
    api = api_for(admin)
    checked = 0
    for method, path, declared in _api_operations():
        url = re.sub(r"\{[^}]+\}", "1", path)
        response = getattr(api, method)(f"{url}?zzz_unknown=1", format="json")
        assert response.status_code == 400, (method, path, response.status_code)
        assert response.json()["error"]["fields"] == {"zzz_unknown": "unknown field"}, (method, path)
        for name in declared:
            answer = getattr(api, method)(f"{url}?{name}=1", format="json")
            fields = answer.json().get("error", {}).get("fields", {}) if answer.status_code == 400 else {}
            assert fields.get(name) != "unknown field", (method, path, name)
        checked += 1
    assert checked > 40

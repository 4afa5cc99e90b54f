"""Input that would be used against the server is a clear 400, within a second, never a 500.

Deep JSON (10,000 levels), huge JSON fields, non-finite numbers and wrong types, on
every API body and every JSON form field.
"""
from __future__ import annotations

import json
import re
import time

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

DEEP = "[" * 10_000 + "]" * 10_000
DEEP_OBJECT = '{"a":' * 10_000 + "1" + "}" * 10_000
COMPLETION = {"capability": "search_documents", "path": "documents.0.id", "exists": True}


@pytest.fixture
def admin(db):
    from django.contrib.auth.models import User

    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    return User.objects.create_superuser("root", "root@example.com", "pw-root-long-enough")


@pytest.fixture
def api(admin):
    client = APIClient()
    client.force_authenticate(admin)
    return client


def _api_routes():
    return [url for url in _routes() if url.startswith("/api/")]


def _timed(call):
    # A bound for a hang (unbounded recursion, a runaway regex), not a speed target: those take
    # minutes; a loaded CI machine takes a second. Speed is bench/'s business.
    started = time.monotonic()
    response = call()
    assert time.monotonic() - started < 10.0, "refusing bad input must not hang"
    return response


class TestApiBodies:
    @staticmethod
    def refused_by_every_endpoint(api, body: str, message: str) -> None:
        checked = 0
        for url in _api_routes():
            response = _timed(lambda url=url: api.post(url, data=body, content_type="application/json"))
            # 404: an endpoint on a missing object, which never reads the body.
            assert response.status_code in (400, 404, 405), (url, response.status_code)
            if response.status_code == 400:
                assert message in response.json()["error"]["message"], url
                checked += 1
        assert checked >= 8

    @pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT], ids=["array", "object"])
    def test_every_api_endpoint_refuses_deep_json_with_400(self, api, body):
        self.refused_by_every_endpoint(api, body, "nested more than")

    @pytest.mark.parametrize("body", [
        '{"goal": "a\\u0000b", "completion": {"capability": "search_documents\\u0000", "exists": true}}',
        '{"goal": "g", "completion": {"capability": "search_documents", "path": "a", "equals": "\\udfff"}}',
    ], ids=["nul", "lone-surrogate"])
    def test_every_api_endpoint_refuses_a_nul_character_or_a_lone_surrogate_with_400(self, api, body):
        """PostgreSQL keeps no NUL in text or JSON, and no driver encodes a lone surrogate: a 400 on both
        stacks (before: a 500 on PostgreSQL for a NUL, on both for a surrogate, with the run started)."""
        from runs.models import Run

        self.refused_by_every_endpoint(api, body, "NUL character")
        assert not Run.objects.exists()

    def test_every_api_endpoint_refuses_a_body_that_is_not_utf8_with_400(self, api):
        """The bytes UTF-8 would give a lone surrogate (ED A0 80): Python's JSON decoder passes them
        through as one, so the body is decoded strictly first (before: such a run was started)."""
        from runs.models import Run

        body = b'{"goal": "g\xed\xa0\x80", "completion": {"capability": "search_documents", "exists": true}}'
        self.refused_by_every_endpoint(api, body, "Not valid JSON")
        assert not Run.objects.exists()

    def test_the_literal_text_backslash_u0000_is_not_a_nul_character(self, api):
        response = api.post("/api/runs/start/", data='{"goal": "escape \\\\u0000 in docs", "completion": '
                                                      '{"capability": "search_documents", "exists": true}}',
                            content_type="application/json")
        assert response.status_code == 201, response.content
        assert response.json()["goal"] == "escape \\u0000 in docs"

    @pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e309"])
    def test_non_finite_numbers_in_a_body_are_refused(self, api, literal):
        body = ('{"goal": "g", "completion": {"capability": "search_documents", "exists": true}, '
                '"budgets": {"max_cost": ' + literal + '}}')
        response = api.post("/api/runs/start/", data=body, content_type="application/json")
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "malformed_json"

    @pytest.mark.parametrize("budgets,field", [
        ({"max_cost": "inf"}, "budgets.max_cost"),
        ({"max_cost": "NaN"}, "budgets.max_cost"),
        ({"max_cost": -1}, "budgets.max_cost"),
        ({"max_cost": 1e300}, "budgets.max_cost"),
        ({"max_tokens": 2.5}, "budgets.max_tokens"),
        ({"max_tokens": True}, "budgets.max_tokens"),
        ({"max_iterations": 10**30}, "budgets.max_iterations"),
        ({"max_calls_per_capability": ["search_documents"]}, "budgets.max_calls_per_capability"),
        ({"max_calls_per_capability": "search_documents"}, "budgets.max_calls_per_capability"),
        ({"max_calls_per_capability": {"search_documents": "3"}}, "budgets.max_calls_per_capability"),
        ({"max_calls_per_capability": {"search_documents": -3}}, "budgets.max_calls_per_capability"),
        ({"deadline_s": 0}, "budgets.deadline_s"),
        ({"per_call_timeout_s": 0}, "budgets.per_call_timeout_s"),
        ({"max_bogus": 1}, "budgets"),
    ])
    def test_budgets_must_be_finite_numbers_in_range(self, api, budgets, field):
        response = api.post("/api/runs/start/", {"goal": "g", "completion": COMPLETION, "budgets": budgets},
                            format="json")
        assert response.status_code == 400, response.content
        assert field in response.json()["error"]["fields"]

    def test_budgets_as_a_list_are_refused(self, api):
        response = api.post("/api/runs/start/", {"goal": "g", "completion": COMPLETION, "budgets": [1]}, format="json")
        assert response.status_code == 400
        assert "budgets" in response.json()["error"]["fields"]

    def test_valid_budgets_still_start_a_run(self, api):
        response = api.post("/api/runs/start/", {"goal": "g", "completion": COMPLETION, "budgets": {
            "max_cost": 2.5, "max_calls_per_capability": {"search_documents": 3}, "deadline_s": 60}}, format="json")
        assert response.status_code == 201, response.content
        assert response.json()["budgets"]["max_calls_per_capability"] == {"search_documents": 3}

    def test_a_body_at_the_depth_limit_is_accepted_and_one_past_it_is_not(self, api, settings):
        from core import jsonlimits

        limit = settings.AGENTOPS_JSON_MAX_DEPTH
        jsonlimits.loads("[" * limit + "]" * limit)
        with pytest.raises(jsonlimits.JSONLimitError, match="nested more than"):
            jsonlimits.loads("[" * (limit + 1) + "]" * (limit + 1))


class TestFormFields:
    """The JSON textareas of the pages: the start form, evaluations, the registry forms."""

    def _client(self, client, admin):
        client.force_login(admin)
        return client

    def test_start_run_planner_settings(self, client, admin):
        response = _timed(lambda: self._client(client, admin).post("/runs/start/", {
            "goal": "g", "planner": "scripted", "planner_config": DEEP, "completion_capability": "search_documents",
            "completion_check": "exists"}))
        assert response.status_code == 400
        assert "nested more than" in response.content.decode()

    def test_start_run_expected_value(self, client, admin):
        response = _timed(lambda: self._client(client, admin).post("/runs/start/", {
            "goal": "g", "planner": "rules", "completion_capability": "search_documents",
            "completion_check": "equals", "completion_equals": DEEP}))
        assert response.status_code == 400
        assert "nested more than" in response.content.decode()

    @pytest.mark.parametrize("value", ["inf", "nan", "1e309", "-1"])
    def test_start_run_budget_fields(self, client, admin, value):
        response = self._client(client, admin).post("/runs/start/", {
            "goal": "g", "planner": "rules", "completion_capability": "search_documents",
            "completion_check": "exists", "budget_max_cost": value})
        assert response.status_code == 400

    def test_start_evaluation_planner_settings(self, client, admin):
        from evaluation.models import Evaluation

        response = _timed(lambda: self._client(client, admin).post("/evaluations/start/", {
            "planner_config": DEEP}, follow=True))
        assert response.status_code == 200
        assert "nested more than" in response.content.decode()
        assert not Evaluation.objects.exists()

    def test_validate_schema(self, client, admin):
        response = _timed(lambda: self._client(client, admin).post("/capabilities/validate-schema/",
                                                                  {"schema": DEEP_OBJECT}))
        assert response.status_code == 200
        assert "nested more than" in response.content.decode()

    def test_a_huge_json_field_is_refused_by_size(self, client, admin, settings):
        big = json.dumps({"type": "object", "description": "x" * (settings.AGENTOPS_JSON_FIELD_MAX_BYTES + 10)})
        response = self._client(client, admin).post("/capabilities/validate-schema/", {"schema": big})
        assert "the limit is" in response.content.decode()

    def test_capability_create_and_edit(self, client, admin):
        from capabilities.models import Capability

        form = {"name": "deep_one", "kind": "http", "url": "https://api.example.com/x", "method": "GET",
                "schema": DEEP_OBJECT, "headers": DEEP, "max_argument_bytes": 1000, "max_output_bytes": 1000,
                "timeout_s": 5, "retry_max_attempts": 1, "retry_backoff_base_s": 1, "retry_backoff_cap_s": 1,
                "side_effect": "none"}
        c = self._client(client, admin)
        response = _timed(lambda: c.post("/capabilities/new-capability/", form))
        assert response.status_code == 400
        assert "nested more than" in response.content.decode()
        name = Capability.objects.first().name
        response = _timed(lambda: c.post(f"/capabilities/{name}/edit/", {**form, "name": name}))
        assert response.status_code == 400
        assert "nested more than" in response.content.decode()

    def test_a_nul_character_in_a_json_field_is_refused(self, client, admin):
        response = self._client(client, admin).post("/runs/start/", {
            "goal": "g", "planner": "scripted", "planner_config": '{"plans": [], "note": "a\\u0000b"}',
            "completion_capability": "search_documents", "completion_check": "exists"})
        assert response.status_code == 400
        assert "NUL character" in response.content.decode()

    def test_capability_try(self, client, admin):
        from capabilities.models import Capability

        name = Capability.objects.first().name
        response = _timed(lambda: self._client(client, admin).post(f"/capabilities/{name}/try/",
                                                                  {"arguments": DEEP_OBJECT}))
        assert response.status_code == 400
        assert "nested more than" in response.content.decode()


HUGE_NUMBER = "99999999999999999999999"   # past any database integer


class TestAddresses:
    # Every filter a page or the API reads from its address, each given a NUL character.
    NUL_FILTERS = "&".join(f"{name}=a%00" for name in (
        "q", "search", "status", "label", "capability", "owner", "stop_reason", "planner", "page", "cursor", "sort",
        "since", "kind", "side_effect", "enabled", "action", "actor", "project", "view", "queue", "agent", "from",
        "to", "window"))

    def test_no_page_fails_on_a_nul_character_in_its_query_string(self, client, admin):
        """PostgreSQL keeps no NUL in text: a filter holding one must not reach a query as it is."""
        client.force_login(admin)
        failed = []
        for url in sorted(set(_routes())):
            if "logout" in url:
                continue
            response = client.get(f"{url}?{self.NUL_FILTERS}")
            if response.status_code >= 500:
                failed.append((url, response.status_code))
        assert failed == [], "\n".join(f"{code} {url}" for url, code in failed)

    HUGE = HUGE_NUMBER
    HUGE_FILTERS = "&".join(f"{name}={HUGE_NUMBER}" for name in (
        "page", "cursor", "limit", "offset", "page_size", "since", "window", "run", "attempt", "project", "queue",
        "agent", "revision", "min_cost", "max_cost", "min_tokens", "days", "hours", "n"))

    def test_no_page_fails_on_numbers_past_any_database_integer(self, client, admin):
        """In the address (an object's id) and in each filter."""
        client.force_login(admin)
        client.raise_request_exception = False   # every failing page listed, not the first one raised
        failed = []
        for url in sorted(set(_routes(value=self.HUGE))) + [f"{url}?{self.HUGE_FILTERS}" for url in sorted(set(_routes()))]:
            if "logout" in url:
                continue
            response = client.get(url)
            if response.status_code >= 500:
                failed.append((url, response.status_code))
        assert failed == [], "\n".join(f"{code} {url}" for url, code in failed)
        # An id past 18 digits names nothing (core.converters): before, SQLite raised OverflowError on three pages.
        for url in (f"/runs/{HUGE_NUMBER}/attempts/{HUGE_NUMBER}/", f"/evaluations/runs/{HUGE_NUMBER}/twins/",
                    f"/api/runs/{HUGE_NUMBER}/"):
            assert client.get(url).status_code == 404, url


def _routes(resolver=None, prefix="", value="1"):
    """Every GET-able address of the site, each parameter given `value`."""
    for entry in (resolver or get_resolver()).url_patterns:
        if isinstance(entry, URLResolver):
            yield from _routes(entry, prefix + str(entry.pattern), value)
        elif isinstance(entry, URLPattern) and "(?P<format>" not in str(entry.pattern):
            yield "/" + re.sub(r"<(?:\w+:)?\w+>", value, prefix + str(entry.pattern)).replace("^", "").replace("$", "")

"""Schema patterns cannot hold the server: catastrophic backtracking is answered within a second."""
from __future__ import annotations

import time

import pytest

from runtime import schemas
from runtime.budgets import Budgets
from runtime.capability import CapabilitySpec, Kind
from runtime.plan import parse_plan
from runtime.validation import validate_plan

EVIL = {"type": "object", "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}},
        "patternProperties": {"^(b+)+$": {"type": "string"}}, "additionalProperties": {"type": "string"}}
ATTACK = "a" * 40 + "!"


def test_validating_a_catastrophic_pattern_takes_milliseconds():
    started = time.monotonic()
    errors = schemas.errors(EVIL, {"name": ATTACK, "b" * 40 + "!": "x"})
    assert time.monotonic() - started < 1.0
    assert errors and "does not match" in errors[0][1]


def test_a_pattern_that_exceeds_its_time_limit_fails_the_argument_instead_of_hanging():
    # Nested quantifiers with a backreference defeat regex's own optimisations.
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": r"^((a|aa)+\1?)+$"}}}
    started = time.monotonic()
    errors = schemas.errors(schema, {"x": "a" * 5000 + "!"})
    assert time.monotonic() - started < 1.0 and errors


def test_plan_validation_is_quick_too():
    spec = CapabilitySpec(name="greet", kind=Kind.PYTHON, schema=EVIL)

    class Registry:
        def get(self, name):
            return spec if name == "greet" else None

    class Everyone:
        def permits(self, permission):
            return True

    plan = parse_plan({"steps": [{"id": "s1", "capability": "greet", "arguments": {"name": ATTACK}}]}).plan
    started = time.monotonic()
    errors = validate_plan(plan, Registry(), Budgets(), Everyone())
    assert time.monotonic() - started < 1.0 and errors


@pytest.mark.django_db
def test_try_it_answers_400_within_a_second(api_for, registry_admin, settings, try_inline):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["api.example.com"]
    api = api_for(registry_admin)
    created = api.post("/api/capabilities/", {"name": "greet", "kind": "http", "schema": EVIL,
                                              "config": {"url": "https://api.example.com/greet"}}, format="json")
    assert created.status_code == 201, created.json()
    started = time.monotonic()
    response = api.post("/api/capabilities/greet/try/", {"arguments": {"name": ATTACK}}, format="json")
    assert time.monotonic() - started < 1.0
    assert response.status_code == 400 and "does not match" in str(response.json()["error"]["fields"])


@pytest.mark.django_db
def test_an_invalid_pattern_is_refused_at_registration(api_for, registry_admin, settings):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["api.example.com"]
    response = api_for(registry_admin).post("/api/capabilities/", {
        "name": "greet", "kind": "http", "schema": {"type": "object", "properties": {"x": {"pattern": "(unclosed"}}},
        "config": {"url": "https://api.example.com/greet"}}, format="json")
    assert response.status_code == 400 and "regex" in str(response.json())


@pytest.mark.django_db
@pytest.mark.parametrize("schema, message", [
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "does not resolve"),
    ({"type": "object", "properties": {"a": {"$ref": "http://169.254.169.254/s.json"}}}, "does not resolve"),
    ({"type": "object", "properties": {"a": {"$ref": "file:///etc/passwd"}}}, "does not resolve"),
    ({"type": "object", "$ref": "#"}, "loop back"),
    ({"type": "object", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}},
      "properties": {"x": {"$ref": "#/$defs/a"}}}, "loop back"),
])
def test_bad_refs_are_a_clear_400_on_every_registration_path(api_for, registry_admin, settings, client_for,
                                                               schema, message):
    import json

    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["api.example.com"]
    response = api_for(registry_admin).post("/api/capabilities/", {
        "name": "refs", "kind": "http", "schema": schema, "config": {"url": "https://api.example.com/r"}},
        format="json")
    assert response.status_code == 400 and message in json.dumps(response.json())
    page = client_for(registry_admin).post("/capabilities/validate-schema/", {"schema": json.dumps(schema)})
    assert page.status_code == 200 and message in page.content.decode().replace("&#x27;", "'")

"""Probes, the capability registry: hostile schemas and policy values through the API and the pages, and
odd names in the address, are a 4xx naming the field (or a clear refusal), never a 500 or a hang."""
from __future__ import annotations

import json
import time

import pytest

from capabilities.models import Capability, McpServer

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def allowlisted(settings):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["api.example.com", "mcp.example.com"]

BASE = {"name": "probe_cap", "kind": "http", "config": {"url": "https://api.example.com/x", "method": "POST"},
        "schema": {"type": "object", "properties": {"q": {"type": "string"}}}, "side_effect": "read"}
CYCLE = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "type": "object",
         "properties": {"x": {"$ref": "#/$defs/a"}}}
SELF = {"$ref": "#"}

BAD = {
    "schema_list": {"schema": []}, "schema_string": {"schema": "object"}, "schema_null": {"schema": None},
    "schema_true": {"schema": True}, "schema_number": {"schema": 5},
    "schema_bad_type": {"schema": {"type": "objekt"}}, "schema_bad_pattern": {"schema": {"type": "string", "pattern": "("}},
    "schema_ref_cycle": {"schema": CYCLE}, "schema_self_ref": {"schema": SELF},
    "schema_ref_remote": {"schema": {"$ref": "http://169.254.169.254/latest/meta-data"}},
    "schema_ref_file": {"schema": {"$ref": "file:///etc/passwd"}},
    "schema_ref_unknown": {"schema": {"$ref": "#/nowhere"}},
    "schema_huge_enum": {"schema": {"type": "object", "properties": {"x": {"enum": list(range(100_000))}}}},
    "schema_big_minimum": {"schema": {"type": "object", "properties": {"x": {"minimum": 2**70}}}},
    "schema_huge_min_length": {"schema": {"type": "object", "properties": {"x": {"minLength": 2**63}}}},
    "schema_format_regex": {"schema": {"type": "object", "properties": {"x": {"format": "regex"}}}},
    "schema_unknown_dialect": {"schema": {"$schema": "http://example.com/nope", "type": "object"}},
    "schema_dynamic_ref": {"schema": {"$dynamicRef": "#meta", "type": "object"}},
    "timeout_string": {"timeout_s": "five"}, "timeout_negative": {"timeout_s": -1}, "timeout_zero": {"timeout_s": 0},
    "timeout_huge": {"timeout_s": 1e308}, "timeout_int_huge": {"timeout_s": 2**64},
    "retry_string": {"retry_max_attempts": "3"}, "retry_huge": {"retry_max_attempts": 2**64},
    "retry_float": {"retry_max_attempts": 2.5}, "retry_bool": {"retry_max_attempts": True},
    "retry_negative": {"retry_max_attempts": -1}, "backoff_negative": {"retry_backoff_base_s": -1},
    "backoff_huge": {"retry_backoff_cap_s": 1e308}, "max_arg_huge": {"max_argument_bytes": 2**64},
    "max_arg_zero": {"max_argument_bytes": 0}, "max_out_negative": {"max_output_bytes": -5},
    "rate_huge": {"rate_limit_calls": 2**64, "rate_limit_period_s": 1}, "rate_zero": {"rate_limit_calls": 0,
                                                                                      "rate_limit_period_s": 1},
    "rate_period_only": {"rate_limit_period_s": 1e308}, "polling_huge": {"polling_max_attempts": 2**64},
    "polling_interval_negative": {"polling_max_attempts": 2, "polling_interval_s": -1},
    "polling_until_list": {"polling_until": []}, "polling_until_deep": {"polling_until": {"a": {"b": {"c": 1}}}},
    "settle_negative": {"settle_s": -1}, "settle_huge": {"settle_s": 1e308},
    "volatile_huge": {"volatile_paths": ["a." * 5000]}, "volatile_many": {"volatile_paths": ["a"] * 100_000},
    "permission_odd": {"permission": "x" * 10_000}, "permission_dots": {"permission": "a.b.c"},
    "name_long": {"name": "a" * 10_000}, "name_upper": {"name": "ABC"}, "name_digits": {"name": "9" * 30},
    "config_list": {"config": []}, "config_string": {"config": "x"}, "config_number": {"config": 5},
    "config_url_nul": {"config": {"url": "https://api.example.com/\u0000"}},
    "config_url_long": {"config": {"url": "https://api.example.com/" + "a" * 100_000, "method": "GET"}},
    "config_url_port": {"config": {"url": "https://api.example.com:99999/x", "method": "GET"}},
    "config_url_ipv6": {"config": {"url": "https://[::1/x", "method": "GET"}},
    "config_headers_list": {"config": {"url": "https://api.example.com/x", "method": "GET", "headers": [1]}},
    "config_header_value_int": {"config": {"url": "https://api.example.com/x", "method": "GET", "headers": {"a": 1}}},
    "config_header_crlf": {"config": {"url": "https://api.example.com/x", "method": "GET",
                                      "headers": {"a": "b\r\nX-Evil: 1"}}},
    "config_method_odd": {"config": {"url": "https://api.example.com/x", "method": "G E T"}},
    "mcp_server_huge": {"kind": "mcp", "mcp_server": 2**70, "config": {"tool": "x"}},
    "mcp_server_unknown": {"kind": "mcp", "mcp_server": 999_999, "config": {"tool": "x"}},
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_hostile_capability_over_the_api_is_answered_in_time_and_not_a_500(api_for, registry_admin, case):
    started = time.monotonic()
    response = api_for(registry_admin).post("/api/capabilities/", {**BASE, **BAD[case]}, format="json")
    assert response.status_code in (201, 400), (case, response.status_code, response.content[:400])
    assert time.monotonic() - started < 10, case


@pytest.fixture
def http_capability(api_for, registry_admin):
    response = api_for(registry_admin).post("/api/capabilities/", BASE, format="json")
    assert response.status_code == 201, response.content
    return Capability.objects.get(name="probe_cap")


@pytest.mark.parametrize("case", [c for c in BAD if not c.startswith(("name", "mcp_server"))])
def test_a_hostile_capability_edit_over_the_api_is_not_a_500(api_for, registry_admin, http_capability, case):
    response = api_for(registry_admin).patch("/api/capabilities/probe_cap/", BAD[case], format="json")
    assert response.status_code in (200, 400, 409), (case, response.status_code, response.content[:400])


def test_a_catastrophic_pattern_in_a_saved_schema_does_not_hold_a_try(api_for, registry_admin, http_capability):
    schema = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^(a+)+$"}}}
    assert api_for(registry_admin).patch("/api/capabilities/probe_cap/", {"schema": schema},
                                         format="json").status_code == 200
    started = time.monotonic()
    response = api_for(registry_admin).post("/api/capabilities/probe_cap/try/", {"arguments": {"q": "a" * 50_000 + "!"}},
                                            format="json")
    assert time.monotonic() - started < 10
    assert response.status_code in (200, 400), response.content[:300]


@pytest.mark.parametrize("path", ["/capabilities/a%00/", "/capabilities/a%00/edit/", "/capabilities/" + "a" * 10_000 + "/",
                                  "/api/capabilities/a%00/", "/api/capabilities/a%00/versions/",
                                  "/api/capabilities/" + "a" * 10_000 + "/", "/capabilities/%ED%A0%80/",
                                  "/api/capabilities/%ED%A0%80/", "/capabilities/mcp-servers/99999999999999999/import/",
                                  "/api/capabilities/?q=%00", "/capabilities/?q=%00&kind=%00&page=%00"])
def test_odd_names_in_the_address_are_not_a_500(client_for, api_for, registry_admin, path):
    client = api_for(registry_admin) if path.startswith("/api/") else client_for(registry_admin)
    assert client.get(path).status_code < 500


@pytest.mark.parametrize("path", ["/capabilities/a%00/enabled/", "/capabilities/a%00/try/", "/api/capabilities/a%00/enable/",
                                  "/api/capabilities/a%00/try/"])
def test_odd_names_posted_to_are_not_a_500(client_for, api_for, registry_admin, path):
    client = api_for(registry_admin) if path.startswith("/api/") else client_for(registry_admin)
    kwargs = {"format": "json"} if path.startswith("/api/") else {}
    assert client.post(path, {"arguments": {}} if "try" in path else {}, **kwargs).status_code < 500


FORM = {"name": "form_cap", "kind": "http", "url": "https://api.example.com/x", "method": "GET",
        "schema": '{"type": "object"}', "max_argument_bytes": 1000, "max_output_bytes": 1000, "timeout_s": 5,
        "retry_max_attempts": 1, "retry_backoff_base_s": 1, "retry_backoff_cap_s": 1, "side_effect": "none"}
FORM_BAD = {
    "schema_list": {"schema": "[]"}, "schema_nan": {"schema": '{"type": "object", "maximum": NaN}'},
    "schema_cycle": {"schema": json.dumps(CYCLE)}, "schema_nul": {"schema": '{"type": "object", "title": "\\u0000"}'},
    "schema_surrogate": {"schema": '{"type": "object", "title": "\\ud800"}'},
    "schema_bigint": {"schema": '{"type": "object", "maximum": %s}' % ("9" * 400)},
    "timeout_nan": {"timeout_s": "nan"}, "timeout_inf": {"timeout_s": "inf"}, "timeout_huge": {"timeout_s": "1e999"},
    "timeout_neg": {"timeout_s": "-1"}, "retry_huge": {"retry_max_attempts": "9" * 30},
    "retry_float": {"retry_max_attempts": "2.5"}, "max_arg_huge": {"max_argument_bytes": "9" * 30},
    "rate_huge": {"rate_limit_calls": "9" * 30, "rate_limit_period_s": "1"},
    "polling_huge": {"polling_max_attempts": "9" * 30}, "settle_nan": {"settle_s": "NaN"},
    "url_nul": {"url": "https://api.example.com/\x00"}, "url_port": {"url": "https://api.example.com:99999/"},
    "url_ipv6": {"url": "https://[::1/x"}, "url_long": {"url": "https://example.com/" + "a" * 100_000},
    "headers_list": {"headers": "[1]"}, "headers_crlf": {"headers": '{"a": "b\\r\\nX: 1"}'},
    "expected_version_huge": {"expected_version": "9" * 30}, "name_nul": {"name": "a\x00"},
}


@pytest.mark.parametrize("case", list(FORM_BAD))
def test_a_hostile_capability_form_is_a_400(client_for, registry_admin, case):
    response = client_for(registry_admin).post("/capabilities/new-capability/", {**FORM, **FORM_BAD[case]})
    assert response.status_code in (302, 400), (case, response.status_code, response.content[:300])


@pytest.mark.parametrize("case", [c for c in FORM_BAD if c != "name_nul"])
def test_a_hostile_capability_edit_form_is_a_400(client_for, registry_admin, http_capability, case):
    data = {**FORM, "name": "probe_cap", "expected_version": http_capability.current_version.number, **FORM_BAD[case]}
    response = client_for(registry_admin).post("/capabilities/probe_cap/edit/", data)
    assert response.status_code in (302, 400, 409), (case, response.status_code, response.content[:300])


SERVERS = [
    {"name": "s", "transport": "http", "url": "https://mcp.example.com:99999/mcp"},
    {"name": "s", "transport": "http", "url": "https://[::1/mcp"},
    {"name": "s", "transport": "http", "url": "https://mcp.example.com/\x00"},
    {"name": "s", "transport": "http", "url": "gopher://mcp.example.com/"},
    {"name": "s", "transport": "http", "url": "https://bücher.example/mcp"},
    {"name": "s", "transport": "http", "url": "https://" + "a" * 490 + ".com"},
    {"name": "s", "transport": "http", "url": "https://[fe80::1%25eth0]/mcp"},
    {"name": "s", "transport": "stdio", "command": "python\x00", "args": "-c\nprint(1)"},
    {"name": "s", "transport": "stdio", "command": "python", "args": "\x00"},
    {"name": "s", "transport": "stdio", "command": "python", "env_vars": "A=B\nC\x00"},
    {"name": "s", "transport": "stdio", "command": "python", "env_vars": "x" * 100_000},
    {"name": "s" * 10_000, "transport": "http", "url": "https://mcp.example.com/mcp"},
    {"name": "s", "transport": "carrier-pigeon"},
]


@pytest.mark.parametrize("data", SERVERS, ids=lambda d: repr(d)[:50])
def test_a_hostile_mcp_server_form_is_a_400(client_for, registry_admin, data):
    response = client_for(registry_admin).post("/capabilities/mcp-servers/new/", data)
    assert response.status_code in (302, 400, 403), (response.status_code, response.content[:300])


@pytest.mark.parametrize("data", SERVERS, ids=lambda d: repr(d)[:50])
def test_a_hostile_mcp_server_over_the_api_is_a_400(api_for, registry_admin, data):
    body = {**data}
    if "args" in body:
        body["args"] = body["args"].split("\n")
    if "env_vars" in body:
        body["env_vars"] = body["env_vars"].split("\n")
    response = api_for(registry_admin).post("/api/mcp-servers/", body, format="json")
    assert response.status_code in (201, 400, 403), (response.status_code, response.content[:300])
    if response.status_code != 201:
        assert not McpServer.objects.exists()


@pytest.mark.parametrize("config", [[], "x", 5, ["url"]])
def test_an_edit_whose_config_is_no_object_is_a_400_naming_it(api_for, registry_admin, http_capability, config):
    """Before: the HTTP kind upper-cased the method of whatever came (config.get on a list: a 500)."""
    response = api_for(registry_admin).patch("/api/capabilities/probe_cap/", {"config": config}, format="json")
    assert response.status_code == 400
    assert "config" in response.json()["error"]["fields"]
    http_capability.refresh_from_db()
    assert http_capability.current_version.number == 1


@pytest.mark.parametrize("path", ["/capabilities/probe_cap%00/", "/api/capabilities/probe_cap%00/",
                                  "/api/capabilities/probe_cap%00/versions/"])
def test_a_nul_in_a_capability_name_in_the_address_is_a_404(client_for, api_for, registry_admin, http_capability,
                                                            path):
    """Before: the name reached the query as it was, and PostgreSQL refused it: a 500."""
    client = api_for(registry_admin) if path.startswith("/api/") else client_for(registry_admin)
    assert client.get(path).status_code == 404

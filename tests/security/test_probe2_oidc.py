"""Probes, sign-in: odd query strings on the provider's callback and the sign-in pages, and odd bodies on the
token login API, are a 4xx or the sign-in page saying why, never a 500."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def sso(settings):
    """Single sign-on configured against a provider that is not there (nothing listens on port 9)."""
    settings.AGENTOPS_OIDC_ISSUER = "http://127.0.0.1:9"
    settings.AGENTOPS_OIDC_ENABLED = True
    settings.AGENTOPS_OIDC_CLIENT_ID = settings.OIDC_RP_CLIENT_ID = "agentops"
    settings.AGENTOPS_OIDC_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET = "secret"
    settings.AGENTOPS_OIDC_ALLOW_PRIVATE = True
    backends = [b for b in settings.AUTHENTICATION_BACKENDS if b != "identity.backend.OidcBackend"]
    settings.AUTHENTICATION_BACKENDS = [*backends, "identity.backend.OidcBackend"]


QUERIES = [
    "code=abc&state=xyz", "code=&state=", "code=a&code=b&state=s&state=t", "code=%00&state=%00",
    "code=" + "a" * 100_000 + "&state=" + "s" * 100_000, "state=%00", "error=%00", "error=" + "e" * 100_000,
    "error=access_denied&error_description=%00", "code=%ED%A0%80&state=%ED%A0%80", "code=%FF%FE&state=%FF",
    "code", "state", "=&=&&&", "code=a;state=b", "%00=%00", "code[]=a&state[]=b",
]


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q[:40])
def test_an_odd_callback_without_a_sign_in_started_is_refused(client, sso, query):
    response = client.get(f"/oidc/callback/?{query}")
    assert response.status_code in (302, 400, 403), (response.status_code, response.content[:300])


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q[:40])
def test_an_odd_callback_with_a_sign_in_started_is_refused(client, sso, query):
    session = client.session
    session["oidc_states"] = {"xyz": {"code_verifier": "v" * 50, "nonce": "n", "added_on": 9e9}}
    session.save()
    response = client.get(f"/oidc/callback/?{query}")
    assert response.status_code in (302, 400, 403, 502), (response.status_code, response.content[:300])


def test_a_callback_with_garbage_for_a_started_state_is_refused(client, sso):
    session = client.session
    session["oidc_states"] = {"s\x00": {"code_verifier": "v", "nonce": "n", "added_on": 9e9}}
    session.save()
    for query in ("code=a&state=s%00", "code=%00&state=s%00"):
        assert client.get(f"/oidc/callback/?{query}").status_code < 500


@pytest.mark.parametrize("path", [
    "/oidc/authenticate/?next=%00", "/oidc/authenticate/?next=" + "a" * 50_000, "/oidc/authenticate/?next=//evil",
    "/login/?next=%00", "/login/?next=" + "/" * 50_000, "/login/?next=%ED%A0%80", "/login/?next=http://[::1",
    "/oidc/authenticate/?next=http://[::1",
])
def test_odd_sign_in_queries_are_not_a_500(client, sso, path):
    assert client.get(path).status_code in (200, 302, 400, 403, 404, 502)   # 502: the provider is not there


@pytest.mark.parametrize("data", [
    {"username": "a\x00", "password": "p"}, {"username": "a", "password": "p\x00"},
    {"username": "a" * 100_000, "password": "p"}, {"username": "a" * 256, "password": "p"},
    {"username": ["a", "b"], "password": "p"},
])
def test_odd_login_posts_are_not_a_500(client, data):
    assert client.post("/login/", data).status_code < 500


def test_a_username_longer_than_any_accounts_is_a_failed_sign_in(client, operator):
    """Before: django-axes recorded the failure with the username, and PostgreSQL refused one past 255
    characters in its column: a 500 on the sign-in page."""
    response = client.post("/login/", {"username": operator.username + "x" * 300, "password": "p"})
    assert response.status_code == 200
    assert "Your username and password did not match" in response.content.decode()


def test_a_duplicated_login_field_is_not_a_500(client, operator):
    body = "username=a&username=b&password=p&password=q"
    assert client.post("/login/", body, content_type="application/x-www-form-urlencoded").status_code < 500


@pytest.mark.parametrize("body, content_type", [
    ('{"username": "a", "password": "p", "expires_in_days": 99999999999999999999}', "application/json"),
    ('{"username": "a", "password": "p", "expires_in_days": "7"}', "application/json"),
    ('{"username": "a", "password": "p", "expires_in_days": true}', "application/json"),
    ('{"username": null, "password": null}', "application/json"),
    ('{"username": ["a"], "password": {"p": 1}}', "application/json"),
    ('{"username": "a\\u0000", "password": "p"}', "application/json"),
    ('{"username": "a\\ud800", "password": "p"}', "application/json"),
    ('{"username": "a", "password": "p", "project": "\\u0000"}', "application/json"),
    ('{"username": "a", "password": "p", "name": "%s"}' % ("n" * 10_000), "application/json"),
    ('[]', "application/json"), ('"x"', "application/json"), ("", "application/json"), ("{", "application/json"),
    ("[" * 100_000, "application/json"), ('{"username": "a", "password": NaN}', "application/json"),
    ("username=a&password=p", "application/x-www-form-urlencoded"), ("username=a&password=p", "text/plain"),
    ("\xff\xfe", "application/json"), ("username=a%00&password=p", "multipart/form-data; boundary=x"),
])
def test_odd_token_login_bodies_are_a_4xx(client, operator, body, content_type):
    response = client.post("/api/auth/token/", body, content_type=content_type)
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])


def test_a_token_login_with_the_right_password_and_an_odd_name_or_project_is_a_400(client, operator):
    operator.set_password("pw-for-probe")
    operator.save()
    for extra in ({"name": "x" * 101}, {"project": "nope"}, {"project": 5}, {"expires_in_days": 2**70},
                  {"expires_in_days": 0}, {"name": ""}):
        response = client.post("/api/auth/token/", {"username": operator.username, "password": "pw-for-probe",
                                                    **extra}, content_type="application/json")
        assert response.status_code in (400, 403), (extra, response.status_code, response.content[:300])

"""Roles from the provider's claims: the groups claim read as providers send it, mapped by configuration."""
from identity.services import governed_projects, groups_of, roles_for


def test_groups_come_as_a_list_or_one_string(settings):
    settings.AGENTOPS_OIDC_GROUPS_CLAIM = "groups"
    assert groups_of({"groups": ["ops", "platform", 7, None]}) == ["ops", "platform", "7"]
    assert groups_of({"sub": "x"}) == []
    settings.AGENTOPS_OIDC_GROUPS_CLAIM = "hd"  # Google: the Workspace domain, one string
    assert groups_of({"hd": "example.com"}) == ["example.com"]


def test_roles_are_the_union_of_the_mapped_groups(settings):
    settings.AGENTOPS_OIDC_ROLE_MAP = {"ops": ["operator"], "platform": ["registry admin", "lead operator"]}
    assert roles_for(["ops", "platform", "unknown"]) == {("default", "operator"), ("default", "registry admin"),
                                                         ("default", "lead operator")}
    assert roles_for(["unknown"]) == set()


def test_a_role_may_name_its_project(settings):
    settings.AGENTOPS_OIDC_ROLE_MAP = {"payments-ops": ["payments:operator", "viewer"], "search": ["search:viewer"]}
    assert roles_for(["payments-ops", "search"]) == {("payments", "operator"), ("default", "viewer"),
                                                     ("search", "viewer")}
    assert governed_projects() == {"payments", "default", "search"}


def test_the_client_secret_is_redacted_from_what_the_server_stores_and_shows(settings, db):
    from capabilities.egress import server_redactor

    settings.AGENTOPS_OIDC_CLIENT_SECRET = "oidc-client-secret-value-42"
    assert "oidc-client-secret-value-42" not in server_redactor()("token call failed: oidc-client-secret-value-42")

"""Who may see and change notification rules, channels and deliveries (pages and API)."""
import pytest
from rest_framework.test import APIClient

ALL = {"viewer", "operator", "registry_admin"}
MATRIX = [
    ("get", "/notifications/", None, ALL),
    ("get", "/notifications/deliveries/", None, ALL),
    ("post", "/notifications/", {"form": "channel", "channel-name": "m",
                                 "channel-url": "jsons://hooks.example.com/x"}, {"operator"}),
    ("get", "/api/notifications/rules/", None, ALL),
    ("get", "/api/notifications/channels/", None, ALL),
    ("get", "/api/notifications/deliveries/", None, ALL),
    ("post", "/api/notifications/channels/", {"name": "c", "url": "jsons://hooks.example.com/x"}, {"operator"}),
]


@pytest.mark.django_db
@pytest.mark.parametrize("method,url,body,allowed", MATRIX, ids=[f"{m} {u}" for m, u, _, _ in MATRIX])
def test_role_matrix(method, url, body, allowed, nobody, viewer, operator, registry_admin, settings):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["hooks.example.com"]
    users = {"nobody": nobody, "viewer": viewer, "operator": operator, "registry_admin": registry_admin}
    for role in sorted(["anonymous", *users], key=lambda r: r in allowed):
        api = APIClient()
        if role != "anonymous":
            api.force_login(users[role])
        if method == "get":
            response = api.get(url)
        else:
            response = api.post(url, body, format="json") if url.startswith("/api/") else api.post(url, body)
        if role in allowed:
            assert response.status_code < 400, (role, url, response.status_code)
        elif role == "anonymous":
            assert response.status_code in (302, 401, 403), (role, url, response.status_code)
        else:
            assert response.status_code == 403, (role, url, response.status_code)

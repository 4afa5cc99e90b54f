"""API tokens: hashed at rest, expiring, listed and revoked by their owner, revoked on a password change."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from core.models import ApiToken, AuditEvent
from core.tokens import token_create


def _with_token(key):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return api


@pytest.mark.django_db
class TestTokenAuthentication:
    def test_a_new_token_authenticates_and_only_its_hash_is_stored(self, operator):
        token, key = token_create(user=operator, name="ci")
        assert _with_token(key).get("/api/runs/").status_code == 200
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM agentops_apitoken")
            rows = cursor.fetchall()
        assert rows and not any(key in str(value) for row in rows for value in row)
        assert token.prefix == key[:10] and len(token.key_hash) == 64

    def test_bearer_works_too(self, operator):
        _, key = token_create(user=operator, name="ci")
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        assert api.get("/api/runs/").status_code == 200

    def test_an_expired_token_is_refused_with_a_clear_message(self, operator):
        token, key = token_create(user=operator, name="ci", expires_in_days=1)
        ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        response = _with_token(key).get("/api/runs/")
        assert response.status_code in (401, 403)
        assert "expired" in response.json()["error"]["message"]

    def test_an_unknown_token_is_refused(self, operator):
        response = _with_token("ao_not-a-real-token").get("/api/runs/")
        assert response.status_code in (401, 403)
        assert response.json()["error"]["message"] == "Invalid token."

    def test_a_token_of_a_deactivated_user_is_refused(self, operator):
        _, key = token_create(user=operator, name="ci")
        operator.is_active = False
        operator.save()
        assert _with_token(key).get("/api/runs/").status_code in (401, 403)

    def test_use_is_recorded(self, operator):
        token, key = token_create(user=operator, name="ci")
        _with_token(key).get("/api/runs/")
        token.refresh_from_db()
        assert token.last_used_at is not None


@pytest.mark.django_db
class TestTokenApi:
    def test_a_user_creates_lists_and_revokes_their_own_tokens(self, viewer):
        api = APIClient()
        api.force_authenticate(viewer)
        created = api.post("/api/tokens/", {"name": "laptop", "expires_in_days": 7}, format="json")
        assert created.status_code == 201
        body = created.json()
        assert body["key"].startswith("ao_") and body["name"] == "laptop"
        assert timedelta(days=6) < timezone.datetime.fromisoformat(body["expires_at"]) - timezone.now() <= timedelta(days=7)
        listed = api.get("/api/tokens/").json()
        assert listed["count"] == 1 and "key" not in listed["results"][0]
        key = body["key"]
        assert _with_token(key).get("/api/runs/").status_code == 200
        revoked = api.post(f"/api/tokens/{body['id']}/revoke/")
        assert revoked.status_code == 200 and revoked.json()["revoked_at"]
        response = _with_token(key).get("/api/runs/")
        assert response.status_code in (401, 403) and "revoked" in response.json()["error"]["message"]
        assert AuditEvent.objects.filter(action__in=["token.created", "token.revoked"]).count() == 2

    def test_nobody_sees_or_revokes_another_users_tokens(self, viewer, operator):
        token, key = token_create(user=operator, name="theirs")
        api = APIClient()
        api.force_authenticate(viewer)
        assert api.get("/api/tokens/").json()["count"] == 0
        assert api.post(f"/api/tokens/{token.pk}/revoke/").status_code == 404
        assert _with_token(key).get("/api/runs/").status_code == 200

    @pytest.mark.parametrize("body", [{"name": ""}, {"name": "x", "expires_in_days": 0},
                                      {"name": "x", "expires_in_days": 100_000}, {"name": "x" * 101}])
    def test_bad_token_requests_are_400(self, viewer, body):
        api = APIClient()
        api.force_authenticate(viewer)
        assert api.post("/api/tokens/", body, format="json").status_code == 400

    def test_a_token_may_create_another_token_but_anonymous_may_not(self, viewer):
        _, key = token_create(user=viewer, name="ci")
        assert _with_token(key).post("/api/tokens/", {"name": "child"}, format="json").status_code == 201
        assert APIClient().post("/api/tokens/", {"name": "x"}, format="json").status_code in (401, 403)


@pytest.mark.django_db
class TestPasswordLogin:
    def test_a_username_and_password_get_a_token(self, operator):
        response = APIClient().post("/api/auth/token/", {"username": "otto", "password": "pw-otto",
                                                         "name": "script"}, format="json")
        assert response.status_code == 201
        assert _with_token(response.json()["key"]).get("/api/runs/").status_code == 200

    def test_a_wrong_password_gets_none(self, operator):
        response = APIClient().post("/api/auth/token/", {"username": "otto", "password": "nope"}, format="json")
        assert response.status_code in (401, 403)
        assert not ApiToken.objects.exists()


@pytest.mark.django_db
class TestTokenPage:
    def test_the_page_creates_shows_the_key_once_and_revokes(self, client, viewer):
        client.force_login(viewer)
        response = client.post("/account/tokens/", {"name": "notebook", "expires_in_days": 30})
        assert response.status_code == 200
        token = ApiToken.objects.get(user=viewer)
        html = response.content.decode()
        key = html.split('id="new-token-key">')[1].split("<")[0]
        assert key.startswith(token.prefix)
        again = client.get("/account/tokens/").content.decode()
        assert key not in again and token.prefix in again
        response = client.post(f"/account/tokens/{token.pk}/revoke/", follow=True)
        assert "is revoked" in response.content.decode()
        token.refresh_from_db()
        assert token.revoked_reason == "revoked by owner"

    def test_bad_lifetimes_are_refused_on_the_page(self, client, viewer):
        client.force_login(viewer)
        response = client.post("/account/tokens/", {"name": "n", "expires_in_days": 100_000})
        assert response.status_code == 400 and not ApiToken.objects.exists()

    def test_another_users_token_cannot_be_revoked_from_the_page(self, client, viewer, operator):
        token, _ = token_create(user=operator, name="theirs")
        client.force_login(viewer)
        client.post(f"/account/tokens/{token.pk}/revoke/")
        token.refresh_from_db()
        assert token.revoked_at is None


@pytest.mark.django_db
class TestRevokedOnPasswordChange:
    def test_the_password_page_revokes_every_token(self, client, operator):
        _, key = token_create(user=operator, name="a")
        token_create(user=operator, name="b")
        client.force_login(operator)
        response = client.post("/account/password/", {"old_password": "pw-otto", "new_password1": "Blue-Heron-Lake-72",
                                                      "new_password2": "Blue-Heron-Lake-72"}, follow=True)
        assert "API tokens were revoked" in response.content.decode()
        assert set(ApiToken.objects.values_list("revoked_reason", flat=True)) == {"password changed"}
        assert _with_token(key).get("/api/runs/").status_code in (401, 403)
        # The session that changed it stays logged in.
        assert client.get("/account/tokens/").status_code == 200

    def test_any_password_change_revokes_them(self, operator):
        _, key = token_create(user=operator, name="a")
        operator.set_password("Another-Long-Passphrase-9")
        operator.save()
        assert _with_token(key).get("/api/runs/").status_code in (401, 403)

    def test_other_saves_of_the_user_keep_the_tokens(self, operator):
        _, key = token_create(user=operator, name="a")
        operator.first_name = "Otto"
        operator.save()
        operator.last_login = timezone.now()
        operator.save(update_fields=["last_login"])
        assert _with_token(key).get("/api/runs/").status_code == 200


@pytest.mark.django_db
def test_the_command_prints_a_working_key(operator, capsys):
    from django.core.management import call_command

    call_command("create_api_token", "otto", "--days", "3")
    key = capsys.readouterr().out.strip()
    assert _with_token(key).get("/api/runs/").status_code == 200

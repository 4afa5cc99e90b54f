"""Login throttling, the password rules, and error reports without credentials."""
from __future__ import annotations

import sys

import pytest
from django.test import RequestFactory
from django.views.debug import ExceptionReporter
from rest_framework.test import APIClient


@pytest.fixture
def limit(settings):
    return settings.AXES_FAILURE_LIMIT


@pytest.mark.django_db
class TestLoginThrottling:
    def _login(self, client, password):
        return client.post("/login/", {"username": "otto", "password": password})

    def test_failures_lock_the_login_page_with_a_message_even_for_the_right_password(self, client, operator, limit):
        for _ in range(limit - 1):
            assert self._login(client, "wrong").status_code == 200
        locked = self._login(client, "wrong")
        assert locked.status_code == 429
        assert "Too many failed logins" in locked.content.decode()
        right = self._login(client, "pw-otto")
        assert right.status_code == 429 and "_auth_user_id" not in client.session
        assert "locked for 15 minutes" in right.content.decode()

    def test_a_success_before_the_limit_resets_the_count(self, client, operator, limit):
        for _ in range(limit - 1):
            self._login(client, "wrong")
        assert self._login(client, "pw-otto").status_code == 302
        client.logout()
        assert self._login(client, "wrong").status_code == 200

    def test_the_lock_is_per_username_and_address(self, client, operator, second_operator, limit):
        for _ in range(limit):
            self._login(client, "wrong")
        assert client.post("/login/", {"username": "olga", "password": "pw-olga"}).status_code == 302
        other_address = client.post("/login/", {"username": "otto", "password": "pw-otto"},
                                    REMOTE_ADDR="10.9.8.7")
        assert other_address.status_code == 302

    def test_the_api_password_login_is_throttled_the_same_way(self, operator, limit):
        api = APIClient()
        for _ in range(limit - 1):
            assert api.post("/api/auth/token/", {"username": "otto", "password": "x"}, format="json").status_code in (401, 403)
        locked = api.post("/api/auth/token/", {"username": "otto", "password": "x"}, format="json")
        assert locked.status_code == 429
        assert locked.json()["error"]["code"] == "locked_out"
        right = api.post("/api/auth/token/", {"username": "otto", "password": "pw-otto"}, format="json")
        assert right.status_code == 429 and "Too many failed logins" in right.json()["error"]["message"]

    def test_failures_on_the_api_count_for_the_login_page(self, client, operator, limit):
        api = APIClient()
        for _ in range(limit):
            api.post("/api/auth/token/", {"username": "otto", "password": "x"}, format="json")
        assert self._login(client, "pw-otto").status_code == 429


@pytest.mark.django_db
class TestPasswordRules:
    @pytest.mark.parametrize("password,problem", [
        ("short-1", "too short"),
        ("12345678901234", "entirely numeric"),
        ("password1234", "too common"),
        ("otto.lindqvist", "too similar"),
    ])
    def test_the_full_validator_set_applies_on_the_password_page(self, client, operator, password, problem):
        operator.email = "otto.lindqvist@example.com"
        operator.save()
        client.force_login(operator)
        response = client.post("/account/password/", {"old_password": "pw-otto", "new_password1": password,
                                                      "new_password2": password})
        assert response.status_code == 200
        assert problem in response.content.decode()

    def test_every_django_validator_is_configured(self, settings):
        names = {v["NAME"].rsplit(".", 1)[1] for v in settings.AUTH_PASSWORD_VALIDATORS}
        assert names == {"UserAttributeSimilarityValidator", "MinimumLengthValidator", "CommonPasswordValidator",
                         "NumericPasswordValidator"}


class TestErrorReports:
    """Django's DEBUG page and error mails must not show credentials embedded in URLs."""

    SECRET = "s3cr3t-Passw0rd"

    def _report(self, settings, **meta):
        settings.DEBUG = True
        settings.CELERY_BROKER_URL = f"redis://:{self.SECRET}@redis.internal:6379/0"
        settings.SOME_SERVICE = {"upstream": f"https://bot:{self.SECRET}@api.example.com/v1"}
        request = RequestFactory().get("/boom", **meta)
        database_url = f"postgres://agentops:{self.SECRET}@db.internal/agentops"  # noqa: F841 (a frame variable)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            reporter = ExceptionReporter(request, *sys.exc_info())
        return reporter.get_traceback_html() + reporter.get_traceback_text()

    def test_urls_with_credentials_are_cleansed_in_settings_meta_and_frames(self, settings):
        page = self._report(settings, DATABASE_URL=f"postgres://agentops:{self.SECRET}@db.internal/agentops")
        assert self.SECRET not in page
        assert "redis.internal" in page and "db.internal" in page  # the rest stays readable

    def test_posted_passwords_are_hidden_even_with_debug_on(self, settings):
        settings.DEBUG = True
        request = RequestFactory().post("/login/", {"username": "otto", "password": self.SECRET})
        request.sensitive_post_parameters = ["password"]
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            page = ExceptionReporter(request, *sys.exc_info()).get_traceback_html()
        assert self.SECRET not in page and "otto" in page

    def test_the_filter_is_the_default(self, settings):
        assert settings.DEFAULT_EXCEPTION_REPORTER_FILTER == "agentops.debug.CredentialCleansingFilter"

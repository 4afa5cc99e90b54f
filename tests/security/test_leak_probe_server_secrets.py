"""Leak probes, the server's own secrets: a settings error never quotes a password, and the server's redactor
knows every secret the server holds (database, replica, broker and result-backend passwords, the Slack app's)."""
from __future__ import annotations

import runpy
import secrets
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from capabilities.egress import server_redactor

ROOT = Path(__file__).resolve().parents[2]
CANARY = f"S3CRET-canary-{secrets.token_hex(6)}"


@pytest.fixture
def settings_error(monkeypatch, tmp_path):
    """The ImproperlyConfigured agentops/settings.py raises in this environment (as a start-up log shows it)."""
    def load(**env):
        monkeypatch.setenv("AGENTOPS_VAR_DIR", str(tmp_path))
        monkeypatch.setenv("SECRET_KEY", "k" * 50)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        with pytest.raises(ImproperlyConfigured) as raised:
            runpy.run_path(str(ROOT / "agentops" / "settings.py"))
        return str(raised.value)

    return load


class TestSettingsErrors:
    def test_a_broker_url_of_an_unknown_scheme_is_refused_without_its_password(self, settings_error):
        message = settings_error(CELERY_BROKER_URL=f"redis+sentinel://:{CANARY}@broker:26379/0")
        assert "CELERY_BROKER_URL" in message and "redis+sentinel" in message and CANARY not in message

    def test_an_issuer_with_credentials_is_refused_without_them(self, settings_error):
        message = settings_error(AGENTOPS_OIDC_ISSUER=f"https://client:{CANARY}@id.example.com/realms/acme",
                                 AGENTOPS_OIDC_CLIENT_ID="agentops", AGENTOPS_OIDC_CLIENT_SECRET="x" * 20)
        assert "no credentials" in message and "id.example.com" in message and CANARY not in message


class TestServerRedactor:
    @pytest.mark.parametrize("variable, value", [
        ("DATABASE_URL", f"postgres://agentops:{CANARY}@db:5432/agentops"),
        ("DATABASE_REPLICA_URL", f"postgres://reader:{CANARY}@replica:5432/agentops"),
        ("CELERY_BROKER_URL", f"redis://:{CANARY}@redis:6379/0"),
        ("CELERY_RESULT_BACKEND", f"redis://:{CANARY}@results:6379/1"),
    ], ids=lambda value: value if value.isupper() else "")   # the canary is drawn per process: not in the ids
    def test_it_knows_the_password_of_every_connection_url(self, monkeypatch, settings, variable, value):
        settings.AGENTOPS_LLM_ENDPOINTS = {}
        monkeypatch.setattr("capabilities.egress._registry_secret_names", lambda version=None: [])
        monkeypatch.setenv(variable, value)
        assert CANARY not in server_redactor()(f"could not connect: password {CANARY!r} rejected")

    def test_it_knows_a_password_written_percent_encoded_in_the_url(self, monkeypatch, settings):
        settings.AGENTOPS_LLM_ENDPOINTS = {}
        monkeypatch.setattr("capabilities.egress._registry_secret_names", lambda version=None: [])
        monkeypatch.setenv("DATABASE_REPLICA_URL", f"postgres://reader:{CANARY}%40%2F@replica:5432/agentops")
        assert CANARY not in server_redactor()(f"authentication failed for password {CANARY}@/")

    @pytest.mark.parametrize("name", ["AGENTOPS_SLACK_BOT_TOKEN", "AGENTOPS_SLACK_SIGNING_SECRET"])
    def test_it_knows_the_slack_apps_secrets(self, monkeypatch, settings, name):
        settings.AGENTOPS_LLM_ENDPOINTS = {}
        monkeypatch.setattr("capabilities.egress._registry_secret_names", lambda version=None: [])
        setattr(settings, name, f"xoxb-{CANARY}")
        assert CANARY not in server_redactor()(f"slack said: invalid_auth for xoxb-{CANARY}")

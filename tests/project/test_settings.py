"""Settings come from the environment and fail loudly on bad values."""
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

ROOT = Path(__file__).resolve().parents[2]


# What agentops.pytest_env sets for the test session: not part of a fresh environment.
SESSION_ONLY = ("DATABASE_URL", "CELERY_BROKER_URL", "DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "SECURE_SSL_REDIRECT",
                "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE")


@pytest.fixture
def load_settings(monkeypatch, tmp_path):
    """agentops/settings.py run afresh in this process, in a fresh environment: its names (or the
    ImproperlyConfigured it raises). SECRET_KEY is set unless given as None; None removes a variable."""
    def load(**env):
        for name in SESSION_ONLY:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AGENTOPS_VAR_DIR", str(tmp_path))
        monkeypatch.setenv("SECRET_KEY", "k" * 50)
        for name, value in env.items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        return runpy.run_path(str(ROOT / "agentops" / "settings.py"))

    return load


class TestSettings:
    def test_it_defaults_to_sqlite_and_the_embedded_broker(self, load_settings):
        settings = load_settings()
        assert settings["DATABASES"]["default"]["ENGINE"].endswith("sqlite3")
        assert settings["CELERY_BROKER_URL"].startswith("embedded://")

    def test_debug_is_off_unless_asked_for(self, load_settings):
        assert load_settings()["DEBUG"] is False
        assert load_settings(DEBUG="true")["DEBUG"] is True

    def test_with_debug_on_it_generates_a_secret_key_once(self, load_settings, tmp_path):
        key = load_settings(DEBUG="true", SECRET_KEY=None)["SECRET_KEY"]
        assert (tmp_path / "secret_key").read_text().strip() == key
        assert load_settings(DEBUG="true", SECRET_KEY=None)["SECRET_KEY"] == key

    def test_it_uses_postgres_from_database_url(self, load_settings):
        settings = load_settings(DATABASE_URL="postgres://postgres@127.0.0.1:5432/test")
        assert settings["DATABASES"]["default"]["ENGINE"] == "django.db.backends.postgresql"

    @pytest.mark.parametrize("name,value,message", [
        ("DEBUG", "maybe", "DEBUG must be a boolean"),
        ("DATABASE_URL", "mysql://x/y", "DATABASE_URL must start with postgres:// or sqlite://"),
        ("CELERY_BROKER_URL", "ftp://broker", "CELERY_BROKER_URL must be redis://"),
        ("API_MAX_BODY_BYTES", "lots", "API_MAX_BODY_BYTES must be an integer"),
        ("API_MAX_BODY_BYTES", "10", "API_MAX_BODY_BYTES must be at least 1024"),
        ("CSRF_TRUSTED_ORIGINS", "example.com", "need a scheme"),
    ])
    def test_it_refuses_bad_values(self, load_settings, name, value, message):
        with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
            load_settings(**{name: value})

    @pytest.mark.parametrize("env,message", [
        ({"AGENTOPS_LOCAL_PASSWORDS": "off"}, "AGENTOPS_LOCAL_PASSWORDS=off needs single sign-on"),
        ({"AGENTOPS_OIDC_ISSUER": "https://id.example.com"}, "needs AGENTOPS_OIDC_CLIENT_ID"),
        ({"AGENTOPS_OIDC_ISSUER": "id.example.com", "AGENTOPS_OIDC_CLIENT_ID": "a",
          "AGENTOPS_OIDC_CLIENT_SECRET": "b"}, "AGENTOPS_OIDC_ISSUER must be an http(s) URL"),
        ({"AGENTOPS_OIDC_ROLE_MAP": "[1]"}, "must be a JSON object of group names"),
        ({"AGENTOPS_OIDC_ROLE_MAP": '{"ops": ["root"]}'}, "group 'ops': unknown role 'root'"),
    ])
    def test_it_refuses_bad_single_sign_on_settings(self, load_settings, env, message):
        with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
            load_settings(**env)

    def test_single_sign_on_from_the_environment(self, load_settings):
        settings = load_settings(AGENTOPS_OIDC_ISSUER="https://id.example.com/realms/ops/",
                                 AGENTOPS_OIDC_CLIENT_ID="agentops", AGENTOPS_OIDC_CLIENT_SECRET="x" * 20,
                                 AGENTOPS_OIDC_ROLE_MAP='{"ops": "operator", "admins": ["registry admin"]}',
                                 AGENTOPS_OIDC_END_SESSION_ENDPOINT="https://logout.example.com/end",
                                 AGENTOPS_LOCAL_PASSWORDS="off")
        assert settings["AGENTOPS_OIDC_ISSUER"] == "https://id.example.com/realms/ops"
        assert settings["AGENTOPS_OIDC_ROLE_MAP"] == {"ops": ["operator"], "admins": ["registry admin"]}
        assert settings["AUTHENTICATION_BACKENDS"] == ["axes.backends.AxesStandaloneBackend",
                                                       "core.backends.ProjectRoleBackend",
                                                       "identity.backend.OidcBackend"]
        # The sign-out form's redirect to the provider: its origins, nothing more.
        form_action = settings["CONTENT_SECURITY_POLICY"]["DIRECTIVES"]["form-action"]
        assert form_action[1:] == ["https://id.example.com", "https://logout.example.com"]
        off = load_settings(AGENTOPS_OIDC_ISSUER=None, AGENTOPS_LOCAL_PASSWORDS=None)
        assert off["AGENTOPS_OIDC_ENABLED"] is False and "identity.backend.OidcBackend" not in \
            off["AUTHENTICATION_BACKENDS"]

    def test_it_refuses_to_start_without_secret_key_when_debug_is_off(self, load_settings):
        with pytest.raises(ImproperlyConfigured, match="SECRET_KEY is not set"):
            load_settings(SECRET_KEY=None)

    @pytest.mark.slow  # `manage.py check --deploy` in a process of its own, with production settings
    def test_it_passes_the_deploy_check_with_production_settings(self, tmp_path):
        env = {k: v for k, v in os.environ.items() if k not in SESSION_ONLY + ("DJANGO_ALLOW_ASYNC_UNSAFE",)}
        env.update(AGENTOPS_VAR_DIR=str(tmp_path), DEBUG="false", SECRET_KEY="x" * 20 + "production-secret-" + "y" * 30,
                   ALLOWED_HOSTS="agentops.example.com", CSRF_TRUSTED_ORIGINS="https://agentops.example.com",
                   DATABASE_URL="postgres://postgres@127.0.0.1:5432/test", CELERY_BROKER_URL="redis://127.0.0.1:6379/0")
        result = subprocess.run([sys.executable, "manage.py", "check", "--deploy"],
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        # HSTS preload is an operator's commitment, so it stays opt-in (SECURE_HSTS_PRELOAD).
        issues = [line for line in (result.stdout + result.stderr).splitlines() if "(security." in line]
        assert all("security.W021" in line for line in issues), issues

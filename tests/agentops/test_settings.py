"""Settings come from the environment and fail loudly on bad values."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


# What agentops.pytest_env sets for the test session: not part of a fresh environment.
SESSION_ONLY = ("DATABASE_URL", "CELERY_BROKER_URL", "DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "SECURE_SSL_REDIRECT",
                "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE")


def load_settings(tmp_path, **env):
    """Settings in a fresh process; SECRET_KEY is set unless env says SECRET_KEY=None."""
    base = {k: v for k, v in os.environ.items() if k not in SESSION_ONLY}
    base.update({"AGENTOPS_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "agentops.settings",
                 "SECRET_KEY": "k" * 50})
    base.update({k: v for k, v in env.items() if v is not None})
    base = {k: v for k, v in base.items() if env.get(k, "") is not None}
    return subprocess.run(
        [sys.executable, "-c", "import django; from django.conf import settings; django.setup();"
                               "print(settings.DATABASES['default']['ENGINE']); print(settings.CELERY_BROKER_URL);"
                               "print('DEBUG', settings.DEBUG)"],
        cwd=ROOT, env=base, capture_output=True, text=True, timeout=60,
    )


class TestSettings:
    def test_it_defaults_to_sqlite_and_the_embedded_broker(self, tmp_path):
        result = load_settings(tmp_path)
        assert result.returncode == 0, result.stderr
        assert "sqlite3" in result.stdout and "embedded://" in result.stdout

    def test_debug_is_off_unless_asked_for(self, tmp_path):
        assert "DEBUG False" in load_settings(tmp_path).stdout
        assert "DEBUG True" in load_settings(tmp_path, DEBUG="true").stdout

    def test_with_debug_on_it_generates_a_secret_key_once(self, tmp_path):
        result = load_settings(tmp_path, DEBUG="true", SECRET_KEY=None)
        assert result.returncode == 0, result.stderr
        assert (tmp_path / "secret_key").exists()

    def test_it_uses_postgres_from_database_url(self, tmp_path):
        result = load_settings(tmp_path, DATABASE_URL="postgres://postgres@127.0.0.1:5432/test")
        assert result.returncode == 0, result.stderr
        assert "postgresql" in result.stdout

    @pytest.mark.parametrize("name,value,message", [
        ("DEBUG", "maybe", "DEBUG must be a boolean"),
        ("DATABASE_URL", "mysql://x/y", "DATABASE_URL must start with postgres:// or sqlite://"),
        ("CELERY_BROKER_URL", "ftp://broker", "CELERY_BROKER_URL must be redis://"),
        ("API_MAX_BODY_BYTES", "lots", "API_MAX_BODY_BYTES must be an integer"),
        ("API_MAX_BODY_BYTES", "10", "API_MAX_BODY_BYTES must be at least 1024"),
        ("CSRF_TRUSTED_ORIGINS", "example.com", "need a scheme"),
    ])
    def test_it_refuses_bad_values(self, tmp_path, name, value, message):
        result = load_settings(tmp_path, **{name: value})
        assert result.returncode != 0
        assert message in result.stderr

    def test_it_refuses_to_start_without_secret_key_when_debug_is_off(self, tmp_path):
        result = load_settings(tmp_path, SECRET_KEY=None)
        assert result.returncode != 0
        assert "SECRET_KEY is not set" in result.stderr

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

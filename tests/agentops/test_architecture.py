"""Layering rules that keep the runtime core pure."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_runtime_core_imports_no_django_celery_or_app_code():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "Contracts: 1 kept, 0 broken" in result.stdout


def test_every_model_change_has_its_migration(tmp_path):
    import os

    env = {**os.environ, "AGENTOPS_VAR_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr

"""The environment of a benchmark process and the workers it starts.

Benchmarks run the production settings (DEBUG off), which need a SECRET_KEY and
assume HTTPS. As the tests do (agentops/pytest_env.py), a process gets a key of
its own and plain-HTTP cookies and redirects, unless the environment says otherwise.
"""
import os
import secrets
import subprocess
import sys
from pathlib import Path


def prepare() -> None:
    os.environ.setdefault("SECRET_KEY", "bench-" + secrets.token_urlsafe(40))
    for name in ("SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE"):
        os.environ.setdefault(name, "false")


def act_in_default_project() -> None:
    """After django.setup(): the benchmark's data is made and read in the default project, as a request
    of someone holding a role there would (core.projects)."""
    from core.project_access import default_project
    from core.projects import enter_project

    enter_project(default_project())


def start_django(root: Path) -> None:
    """Migrate the database os.environ names, set Django up on it, and act in the default project."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentops.settings"
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=root, env=os.environ, check=True)
    if os.environ.get("AGENTOPS_BENCH_UNPARTITIONED"):   # a side-by-side figure with attempts in one table
        unpartition_attempts(root)
    import django

    django.setup()
    act_in_default_project()


def unpartition_attempts(root: Path) -> None:
    """PostgreSQL: reverse migration runs.0033, for a side-by-side figure with attempts in one table."""
    subprocess.run([sys.executable, "manage.py", "migrate", "runs", "0032", "-v", "0"], cwd=root, env=os.environ,
                   check=True)

"""Loaded by pytest before Django settings (addopts -p): isolates test state.

Tests keep their SQLite files and embedded broker folder under var/test, so a
running development instance (var/) never takes a test's tasks.
"""
import os
from pathlib import Path

os.environ.setdefault("AGENTOPS_VAR_DIR", str(Path(__file__).resolve().parent.parent / "var" / "test"))
# Playwright runs an event loop in the test thread; Django's ORM is still used synchronously.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

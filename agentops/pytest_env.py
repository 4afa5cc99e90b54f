"""Loaded by pytest before Django settings (addopts -p): isolates test state.

Tests keep their SQLite files and embedded broker folder under var/test, so a
running development instance (var/) never takes a test's tasks.
"""
import os
import sys
from pathlib import Path

# Bytecode is cached even where PYTHONDONTWRITEBYTECODE is set (container images often set it):
# each test process, and each worker or server a test starts, would otherwise compile every module
# of the project and every rewritten test module afresh, ~4 s of the fast core. __pycache__ is
# ignored by git.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

os.environ.setdefault("AGENTOPS_VAR_DIR", str(Path(__file__).resolve().parent.parent / "var" / "test"))
# Under pytest-xdist (-n 2) each worker process gets a folder of its own (var/test/gw0, ...):
# its SQLite file and its embedded broker, so two workers never share a queue. (Workers
# inherit the controller's environment, hence no setdefault.)
# On a broker they share (Redis), each worker sends and takes its tasks on a queue of its own.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["AGENTOPS_VAR_DIR"] = str(Path(os.environ["AGENTOPS_VAR_DIR"]) / os.environ["PYTEST_XDIST_WORKER"])
    os.environ["AGENTOPS_TASK_QUEUE"] = "agentops-test-" + os.environ["PYTEST_XDIST_WORKER"]
# Playwright runs an event loop in the test thread; Django's ORM is still used synchronously.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
# Tests run with the production default (DEBUG off), which needs a SECRET_KEY: one per
# session, inherited by the worker and server processes tests start. The test client
# and the live server speak plain HTTP, so the HTTPS-only defaults are relaxed here.
os.environ.setdefault("SECRET_KEY", "test-" + __import__("secrets").token_urlsafe(40))
for _name in ("SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE"):
    os.environ.setdefault(_name, "false")

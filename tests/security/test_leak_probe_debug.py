"""Leak probes, Django's error reports: a password written with an unencoded @ is hidden whole."""
from __future__ import annotations

import secrets
import sys

from django.test import RequestFactory
from django.views.debug import ExceptionReporter

from core.audit_log import masked

CANARY = f"S3CRET-canary-{secrets.token_hex(6)}"


def test_a_password_with_an_at_sign_is_cleansed_whole_from_the_debug_page(settings):
    settings.DEBUG = True
    # urllib, redis-py and kombu read the userinfo up to the last @: the password is "p@" + CANARY.
    settings.CELERY_BROKER_URL = f"redis://:p@{CANARY}@redis.internal:6379/0"
    request = RequestFactory().get("/boom", DATABASE_URL=f"postgres://agentops:x@{CANARY}@db.internal/agentops")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        reporter = ExceptionReporter(request, *sys.exc_info())
    page = reporter.get_traceback_html() + reporter.get_traceback_text()
    assert CANARY not in page
    assert "redis.internal" in page and "db.internal" in page


def test_the_audit_log_masks_a_password_holding_an_at_sign_whole():
    """The audit log keeps the user and hides the password, read as the debug page reads it."""
    assert masked(f"redis://bob:p@{CANARY}@redis.internal:6379/0?to=x@example.com", "url") == \
        "redis://bob:[redacted]@redis.internal:6379/0?to=x@example.com"

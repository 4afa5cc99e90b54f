"""Django's error reports (the DEBUG page, error e-mails) without credentials.

SafeExceptionReporterFilter hides settings whose *names* look secret; a value such
as CELERY_BROKER_URL=redis://:password@host or a DATABASE_URL in request.META (the
development server copies the environment there) has an innocent name. Here every
string that embeds credentials in a URL is cleansed too, wherever it appears:
settings, request META and traceback variables.
"""
from __future__ import annotations

import re

from django.views.debug import SafeExceptionReporterFilter

from core.userinfo import without_userinfo


def cleanse_urls(value, substitute: str, _depth: int = 0):
    """The value with URL userinfo replaced, looking into dicts, lists and tuples."""
    if isinstance(value, str):
        # str(): lazy strings pass isinstance() but the regex needs the real text.
        return without_userinfo(str(value), substitute)
    if _depth < 8 and isinstance(value, dict):
        return {k: cleanse_urls(v, substitute, _depth + 1) for k, v in value.items()}
    if _depth < 8 and isinstance(value, (list, tuple)):
        cleansed = [cleanse_urls(v, substitute, _depth + 1) for v in value]
        return cleansed if isinstance(value, list) else tuple(cleansed)
    return value


class CredentialCleansingFilter(SafeExceptionReporterFilter):
    hidden_settings = re.compile(
        "API|AUTH|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|CREDENTIAL|DSN", flags=re.IGNORECASE)

    def is_active(self, request):
        # Django trusts a DEBUG page with POSTed passwords and @sensitive_variables; we do not:
        # DEBUG gets switched on in places it should not be.
        return True

    def cleanse_setting(self, key, value):
        return cleanse_urls(super().cleanse_setting(key, value), self.cleansed_substitute)

    def get_safe_request_meta(self, request):
        return cleanse_urls(super().get_safe_request_meta(request), self.cleansed_substitute)

    def get_traceback_frame_variables(self, request, tb_frame):
        return [(name, cleanse_urls(value, self.cleansed_substitute))
                for name, value in super().get_traceback_frame_variables(request, tb_frame)]

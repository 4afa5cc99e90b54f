"""Secrets in transit: which headers carry credentials, and one redactor for every error text.

A secret's value lives only in the environment of the processes that need it.
Configuration names the variable (`secret_headers`, `secret_env`, an LLM
endpoint's `api_key_env`); the value is read at call time. Error texts are
where values leak (a library quoting the header it refused, a server echoing
the request, a stderr line), so every error text an executor produces passes
through `Redactor` before it is stored in an attempt, shown in try it, or put
in a planner's prompt (the prompt is built from stored attempts).
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

REDACTED = "[redacted]"
# How configuration names the environment variable that holds a secret (never the secret itself).
ENV_VAR_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Shorter values would redact ordinary words; no real credential is this short.
MIN_SECRET_CHARS = 6

_CREDENTIAL_NAMES = frozenset({
    "authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key", "apikey",
    "x-auth-token", "private-token", "x-csrf-token", "x-xsrf-token", "x-amz-security-token",
    "x-goog-api-key", "ocp-apim-subscription-key", "x-functions-key", "x-vault-token",
    "metadata-flavor", "x-aws-ec2-metadata-token", "x-aws-ec2-metadata-token-ttl-seconds",
})
# *-Token, *-Key, *-Secret, *_token, X-Auth-*, anything with auth/session/password/credential in it.
_CREDENTIAL_PATTERN = re.compile(
    r"(?:[-_.](?:token|key|secret|signature|sig|password|passwd|pass)$)|auth|session|password|credential|secret",
    re.IGNORECASE)
# Headers whose name looks like a credential but that we set ourselves and that carry none.
_NOT_CREDENTIALS = frozenset({"idempotency-key"})


def is_credential_header(name: str) -> bool:
    """True when a header of this name carries a credential: store it only as an env reference."""
    lowered = name.strip().lower()
    if lowered in _NOT_CREDENTIALS:
        return False
    return lowered in _CREDENTIAL_NAMES or bool(_CREDENTIAL_PATTERN.search(lowered))


def has_line_break(value: str) -> bool:
    return "\r" in value or "\n" in value


def secret_env_names(config: Mapping[str, Any]) -> list[str]:
    """The environment variables a capability's config reads secrets from."""
    names: list[str] = []
    for key in ("secret_headers", "secret_env"):
        mapping = config.get(key)
        if isinstance(mapping, Mapping):
            names.extend(str(v) for v in mapping.values())
    env = config.get("env")
    if isinstance(env, list):
        names.extend(str(v) for v in env)
    return names


class Redactor:
    """Removes the given secret values (and their common encodings) from texts."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        forms: set[str] = set()
        for value in values:
            if not isinstance(value, str):
                continue
            for form in _forms(value):
                if len(form) >= MIN_SECRET_CHARS:
                    forms.add(form)
        # Longest first, so a value containing another is removed whole.
        self.forms = sorted(forms, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self.forms)

    def __call__(self, text: str) -> str:
        if not text or not self.forms:
            return text
        for form in self.forms:
            if form in text:
                text = text.replace(form, REDACTED)
        return text

    def plus(self, values: Iterable[str]) -> Redactor:
        merged = Redactor(values)
        merged.forms = sorted(set(self.forms) | set(merged.forms), key=len, reverse=True)
        return merged

    def json_value(self, value: Any) -> Any:
        """The same for a JSON value (a failure's body): strings anywhere inside are redacted."""
        if value is None or not self.forms:
            return value
        text = json.dumps(value, ensure_ascii=False, default=str)
        cleaned = self(text)
        if cleaned == text:
            return value
        try:
            return json.loads(cleaned)
        except ValueError:
            return REDACTED


def _forms(value: str) -> list[str]:
    """The value as it may appear in a message: raw, per line, repr/JSON-escaped, URL-encoded, bytes repr."""
    stripped = value.strip()
    forms = [value, stripped]
    forms.extend(line.strip() for line in re.split(r"[\r\n]+", value))
    forms.append(json.dumps(value)[1:-1])
    forms.append(repr(value)[1:-1])
    forms.append(repr(value.encode("utf-8", errors="replace"))[2:-1])
    forms.append(quote(value, safe=""))
    return forms


def redactor_for(names: Iterable[str], environ: Mapping[str, str]) -> Redactor:
    return Redactor(environ[name] for name in names if environ.get(name))

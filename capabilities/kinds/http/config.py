"""What an HTTP webhook's config must satisfy to be registered: url, method, headers, status lookup."""
from __future__ import annotations

import re
from typing import Any

from capabilities.egress import registration_refusal
from capabilities.executors.secrets import ENV_VAR_NAME, has_line_break, is_credential_header
from core.errors import FieldErrors

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
CONFIG_KEYS = frozenset({"url", "method", "headers", "secret_headers", "status_url", "allow_redirects",
                         "max_response_bytes"})


def normalized(config: dict) -> dict:
    """The config as stored: the method in upper case."""
    if isinstance(config.get("method"), str):
        return {**config, "method": config["method"].upper()}
    return config


def config_errors(errors: FieldErrors, config: dict, policy: dict[str, Any]) -> None:
    extra = sorted(set(config) - CONFIG_KEYS)
    if extra:
        errors.add("config", f"Unknown config keys: {', '.join(extra)}. Known: {', '.join(sorted(CONFIG_KEYS))}.")
    _url_errors(errors, config)
    method = config.get("method", "GET")
    if not isinstance(method, str) or method.upper() not in METHODS:
        errors.add("config.method", f"Must be one of {', '.join(METHODS)}.")
    _header_errors(errors, config.get("headers") or {})
    _secret_header_errors(errors, config.get("secret_headers") or {})
    if "allow_redirects" in config and not isinstance(config["allow_redirects"], bool):
        errors.add("config.allow_redirects", "Must be true or false.")
    if "max_response_bytes" in config:
        value = config["max_response_bytes"]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            errors.add("config.max_response_bytes", "Must be a whole number of bytes, at least 1.")
    if policy.get("status_lookup") and not config.get("status_url"):
        errors.add("status_lookup", "Set a status URL to look up whether a call committed.")


def _url_errors(errors: FieldErrors, config: dict) -> None:
    for key in ("url", "status_url"):
        url = config.get(key)
        if key == "status_url" and not url:
            continue
        if not isinstance(url, str) or not url.strip():
            errors.add(f"config.{key}", "Enter the URL to call.")
        elif refusal := registration_refusal(url):
            errors.add(f"config.{key}", refusal)


def _header_errors(errors: FieldErrors, headers: Any) -> None:
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        errors.add("config.headers", "Must be an object of header names to text values.")
        return
    for name in headers:
        if not HEADER_NAME.match(name):
            errors.add("config.headers", f"{name!r} is not a valid header name.")
        elif is_credential_header(name):
            errors.add("config.headers", f"{name} carries a credential: put the name of the environment "
                                         "variable that holds it in secret headers instead.")
        elif has_line_break(headers[name]):
            errors.add("config.headers", f"The value of {name} contains a line break (CR or LF).")


def _secret_header_errors(errors: FieldErrors, secret_headers: Any) -> None:
    if not isinstance(secret_headers, dict):
        errors.add("config.secret_headers", "Must be an object of header names to environment variable names.")
        return
    for name, env_var in secret_headers.items():
        if not isinstance(name, str) or not HEADER_NAME.match(name):
            errors.add("config.secret_headers", f"{name!r} is not a valid header name.")
        if not isinstance(env_var, str) or not ENV_VAR_NAME.match(env_var):
            errors.add("config.secret_headers",
                       f"The value for {name} must be an environment variable NAME (like TICKETS_API_TOKEN), "
                       "never the secret itself.")

"""What a python capability's config must satisfy: the function it names (written by sync, from code)."""
from __future__ import annotations

from typing import Any

from core.errors import FieldErrors


def config_errors(errors: FieldErrors, config: dict, policy: dict[str, Any]) -> None:
    if not isinstance(config.get("function"), str) or ":" not in config.get("function", ""):
        errors.add("config.function", 'Must name the function as "module:qualname".')
    if policy.get("status_lookup") and not config.get("status_lookup"):
        errors.add("status_lookup", "The function registers no status lookup.")

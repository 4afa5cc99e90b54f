"""Planners a run can use. Each only proposes; the runtime validates and decides."""
from __future__ import annotations

import fnmatch
import math
import os
import re
from urllib.parse import urlsplit

from runs.runtime.planners import ScriptedPlanner

PLANNER_HELP = {
    "scripted": "A fixed list of plans (planner_config: {\"plans\": [...]}) — tests and scenarios.",
    "rules": "Deterministic demo planner for the bundled capabilities: no model needed.",
    "llm": "Any OpenAI-compatible chat-completions endpoint (OpenAI, Azure OpenAI, vLLM, Ollama, llama.cpp, "
           "LiteLLM). planner_config: {\"base_url\", \"model\", \"api_key_env\" (the NAME of the environment "
           "variable holding the key), \"temperature\", \"max_tokens\", \"price_per_1k_prompt_tokens\", "
           "\"price_per_1k_completion_tokens\", \"timeout_s\", \"max_retries\", \"extra_headers\", "
           "\"azure_api_version\"}.",
    "external": "An agent running elsewhere submits each plan through the API "
                "(GET /api/runs/<id>/planning/, POST /api/runs/<id>/plans/); no planner_config.",
}

LLM_KEYS = {"base_url", "model", "api_key_env", "temperature", "max_tokens", "price_per_1k_prompt_tokens",
            "price_per_1k_completion_tokens", "timeout_s", "max_retries", "extra_headers", "azure_api_version"}
# (minimum, maximum, integer only) for the numeric LLM settings.
LLM_NUMBERS = {"temperature": (0.0, 2.0, False), "max_tokens": (1, 200_000, True),
               "price_per_1k_prompt_tokens": (0.0, 1_000.0, False),
               "price_per_1k_completion_tokens": (0.0, 1_000.0, False),
               "timeout_s": (0.1, 600.0, False), "max_retries": (0, 10, True)}
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
# Secrets travel only through api_key_env, never inside a run's stored config.
SECRET_HEADERS = {"authorization", "api-key", "proxy-authorization", "cookie"}


def planner_for(run):
    """Build the planner a run was started with."""
    return planner_from(run.planner, run.planner_config, run_id=run.pk)


def planner_from(kind: str, config: dict, *, run_id: int | None = None):
    """Build a planner from its kind and settings (runs, evaluations)."""
    if kind == "scripted":
        return ScriptedPlanner(config.get("plans", []))
    if kind == "rules":
        from runs.planners.rules import RulesPlanner

        return RulesPlanner()
    if kind == "llm":
        from django.conf import settings

        from runs.planners.llm import LLMConfig, LLMPlanner

        key_env = config.get("api_key_env") or ""
        llm_config = LLMConfig.from_planner_config(config, api_key=os.environ.get(key_env, "") if key_env else "")
        # The lease is renewed while the planner thinks; this only bounds one propose() call.
        return LLMPlanner(llm_config, time_limit_s=max(96.0, settings.AGENTOPS_RUN_LEASE_SECONDS * 0.8))
    if kind == "external" and run_id is not None:
        from runs.planners.external import ExternalPlanner

        return ExternalPlanner(run_id)
    raise ValueError(f"planner {kind!r} is not available")


def validate_planner_config(planner: str, config: dict) -> dict[str, str]:
    """Field errors for a planner's settings; empty when fine."""
    if planner == "scripted":
        plans = config.get("plans")
        if not isinstance(plans, list) or not plans:
            return {"planner_config": "The scripted planner needs planner_config.plans: a non-empty list of plans."}
    elif planner == "llm":
        return llm_config_errors(config)
    elif planner == "external":
        if config:
            return {"planner_config": "The external planner takes no planner_config: the agent submits its plans "
                                      "through the API."}
    elif planner not in PLANNER_HELP:
        return {"planner": f"Unknown planner {planner!r}; choose one of {', '.join(sorted(PLANNER_HELP))}."}
    return {}


def llm_config_errors(config: dict) -> dict[str, str]:
    errors: dict[str, str] = {}
    unknown = sorted(set(config) - LLM_KEYS)
    if unknown:
        errors["planner_config"] = f"Unknown settings: {', '.join(unknown)}. Known: {', '.join(sorted(LLM_KEYS))}."
    error = _base_url_error(config.get("base_url"))
    if error:
        errors["planner_config.base_url"] = error
    model = config.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > 200:
        errors["planner_config.model"] = "Name the model (a non-empty string of at most 200 characters)."
    error = _key_env_error(config.get("api_key_env"))
    if error:
        errors["planner_config.api_key_env"] = error
    for name, (low, high, integer) in LLM_NUMBERS.items():
        if name not in config:
            continue
        value = config[name]
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int))
                or not math.isfinite(value) or not low <= value <= high):
            kind = "an integer" if integer else "a number"
            errors[f"planner_config.{name}"] = f"Must be {kind} from {low:g} to {high:g}."
    headers = config.get("extra_headers", {})
    if not isinstance(headers, dict) or not all(
            isinstance(k, str) and HEADER_NAME.fullmatch(k) and isinstance(v, str) and "\n" not in v
            and "\r" not in v for k, v in headers.items()):
        errors["planner_config.extra_headers"] = "An object of header names to string values."
    elif any(k.lower() in SECRET_HEADERS for k in headers):
        errors["planner_config.extra_headers"] = ("Credentials may not be stored in a run's config: put the key in "
                                                  "an environment variable and name it in api_key_env.")
    version = config.get("azure_api_version", "")
    if not isinstance(version, str) or (version and not re.fullmatch(r"[A-Za-z0-9.\-]{1,40}", version)):
        errors["planner_config.azure_api_version"] = "An API version such as 2024-10-21."
    return errors


def _base_url_error(value) -> str:
    if not isinstance(value, str) or not value:
        return "The endpoint's base URL, e.g. https://api.openai.com/v1 or http://localhost:11434/v1."
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "Must be an http:// or https:// URL with a host."
    if parts.username or parts.password:
        return "Credentials may not be part of the URL: use api_key_env."
    if parts.query or parts.fragment:
        return "No query or fragment: the planner adds /chat/completions (and api-version for Azure)."
    allowed = _setting("AGENTOPS_LLM_ALLOWED_HOSTS", [])
    if allowed and not any(fnmatch.fnmatch(parts.hostname.lower(), pattern.lower()) for pattern in allowed):
        return f"The host {parts.hostname} is not in AGENTOPS_LLM_ALLOWED_HOSTS."
    return ""


def _key_env_error(value) -> str:
    """The NAME of an environment variable; limited so a run cannot send any secret of the
    server (say DJANGO_SECRET_KEY) to an endpoint of its choosing."""
    if value is None or value == "":
        return ""   # a local endpoint (Ollama, llama.cpp) may need no key
    if not isinstance(value, str) or not ENV_NAME.fullmatch(value) or len(value) > 100:
        return "The NAME of an environment variable (letters, digits, underscores), e.g. OPENAI_API_KEY, not the key."
    extra = _setting("AGENTOPS_LLM_API_KEY_ENVS", [])
    if not value.upper().endswith("_API_KEY") and value not in extra:
        return ("Only variables named *_API_KEY (or listed in AGENTOPS_LLM_API_KEY_ENVS) may hold a model key, "
                "e.g. OPENAI_API_KEY.")
    return ""


def _setting(name: str, default: list[str]) -> list[str]:
    from django.conf import settings

    return list(getattr(settings, name)) or default

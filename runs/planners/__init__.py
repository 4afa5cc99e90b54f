"""Planners a run can use. Each only proposes; the runtime validates and decides."""
from __future__ import annotations

import math
import os

from runs.planners.external import ExternalPlanner
from runs.planners.gateway import GatewayPlanner
from runs.planners.llm import LLMConfig, LLMPlanner, UnavailablePlanner
from runs.planners.rules import RulesPlanner
from runtime.sim.planners import ScriptedPlanner

PLANNER_HELP = {
    "scripted": "A fixed list of plans (planner_config: {\"plans\": [...]}) — tests and scenarios.",
    "rules": "Deterministic demo planner for the bundled capabilities: no model needed.",
    "llm": "An OpenAI-compatible chat-completions endpoint the administrator configured (AGENTOPS_LLM_ENDPOINTS: "
           "OpenAI, Azure OpenAI, vLLM, Ollama, llama.cpp, LiteLLM). planner_config: {\"endpoint\" (its name), "
           "\"model\", \"temperature\", \"max_tokens\", \"price_per_1k_prompt_tokens\", "
           "\"price_per_1k_completion_tokens\", \"timeout_s\", \"max_retries\"}.",
    "external": "An agent running elsewhere submits each plan through the API "
                "(GET /api/runs/<id>/planning/, POST /api/runs/<id>/plans/); no planner_config.",
    "gateway": "An MCP client through the gateway (/mcp/): each tools/call is a one-step plan. Started by the "
               "gateway when a registered agent opens a session, not by hand.",
}

# A run names an endpoint; the URL, the key and any headers are the server's (AGENTOPS_LLM_ENDPOINTS).
LLM_KEYS = {"endpoint", "model", "temperature", "max_tokens", "price_per_1k_prompt_tokens",
            "price_per_1k_completion_tokens", "timeout_s", "max_retries"}
# (minimum, maximum, integer only) for the numeric LLM settings.
LLM_NUMBERS = {"temperature": (0.0, 2.0, False), "max_tokens": (1, 200_000, True),
               "price_per_1k_prompt_tokens": (0.0, 1_000.0, False),
               "price_per_1k_completion_tokens": (0.0, 1_000.0, False),
               "timeout_s": (0.1, 600.0, False), "max_retries": (0, 10, True)}
ENDPOINTS_HELP = ('an administrator sets AGENTOPS_LLM_ENDPOINTS, e.g. {"openai": {"base_url": '
                  '"https://api.openai.com/v1", "api_key_env": "OPENAI_API_KEY"}}, then runs name "endpoint": "openai"')


def planner_for(run, *, on_proposed=None):
    """Build the planner a run was started with. on_proposed(user_id): told who proposed each
    plan a person submitted (the external planner), so the plan runs with their permissions too."""
    return planner_from(run.planner, run.planner_config, run_id=run.pk, on_proposed=on_proposed)


def planner_from(kind: str, config: dict, *, run_id: int | None = None, on_proposed=None):
    """Build a planner from its kind and settings (runs, evaluations)."""
    if kind == "scripted":
        return ScriptedPlanner(config.get("plans", []))
    if kind == "rules":

        return RulesPlanner()
    if kind == "llm":
        from django.conf import settings


        endpoints = settings.AGENTOPS_LLM_ENDPOINTS
        name = config.get("endpoint")
        if name not in endpoints:

            # Removed since the run started: the run is told why, as for an endpoint that is down.
            return UnavailablePlanner(f"the LLM endpoint {name!r} is not configured on this server: {ENDPOINTS_HELP}")
        llm_config = LLMConfig.from_endpoint(name, endpoints[name], config, environ=os.environ)
        # The lease is renewed while the planner thinks; this only bounds one propose() call.
        return LLMPlanner(llm_config, time_limit_s=max(96.0, settings.AGENTOPS_RUN_LEASE_SECONDS * 0.8))
    if kind == "external" and run_id is not None:

        return ExternalPlanner(run_id, on_proposed=on_proposed)
    if kind == "gateway" and run_id is not None:
        return GatewayPlanner(run_id)   # the agent acts with its owner's permissions: the run's owner
    raise ValueError(f"planner {kind!r} is not available")


def validate_planner_config(planner: str, config: dict) -> dict[str, str]:
    """Field errors for a planner's settings; empty when fine."""
    if planner == "scripted":
        plans = config.get("plans")
        if not isinstance(plans, list) or not plans:
            return {"planner_config": "The scripted planner needs planner_config.plans: a non-empty list of plans."}
    elif planner == "llm":
        return llm_config_errors(config)
    elif planner in ("external", "gateway"):
        if config:
            return {"planner_config": "The external planner takes no planner_config: the agent submits its plans "
                                      "through the API."}
    elif planner not in PLANNER_HELP:
        return {"planner": f"Unknown planner {planner!r}; choose one of {', '.join(sorted(PLANNER_HELP))}."}
    return {}


def llm_config_errors(config: dict) -> dict[str, str]:
    from django.conf import settings

    errors: dict[str, str] = {}
    unknown = sorted(set(config) - LLM_KEYS)
    if unknown:
        errors["planner_config"] = (f"Unknown settings: {', '.join(unknown)}. Known: {', '.join(sorted(LLM_KEYS))}. "
                                    "The endpoint's URL and key are set by the server (AGENTOPS_LLM_ENDPOINTS).")
    endpoints = settings.AGENTOPS_LLM_ENDPOINTS
    endpoint = config.get("endpoint")
    if not endpoints:
        errors["planner_config.endpoint"] = f"No LLM endpoint is configured on this server: {ENDPOINTS_HELP}."
    elif not isinstance(endpoint, str) or endpoint not in endpoints:
        errors["planner_config.endpoint"] = f"Name one of the configured endpoints: {', '.join(sorted(endpoints))}."
    model = config.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > 200:
        errors["planner_config.model"] = "Name the model (a non-empty string of at most 200 characters)."
    for name, (low, high, integer) in LLM_NUMBERS.items():
        if name not in config:
            continue
        value = config[name]
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int))
                or not math.isfinite(value) or not low <= value <= high):
            kind = "an integer" if integer else "a number"
            errors[f"planner_config.{name}"] = f"Must be {kind} from {low:g} to {high:g}."
    return errors

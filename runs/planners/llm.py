"""A planner backed by any OpenAI-compatible chat-completions endpoint.

OpenAI, Azure OpenAI, vLLM, Ollama, llama.cpp's server and LiteLLM all speak the
same protocol. The model only *proposes*: its answer goes through the runtime's
parsing, validation, approval and budgets like any other plan. Whatever the model
answers (prose, broken JSON, a wrong shape), the runtime gets a plan it will reject
with a clear reason, never executable input; the tokens it spent still count.

When the endpoint cannot be reached (timeouts, connection errors, 429, 5xx) the call
is retried with a capped, jittered backoff, honouring Retry-After, never past the
run's deadline. Once the retries are spent the answer is a *rejected revision* whose
error says "planner endpoint unavailable: ...": the runtime asks once more (as for any
rejected plan) and a second failure stops the run `plan_rejected` with that detail,
so every way this ends is recorded on the run.

Where prompts may go is the server's decision, not the run's: a run names an
endpoint from AGENTOPS_LLM_ENDPOINTS (base URL + the variable holding its key +
optional headers), and every request goes through the egress guard, pinned to
the checked address, allowing only that endpoint's host. Error texts never
quote the endpoint's answer (a wrong endpoint must not become a way to read
internal pages) and never contain the key. Usage numbers the endpoint reports
are validated and clamped: garbage counts as 0, absurd or infinite values as
MAX_USAGE_TOKENS.

Django-free: `runs.planners.planner_for` reads the endpoint and the API key from
the settings and the environment and hands them in.
"""
from __future__ import annotations

import json
import math
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from capabilities.executors.secrets import Redactor
from capabilities.kinds.http.executor import retry_after_seconds
from capabilities.netguard import GuardedTransport, NetGuard, URLRefused
from runtime.observation import RETRYABLE_CODES, error_code_for_http_status
from runtime.plan import PlanError
from runtime.planning import PlannerCallCeiling, PlanningRequest, PlanProposal
from runtime.records import declared_numbers
from runtime.retry import jittered_backoff_s
from runtime.stop import ReplanReason
from runtime.storable import storable_value, text_storable

# How much of one observation's output the model sees: enough to plan on, bounded.
OUTPUT_CHARS = 2_000
OBSERVATIONS_SHOWN = 10
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 20.0
# More tokens than any model call spends: a larger (or infinite) claim is clamped to this.
MAX_USAGE_TOKENS = 100_000_000

REASON_CODES = [r.value for r in ReplanReason if r is not ReplanReason.PLAN_REJECTED]

PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "steps": {"type": "array", "items": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "capability": {"type": "string"},
                "arguments": {"type": "object"},
                "expected_outcome": {"type": "string"},
                "depends_on": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["id", "capability", "arguments", "expected_outcome"],
        }},
        "reason_code": {"type": "string", "enum": REASON_CODES},
        "reason": {"type": "string"},
        "no_further_plan": {"type": "boolean"},
    },
}

# The response formats asked for, in order: a server that refuses one is asked with the next.
FORMATS: tuple[dict[str, Any] | None, ...] = (
    {"type": "json_schema", "json_schema": {"name": "plan", "schema": PLAN_SCHEMA, "strict": False}},
    {"type": "json_object"}, None)

# %-formatted: the prompt's JSON examples are full of braces.
SYSTEM_PROMPT = """You are the planner of an agent runtime. You propose a plan; the runtime \
validates it, asks for approvals, executes it and decides whether the run may continue.

Answer with ONLY one JSON object, no prose and no code fence, in one of two forms:
1. {"steps": [{"id": "s1", "capability": "<a name from the capabilities list>", \
"arguments": {...matching that capability's argument JSON Schema...}, \
"expected_outcome": "<what this step should produce>", "depends_on": ["<ids of earlier steps>"]}], \
"reason_code": "<when replanning: one of %s>", "reason": "<one sentence: why this plan>"}
2. {"no_further_plan": true, "reason": "<why>"} when nothing you could do would meet the completion criteria.

Rules: use only the capabilities listed; arguments must satisfy their schema; keep plans short; \
do not repeat a call that already failed with the same arguments unless something changed; \
when you are told the previous plan was rejected, fix every listed error.""" % ", ".join(REASON_CODES)  # noqa: UP031


class PlannerUnavailable(Exception):
    """The endpoint could not give an answer within the retries and the time left."""


class UnavailablePlanner:
    """Stands in for an LLM planner whose endpoint is not configured: every proposal is rejected, saying why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def propose(self, request: PlanningRequest) -> PlanProposal | None:
        message = f"planner endpoint unavailable: {self.reason}"
        return PlanProposal(plan=None, raw_output=message, reason=message,
                            errors=(PlanError("planner_unavailable", message),))


@dataclass(frozen=True)
class LLMConfig:
    base_url: str
    model: str
    api_key: str = ""                 # the key's value, read from the environment by planner_for; never stored
    api_key_env: str = ""             # the variable's name, for error messages
    temperature: float = 0.0
    max_tokens: int = 2_000
    price_per_1k_prompt_tokens: float = 0.0
    price_per_1k_completion_tokens: float = 0.0
    timeout_s: float = 60.0
    max_retries: int = 2
    extra_headers: dict[str, str] = field(default_factory=dict)   # the endpoint's, from server config
    azure_api_version: str = ""
    endpoint: str = ""
    guard: NetGuard | None = field(default=None, repr=False)

    @classmethod
    def from_endpoint(cls, name: str, endpoint: dict[str, Any], config: dict[str, Any], *,
                      environ: Any, resolver: Any = None) -> LLMConfig:
        """The run's settings (model, numbers) on the server's endpoint (URL, key, headers)."""
        from urllib.parse import urlsplit

        base_url = str(endpoint["base_url"]).rstrip("/")
        host = urlsplit(base_url).hostname or ""
        key_env = str(endpoint.get("api_key_env") or "")
        run_settings = {k: v for k, v in config.items() if k not in ("endpoint",)}
        merged = cls.from_planner_config({**run_settings, "base_url": base_url, "api_key_env": key_env,
                                          "extra_headers": endpoint.get("headers") or {},
                                          "azure_api_version": endpoint.get("azure_api_version") or ""},
                                         api_key=environ.get(key_env, "") if key_env else "")
        # A model endpoint has no business in a cloud credential range, even when named exactly.
        guard = NetGuard([host], allow_private=bool(endpoint.get("allow_private", False)), credential_entries=False,
                         **({"resolver": resolver} if resolver is not None else {}))
        return cls(**{**merged.__dict__, "endpoint": name, "guard": guard})

    @classmethod
    def from_planner_config(cls, config: dict[str, Any], api_key: str = "") -> LLMConfig:
        return cls(
            base_url=str(config["base_url"]).rstrip("/"), model=str(config["model"]), api_key=api_key,
            api_key_env=str(config.get("api_key_env") or ""), **declared_numbers(cls, config),
            extra_headers={str(k): str(v) for k, v in (config.get("extra_headers") or {}).items()},
            azure_api_version=str(config.get("azure_api_version") or ""))


@dataclass
class _Answer:
    content: str
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class LLMPlanner:
    """time_limit_s bounds one propose() call as a whole (e.g. below the worker's lease),
    on top of the run's deadline."""

    def __init__(self, config: LLMConfig, *, time_limit_s: float | None = None,
                 transport: httpx.BaseTransport | None = None, sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        self.config = config
        self.time_limit_s = time_limit_s
        self.transport = transport
        self.sleep = sleep
        self.monotonic = monotonic
        self.rng = rng or random.Random()

    # -- the planner protocol ---------------------------------------------------------------

    def propose(self, request: PlanningRequest) -> PlanProposal | None:
        messages = build_messages(request)
        try:
            answer = self._complete(messages, request.remaining_s)
        except PlannerUnavailable as exc:
            message = Redactor([self.config.api_key])(f"planner endpoint unavailable: {exc}")
            return PlanProposal(plan=None, raw_output=message, reason=message,
                                errors=(PlanError("planner_unavailable", message),))
        tokens = answer.total_tokens or answer.prompt_tokens + answer.completion_tokens
        cost = (answer.prompt_tokens * self.config.price_per_1k_prompt_tokens
                + answer.completion_tokens * self.config.price_per_1k_completion_tokens) / 1000.0
        return proposal_from_answer(answer.content, tokens=tokens, cost=round(cost, 8))

    def ceiling(self, request: PlanningRequest) -> PlannerCallCeiling:
        """The most one call may spend, written ahead: what a call lost with its worker is counted at.

        The prompt at one token per byte of the request body (no tokenizer's tokens are shorter,
        and the body's JSON around the messages outweighs a chat template's few special tokens),
        plus the max_tokens the answer may take, each at the model's price."""
        prompt = len(json.dumps(self._body(build_messages(request), FORMATS[0])).encode())
        completion = self.config.max_tokens
        cost = (prompt * self.config.price_per_1k_prompt_tokens
                + completion * self.config.price_per_1k_completion_tokens) / 1000.0
        return PlannerCallCeiling(tokens=prompt + completion, cost=round(cost, 8))

    # -- HTTP --------------------------------------------------------------------------------

    def _complete(self, messages: list[dict[str, str]], remaining_s: float | None) -> _Answer:
        if self.config.api_key_env and not self.config.api_key:
            raise PlannerUnavailable(f"the environment variable {self.config.api_key_env} is not set where the "
                                     "worker runs")
        started = self.monotonic()
        limits = [x for x in (remaining_s, self.time_limit_s) if x is not None]
        budget_s = min(limits) if limits else None
        formats = list(FORMATS)
        retries = 0
        last_error = "no attempt made"
        transport = self.transport
        if self.config.guard is not None:
            # Every request is checked and sent to the address that was checked (no DNS rebinding).
            transport = GuardedTransport(self.config.guard, transport or httpx.HTTPTransport(trust_env=False))
        with httpx.Client(transport=transport, follow_redirects=False, trust_env=False) as client:
            while True:
                left = None if budget_s is None else budget_s - (self.monotonic() - started)
                if left is not None and left <= 0.05:
                    raise PlannerUnavailable(f"{last_error}; no time left before the run's deadline")
                timeout = self.config.timeout_s if left is None else min(self.config.timeout_s, left)
                body = self._body(messages, formats[0])
                try:
                    response = client.post(f"{self.config.base_url}/chat/completions", params=self._params(),
                                           json=body, headers=self._headers(), timeout=httpx.Timeout(timeout))
                except URLRefused as exc:
                    raise PlannerUnavailable(str(exc)) from None
                except httpx.InvalidURL as exc:
                    raise PlannerUnavailable(f"the endpoint's URL is not valid ({exc})") from None
                except httpx.TimeoutException:
                    last_error, delay = f"timed out after {timeout:g}s", None
                except httpx.TransportError as exc:
                    last_error, delay = f"connection error: {type(exc).__name__}: {exc}", None
                else:
                    if response.status_code == 400 and "response_format" in response.text and len(formats) > 1:
                        # An older server: ask for plain JSON (or nothing) instead; not a retry.
                        formats.pop(0)
                        continue
                    if response.is_success:
                        return _parse_response(response)
                    # The status only: the body of whatever answered is not ours to show.
                    last_error = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
                    if error_code_for_http_status(response.status_code) not in RETRYABLE_CODES:
                        raise PlannerUnavailable(last_error)
                    delay = (retry_after_seconds(response.headers.get("Retry-After"))
                             if response.status_code in (429, 503) else None)
                if retries >= self.config.max_retries:
                    raise PlannerUnavailable(f"{last_error} (after {retries + 1} attempts)")
                retries += 1
                if delay is None:
                    delay = jittered_backoff_s(BACKOFF_BASE_S, BACKOFF_CAP_S, retries, self.rng)
                left = None if budget_s is None else budget_s - (self.monotonic() - started)
                if left is not None and delay >= left:
                    raise PlannerUnavailable(f"{last_error}; waiting {delay:g}s more would pass the run's deadline")
                self.sleep(delay)

    def _params(self) -> dict[str, str]:
        # Azure OpenAI: the deployment is in base_url, the API version in the query.
        return {"api-version": self.config.azure_api_version} if self.config.azure_api_version else {}

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **self.config.extra_headers}
        if self.config.api_key:
            if self.config.azure_api_version:
                headers["api-key"] = self.config.api_key
            else:
                headers["Authorization"] = f"Bearer {self.config.api_key}"
        return headers

    def _body(self, messages: list[dict[str, str]], response_format: dict[str, Any] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.config.model, "messages": messages,
                                "temperature": self.config.temperature, "max_tokens": self.config.max_tokens}
        if response_format is not None:
            body["response_format"] = response_format
        return body


# -- what the model is told --------------------------------------------------------------------

def build_messages(request: PlanningRequest) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": _user_prompt(request)}]


def _user_prompt(request: PlanningRequest) -> str:
    sections = [f"# Goal\n{request.goal}"]
    if request.completion is not None:
        sections.append("# Completion criteria (checked by the application, not by you)\n"
                        + _json(request.completion.to_dict()))
    capabilities = [{"name": c.name, "description": c.description, "arguments_schema": c.schema,
                     "side_effect": c.side_effect.value} for c in request.capabilities]
    sections.append("# Capabilities you may use\n" + _json(capabilities))
    observations = [observation_for_planner(h) for h in request.history[-OBSERVATIONS_SHOWN:]]
    sections.append("# Recent observations, oldest first\n" + (_json(observations) if observations else "none yet"))
    if request.previous_plan:
        sections.append("# Previous plan\n" + _json(list(request.previous_plan)))
    if request.reason_code is None:
        sections.append(f"# Task\nPropose the first plan (revision {request.revision}).")
    else:
        task = (f"# Task\nPropose revision {request.revision}.\nReplan reason: {request.reason_code}: "
                f"{request.reason}")
        if request.validation_errors:
            task += "\nThe previous plan was rejected. Fix every one of these errors:\n" + "\n".join(
                f"- {e}" for e in request.validation_errors)
        sections.append(task)
    return "\n\n".join(sections)


def observation_for_planner(entry: Any) -> dict[str, Any]:
    o = entry.observation
    output = json.dumps(o.output, sort_keys=True, default=str) if o.output is not None else ""
    if o.output_ref is not None:
        output = o.output_ref.preview
    return {"capability": entry.capability, "arguments": entry.arguments, "status": o.status.value,
            "error_code": o.error_code.value if o.error_code else None,
            "error_message": o.error_message[:300] or None,
            "output": output[:OUTPUT_CHARS] + ("...(truncated)" if len(output) > OUTPUT_CHARS else "")}


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


# -- what the model answered -------------------------------------------------------------------

def proposal_from_answer(content: str, *, tokens: int, cost: float) -> PlanProposal | None:
    """Turn the model's text into a proposal; anything but a plan object is rejected, clearly."""
    # The model's NUL characters and lone surrogates (raw or escaped) are kept as U+FFFD, as a
    # tool's are (runtime.storable).
    content = text_storable(content)
    text = _strip_fence(content)
    try:
        data = storable_value(json.loads(text), text)
    except ValueError as exc:
        return _malformed(content, f"the model's answer is not valid JSON ({exc})", tokens, cost)
    except RecursionError:
        return _malformed(content, "the model's answer is nested too deeply", tokens, cost)
    if isinstance(data, dict) and data.get("no_further_plan") is True and not data.get("steps"):
        return PlanProposal(plan=None, tokens=tokens, cost=cost, reason=str(data.get("reason") or ""),
                            raw_output=content, no_further_plan=True)
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        return _malformed(content, "the model's answer is not an object with a 'steps' list", tokens, cost)
    reason_code = data.get("reason_code")
    return PlanProposal(plan={"steps": data["steps"]}, tokens=tokens, cost=cost,
                        reason_code=reason_code if isinstance(reason_code, str) else None,
                        reason=str(data.get("reason") or ""), raw_output=content)


def _malformed(content: str, message: str, tokens: int, cost: float) -> PlanProposal:
    # The raw text as the plan: parse_plan could never execute it, and the error says why.
    return PlanProposal(plan=content, tokens=tokens, cost=cost, raw_output=content,
                        errors=(PlanError("malformed_plan", message),))


def _strip_fence(content: str) -> str:
    match = re.fullmatch(r"\s*```(?:json)?\s*(.*?)\s*```\s*", content, re.S)
    return match.group(1) if match else content.strip()


def _parse_response(response: httpx.Response) -> _Answer:
    try:
        data = response.json()
        content = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        # A 200 that is not a chat completion: the endpoint is wrong, not the model.
        raise PlannerUnavailable(f"the endpoint's answer is not a chat completion "
                                 f"(HTTP {response.status_code}, {len(response.content)} bytes)") from None
    usage = data.get("usage") or {}
    return _Answer(content=content if isinstance(content, str) else json.dumps(content),
                   prompt_tokens=_count(usage.get("prompt_tokens")),
                   completion_tokens=_count(usage.get("completion_tokens")),
                   total_tokens=_count(usage.get("total_tokens")))


def _count(value: Any) -> int:
    """A usage number as the endpoint reported it, made safe: wrong types, NaN and negatives count 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if isinstance(value, float) and math.isnan(value):
        return 0
    if value <= 0:
        return 0
    return int(min(value, MAX_USAGE_TOKENS))


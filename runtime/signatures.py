"""Stable identities for actions and outcomes: the basis of the repetition rule.

Every hash here is computed over canonical JSON so that two dicts with the same
content in a different key order are the same action.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from .completion import is_index
from .observation import Observation


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def action_signature(capability: str, arguments: Any) -> tuple[str, str]:
    """(capability, canonical arguments): the seed's action signature."""
    return capability, canonical_json(arguments)


def signature_text(signature: tuple[str, str]) -> str:
    """One string for storage and comparison: "capability {canonical args}"."""
    return f"{signature[0]} {signature[1]}"


def arguments_hash(arguments: Any) -> str:
    return sha256_hex(canonical_json(arguments))


def output_hash(observation: Observation, volatile_paths: tuple[str, ...] = ()) -> str:
    # A large output kept by reference is identified by the hash the executor took
    # (its volatile parts cannot be removed: it was never held in memory whole).
    if observation.output_ref is not None:
        return observation.output_ref.sha256
    return sha256_hex(canonical_json(without_paths(observation.output, volatile_paths)))


def without_paths(value: Any, paths: tuple[str, ...] | list[str]) -> Any:
    """A copy of value without the dotted paths ("request_id", "meta.generated_at",
    "items.*.etag"); "*" matches every key or index at its level. Missing paths are ignored."""
    for path in paths:
        value = _drop(value, path.split(".")) if path else value
    return value


def _drop(value: Any, parts: list[str]) -> Any:
    head, rest = parts[0], parts[1:]
    if isinstance(value, dict):
        keys = list(value) if head == "*" else [head]
        out = dict(value)
        for key in keys:
            if key in out:
                if rest:
                    out[key] = _drop(out[key], rest)
                else:
                    del out[key]
        return out
    if isinstance(value, list) and rest:
        if head == "*":
            return [_drop(item, rest) for item in value]
        if is_index(head) and -len(value) <= int(head) < len(value):
            items = list(value)
            items[int(head)] = _drop(items[int(head)], rest)
            return items
    # A list element is never deleted: that would shift the others and hide a real change.
    return value


def outcome_fingerprint(observation: Observation, volatile_paths: tuple[str, ...] = ()) -> str:
    """For ok: (status, hash of the output without the volatile paths). For a failure:
    (status, error code, error category, HTTP status), without the body: a request id in
    an error body must not make two identical failures look different (design.md)."""
    if observation.status.value == "ok":
        return f"ok:{output_hash(observation, volatile_paths)}"
    code = observation.error_code.value if observation.error_code else ""
    category = observation.error_category.value if observation.error_category else ""
    http_status = observation.extra.get("http_status", "")
    return f"{observation.status.value}:{code}:{category}:{http_status}"


def idempotency_key(run_id: str, signature: tuple[str, str], step_id: str | None = None) -> str:
    """The key follows the action: same run, capability and canonical arguments give the
    same key across steps, retries and revisions, so an idempotent callee deduplicates a
    re-proposed side effect instead of acting twice. A capability whose identical calls
    are distinct operations (distinct_calls) passes the step id, which becomes part of it.
    """
    scope = f"\nstep:{step_id}" if step_id is not None else ""
    return sha256_hex(f"{run_id}\n{signature_text(signature)}{scope}")[:40]


def plan_hash(steps: list[dict[str, Any]]) -> str:
    return sha256_hex(canonical_json(steps))

"""Stable identities for actions and outcomes: the basis of the repetition rule.

Every hash here is computed over canonical JSON so that two dicts with the same
content in a different key order are the same action.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from .observation import Observation


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def action_signature(capability: str, arguments: Any) -> tuple[str, str]:
    """(capability, canonical arguments): the seed's action signature."""
    return capability, canonical_json(arguments)


def signature_text(signature: tuple[str, str]) -> str:
    """One string for storage and comparison: "capability {canonical args}"."""
    return f"{signature[0]} {signature[1]}"


def arguments_hash(arguments: Any) -> str:
    return sha256_hex(canonical_json(arguments))


def output_hash(observation: Observation) -> str:
    # A large output kept by reference is identified by the hash the executor took.
    if observation.output_ref is not None:
        return observation.output_ref.sha256
    return sha256_hex(canonical_json(observation.output))


def outcome_fingerprint(observation: Observation) -> str:
    """(status, error code, hash of the output) as one string."""
    code = observation.error_code.value if observation.error_code else ""
    return f"{observation.status.value}:{code}:{output_hash(observation)}"


def idempotency_key(run_id: str, step_id: str, signature: tuple[str, str]) -> str:
    """Same run, same step id, same action: same key, across retries and revisions.

    A revision that re-proposes a side effect already sent therefore reuses the key,
    so an idempotent callee deduplicates instead of acting twice.
    """
    return sha256_hex(f"{run_id}\n{step_id}\n{signature_text(signature)}")[:40]


def plan_hash(steps: list[dict[str, Any]]) -> str:
    return sha256_hex(canonical_json(steps))

"""Bounded recent history and THE one "repeated without progress" rule."""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .observation import Observation
from .records import memo_dict

DEFAULT_WINDOW = 20

# What Observation.from_dict assumes for a missing field: a history entry leaves these out. The
# checkpoint keeps the window's entries and a pass rewrites them; most of their fields are empty.
_OBSERVATION_DEFAULTS: dict[str, Any] = {
    "state_changed": False, "output_ref": None, "error_code": None, "error_category": None, "error_message": "",
    "retry_guidance": "", "retry_after_s": None, "side_effect": "not_committed", "attempt": 1, "trace_id": "",
    "span_id": "", "extra": {}}


class AttemptKind(StrEnum):
    CALL = "call"        # a step's first execution (also a re-proposed step in a new revision)
    RETRY = "retry"      # a retry the capability's retry policy allowed
    POLL = "poll"        # a re-run the polling policy allowed
    RESOLVE = "resolve"  # idempotent re-send (a retry) of an unknown outcome
    LOOKUP = "lookup"    # status lookup of an unknown outcome: a tool call, not a retry


@dataclass(frozen=True)
class HistoryEntry:
    attempt_id: str
    capability: str
    arguments: dict[str, Any]
    signature: str
    fingerprint: str
    kind: str
    observation: Observation

    @property
    def state_changed(self) -> bool:
        return self.observation.state_changed

    def to_dict(self) -> dict[str, Any]:
        return memo_dict(self, lambda: {
            "attempt_id": self.attempt_id, "capability": self.capability, "arguments": self.arguments,
            "signature": self.signature, "fingerprint": self.fingerprint, "kind": self.kind,
            "observation": {k: v for k, v in self.observation.to_dict().items()
                            if k not in _OBSERVATION_DEFAULTS or v != _OBSERVATION_DEFAULTS[k]}})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HistoryEntry:
        return cls(attempt_id=data["attempt_id"], capability=data["capability"], arguments=data["arguments"],
                   signature=data["signature"], fingerprint=data["fingerprint"], kind=data["kind"],
                   observation=Observation.from_dict(data["observation"]))


def repeated_without_progress(history: tuple[HistoryEntry, ...] | list[HistoryEntry], *, signature: str,
                              fingerprint: str, allowed_retry: bool = False, allowed_poll: bool = False) -> bool:
    """True when an earlier attempt in the window had the same signature AND fingerprint,
    nothing after it reported state_changed, and this attempt was neither a retry the
    retry policy allowed nor a poll the polling policy allowed.

    `history` holds the earlier attempts only (oldest first), already bounded.
    """
    if allowed_retry or allowed_poll:
        return False
    for entry in reversed(history):
        if entry.signature == signature and entry.fingerprint == fingerprint:
            return True
        if entry.state_changed:
            # A state change between the two identical attempts is progress.
            return False
    return False


def appended(history: tuple[HistoryEntry, ...], entry: HistoryEntry,
             window: int = DEFAULT_WINDOW) -> tuple[HistoryEntry, ...]:
    return (history + (entry,))[-window:]

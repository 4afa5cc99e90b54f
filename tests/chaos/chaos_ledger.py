"""Capabilities outside the product whose real effects go to an fsync'd ledger file.

The chaos suite registers this module (AGENTOPS_CAPABILITY_MODULES) in its own
stack. Every invocation appends an `exec` line (with the span it was sent with,
so the trace can be matched against it); every real effect appends an `effect`
line. Lines are appended under an exclusive lock and fsync'd before the function
returns, so a SIGKILL right after a call cannot lose an effect that happened.

- ledger_idempotent: the same idempotency key never makes a second effect.
- ledger_lookup: NOT idempotent (a second call with the same key is a second
  effect), but has a status lookup that answers from the ledger; fenced.
- ledger_slow: idempotent, sleeps `seconds` (longer than the lease in the suite).
- ledger_approved: idempotent, requires approval.
- ledger_late / ledger_late_fenced: NOT idempotent, with a status lookup; the effect
  lands `seconds` after the call was sent, past its 2 s timeout (the seed's central case).
  The fenced one commits only while `context.fence.still_current()`, in one transaction
  with that check (commit_fenced), as docs/operations.md "Exactly once" asks of a callee.
- ledger_late_idempotent: the idempotent twin.
"""
from __future__ import annotations

import fcntl
import json
import os
import random
import time
from contextlib import contextmanager
from typing import Any

from capabilities.kinds.python.registry import CallContext, capability, commit_fenced


def _path() -> str:
    return os.environ.get("CHAOS_LEDGER", "chaos-ledger.jsonl")


@contextmanager
def _locked():
    with open(_path(), "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield fh
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _lines(fh) -> list[dict[str, Any]]:
    fh.seek(0)
    out = []
    for line in fh:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line torn by a SIGKILL mid-write has no effect on the others
    return out


def _append(fh, record: dict[str, Any]) -> None:
    fh.seek(0, os.SEEK_END)
    fh.write(json.dumps(record) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def _effect(capability_name: str, item: str, context: CallContext, *, idempotent: bool) -> dict[str, Any]:
    key = context.idempotency_key or ""
    with _locked() as fh:
        _append(fh, {"kind": "exec", "capability": capability_name, "key": key, "span": context.span_id,
                     "item": item, "pid": os.getpid(), "parent": os.getppid(), "at": time.time()})
        if idempotent and key:
            for record in _lines(fh):
                if record.get("kind") == "effect" and record.get("key") == key:
                    return {"receipt": record["receipt"], "item": item, "deduplicated": True}
        receipt = f"r-{os.getpid()}-{time.time_ns()}"
        _append(fh, {"kind": "effect", "capability": capability_name, "key": key, "span": context.span_id,
                     "item": item, "receipt": receipt, "at": time.time()})
    return {"receipt": receipt, "item": item}


def _received(capability_name: str, item: str, context: CallContext) -> None:
    """A `received` line when a call arrives (its `exec` and `effect` lines come when it lands)."""
    with _locked() as fh:
        _append(fh, {"kind": "received", "capability": capability_name, "key": context.idempotency_key or "",
                     "span": context.span_id, "item": item, "pid": os.getpid(), "at": time.time(),
                     "fence": context.fence.token if context.fence else None})


def _think() -> None:
    # Long enough that a SIGKILL often lands inside a call.
    time.sleep(random.uniform(0.05, 0.4))


@capability(side_effect="write", idempotent=True, timeout_s=10, retry={"max_attempts": 5, "backoff_s": 0.2})
def ledger_idempotent(item: str, *, context: CallContext) -> dict[str, Any]:
    """Write an item to the chaos ledger; the same idempotency key writes once."""
    _think()
    result = _effect("ledger_idempotent", item, context, idempotent=True)
    _think()
    return result


def ledger_lookup_status(arguments: dict, idempotency_key: str | None) -> tuple[bool, Any]:
    """Did a ledger_lookup call with this key write its item?"""
    with _locked() as fh:
        for record in _lines(fh):
            if record.get("kind") == "effect" and record.get("key") == idempotency_key:
                return True, {"receipt": record["receipt"], "item": record["item"]}
    return False, None


@capability(side_effect="write", idempotent=False, timeout_s=10, retry={"max_attempts": 5, "backoff_s": 0.2},
            status_lookup=ledger_lookup_status)
def ledger_lookup(item: str, *, context: CallContext) -> dict[str, Any]:
    """Write an item to the chaos ledger; NOT idempotent, but its outcome can be looked up."""
    _think()
    # Fenced: a worker paused past its lease must not add this effect after a takeover's re-send.
    result = commit_fenced(context, lambda: _effect("ledger_lookup", item, context, idempotent=False))
    _think()
    return result


@capability(side_effect="write", idempotent=True, timeout_s=60, retry={"max_attempts": 3, "backoff_s": 0.2})
def ledger_slow(item: str, seconds: float, *, context: CallContext) -> dict[str, Any]:
    """Write an item after a long think (longer than a lease)."""
    time.sleep(seconds)
    return _effect("ledger_slow", item, context, idempotent=True)


@capability(side_effect="write", idempotent=True, requires_approval=True, timeout_s=10,
            retry={"max_attempts": 5, "backoff_s": 0.2})
def ledger_approved(item: str, *, context: CallContext) -> dict[str, Any]:
    """Write an item once an operator approved it."""
    _think()
    return _effect("ledger_approved", item, context, idempotent=True)


@capability(side_effect="external", idempotent=False, timeout_s=2, retry={"max_attempts": 6, "backoff_s": 0.2},
            status_lookup=ledger_lookup_status)
def ledger_late(item: str, seconds: float = 3.0, *, context: CallContext) -> dict[str, Any]:
    """Send an item whose effect lands after the call's timeout; not idempotent, looked up by key."""
    _received("ledger_late", item, context)
    time.sleep(seconds)
    return _effect("ledger_late", item, context, idempotent=False)


@capability(side_effect="external", idempotent=False, timeout_s=2, retry={"max_attempts": 6, "backoff_s": 0.2},
            status_lookup=ledger_lookup_status)
def ledger_late_fenced(item: str, seconds: float = 3.0, *, context: CallContext) -> dict[str, Any]:
    """As ledger_late, but the effect is committed only while the call's fence is current."""
    _received("ledger_late_fenced", item, context)
    time.sleep(seconds)
    return commit_fenced(context, lambda: _effect("ledger_late_fenced", item, context, idempotent=False))


@capability(side_effect="external", idempotent=True, timeout_s=2, retry={"max_attempts": 3, "backoff_s": 0.2})
def ledger_late_idempotent(item: str, seconds: float = 3.0, *, context: CallContext) -> dict[str, Any]:
    """The idempotent twin of ledger_late: the same key never makes a second effect, and a key
    that already committed is answered at once."""
    committed, result = ledger_lookup_status({}, context.idempotency_key)
    if committed and context.idempotency_key:
        return {**result, "deduplicated": True}
    time.sleep(seconds)
    return _effect("ledger_late_idempotent", item, context, idempotent=True)


def effects_by_item(path: str, capability_name: str) -> dict[str, int]:
    """How many real effects each item got: the figure exactly-once is judged by."""
    counts: dict[str, int] = {}
    for record in read_ledger(path):
        if record.get("kind") == "effect" and record.get("capability") == capability_name:
            counts[record["item"]] = counts.get(record["item"], 0) + 1
    return counts


def read_ledger(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return _lines(fh)

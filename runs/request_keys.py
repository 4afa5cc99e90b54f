"""Idempotency-Key on the requests that start runs: a client that lost the answer retries safely.

A run is not a read: starting it twice runs the agent twice, and every side effect it takes with
it (a bulk re-run, every selected run twice). A client whose POST timed out cannot tell whether the
run began, so it sends a key of its own (the `Idempotency-Key` header, as in the IETF httpapi draft
and Stripe): the first request with a key starts the run (or the bulk job) and keeps the key beside
it, in the same transaction; a retry with the key and the same request gets that run back, however
often and however concurrently it is sent. The key row's unique constraint settles a race: the
loser's transaction (its run too) rolls back and it reads the winner's run.

A key belongs to one user in one project and lives for AGENTOPS_REQUEST_KEY_HOURS; the same key
with another request is refused (422), as a client reusing a key for something else has a bug
that a second run would hide.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import InvalidInput, ServiceError
from runs.models import BulkAction, Run, RunRequestKey

Started = Run | BulkAction

MAX_KEY_LENGTH = 255


class KeyReused(ServiceError):
    status = 422
    code = "idempotency_key_reused"


def key_errors(key: str) -> str | None:
    """Why `key` cannot be an Idempotency-Key (None if it can): 1 to 255 visible ASCII characters."""
    if not key or len(key) > MAX_KEY_LENGTH:
        return f"the Idempotency-Key must be 1 to {MAX_KEY_LENGTH} characters"
    if not all(" " <= ch <= "~" for ch in key):
        return "the Idempotency-Key may hold visible ASCII characters and spaces only"
    return None


def request_digest(endpoint: str, data: dict[str, Any]) -> str:
    """The request a key came with: its endpoint and validated input, canonical JSON (keys sorted)."""
    text = json.dumps({"endpoint": endpoint, "input": data}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def start_once(*, user, key: str | None, endpoint: str, data: dict[str, Any],
               start: Callable[[], Started]) -> tuple[Started, bool]:
    """The run (or bulk job) `start()` makes, or the one an earlier request with `key` made: (it, replayed).

    Without a key, `start()` alone. `start` must write in the caller's transaction (the run services
    are atomic: they join it), so a lost race rolls its run back with the key."""
    if key is None:
        return start(), False
    problem = key_errors(key)
    if problem:
        raise InvalidInput(f"{problem}.", fields={"Idempotency-Key": problem})
    digest = request_digest(endpoint, data)
    for _ in range(2):
        try:
            with transaction.atomic():
                found = _kept(user, key)
                if found is not None:
                    return _replayed(found, digest), True
                started = start()
                target = {"run": started} if isinstance(started, Run) else {"bulk_action": started}
                RunRequestKey.objects.create(project_id=started.project_id, user=user, key=key, digest=digest,
                                             created_at=timezone.now(), **target)
                return started, False
        except IntegrityError:
            # Another request with this key committed first (PostgreSQL held this insert until it did):
            # this one's run is rolled back; the next round reads the winner's.
            if _kept(user, key) is None:
                raise
    raise AssertionError("unreachable: a key found taken is read on the next round")


def form_once(*, user, key: str | None, endpoint: str, data: dict[str, Any], start: Callable[[], Started]) -> Started:
    """What a page's form starts, once per form shown (the key it drew when shown): a double submit or a
    resend gets the first one's. The same form sent again with other settings (back, edit, submit) is
    a new start the person asked for, not a reused key: it starts with none, as does a key the form
    did not draw."""
    if key is not None and key_errors(key):
        key = None
    try:
        return start_once(user=user, key=key, endpoint=endpoint, data=data, start=start)[0]
    except KeyReused:
        return start()


def _kept(user, key: str) -> RunRequestKey | None:
    """The live key row of `user` in the project in scope; an expired one is forgotten here."""
    row = RunRequestKey.objects.filter(user=user, key=key).select_related("run", "bulk_action").first()
    if row is not None and row.created_at < _oldest_kept(timezone.now()):
        row.delete()
        return None
    return row


def _replayed(row: RunRequestKey, digest: str) -> Started:
    if row.digest != digest:
        what = f"run {row.run_id}" if row.run_id is not None else f"bulk action {row.bulk_action_id}"
        raise KeyReused(f"This Idempotency-Key started {what} with another request; send a new key for a new "
                        "request.", fields={"Idempotency-Key": "used with another request"})
    return row.started


def _oldest_kept(now: datetime) -> datetime:
    return now - timedelta(hours=settings.AGENTOPS_REQUEST_KEY_HOURS)


def forget_expired(now: datetime | None = None) -> int:
    """Delete the keys past AGENTOPS_REQUEST_KEY_HOURS (the scheduler's hourly task); how many."""
    return RunRequestKey._base_manager.filter(created_at__lt=_oldest_kept(now or timezone.now())).delete()[0]

"""Try it: run a capability's current version once, outside any run, in a worker, as a run's step would."""
from __future__ import annotations

from typing import Any

from celery.exceptions import TimeoutError as CeleryTimeout
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from capabilities.executors.base import new_span_id, new_trace_id
from capabilities.models import Capability, CapabilityVersion
from capabilities.policy import CHANGES_STATE
from capabilities.ratelimit import as_observation
from capabilities.wiring import capability_executor
from core import queue
from core.audit import audit
from core.errors import InvalidInput, NotAllowed, ServiceError
from core.models import AuditAction
from core.permissions import allowed, require
from core.projects import project_scope
from runtime.observation import Observation
from runtime.validation import argument_problems

TRY_AUDIT_ACTION = AuditAction.CAPABILITY_TRIED


class NoWorker(ServiceError):
    """Try it runs where runs run: in a worker. None answered in time."""

    status = 503
    code = "no_worker"


def capability_try(*, user, capability_id: int, arguments: Any, confirm: bool = False) -> Observation:
    """Run the current version once, outside any run, in a worker, and return the normalized observation.

    The call goes through the same task kind and executor as a run's steps (a
    Celery worker, the guard, the stdio pool), so it cannot pass here and fail
    in a run. Any capability that names a permission needs it; side-effecting
    ones (write/external) also need confirm=True (and, when they name none,
    the right to change capabilities). Every try leaves an audit event.
    """
    require(user, "capabilities.view_capability", "try capabilities")
    capability = (Capability.objects.select_related("current_version", "mcp_server").filter(pk=capability_id).first())
    if capability is None or capability.current_version is None:
        raise InvalidInput(f"No capability with id {capability_id}.")
    version = capability.current_version
    changes_state = version.side_effect in CHANGES_STATE
    needed = version.permission or ("capabilities.change_capability" if changes_state else "")
    if needed and not allowed(user, needed):
        raise NotAllowed(f"Trying {capability.name} needs the permission {needed}.")
    problems = [p.message for p in argument_problems(version.schema, arguments, version.max_argument_bytes)]
    if problems:
        raise InvalidInput("The arguments do not match the capability's schema.", fields={"arguments": problems})
    if changes_state and not confirm:
        raise NotAllowed(f"{capability.name} has side effects ({version.side_effect}): "
                         "confirm that you want it to run for real.", fields={"confirm": ["Required."]})
    trace_id, span_id = new_trace_id(), new_span_id()
    # A fresh key per try: a try-it is never a retry of an earlier one.
    key = f"try-{new_trace_id()}" if changes_state else None
    observation = _try_in_worker(version=version, arguments=arguments, key=key, trace_id=trace_id,
                                 span_id=span_id, user=user)
    with transaction.atomic():
        audit(actor=user, action=TRY_AUDIT_ACTION, target=capability,
              summary=f"Tried {capability.name} v{version.number} ({version.side_effect}): {observation.status.value}",
              details={"try_it": True, "version": version.number, "arguments": arguments,
                       "idempotency_key": key, "status": observation.status.value,
                       "error_code": observation.error_code and observation.error_code.value,
                       "side_effect": observation.side_effect.value, "trace_id": trace_id})
    return observation


def _try_in_worker(*, version: CapabilityVersion, arguments: dict, key: str | None, trace_id: str, span_id: str,
                   user) -> Observation:
    wait_s = float(version.timeout_s) + settings.AGENTOPS_TRY_WAIT_SECONDS
    # expires: a worker that picks the call up after we stopped waiting drops it instead of running it.
    routing = {"queue": settings.AGENTOPS_TRY_QUEUE} if settings.AGENTOPS_TRY_QUEUE else {}
    result = queue.send("capabilities.try_capability",
                        kwargs={"version_id": version.pk, "arguments": arguments, "idempotency_key": key,
                                "trace_id": trace_id, "span_id": span_id, "actor_id": user.pk},
                        expires=wait_s, **routing)
    try:
        data = result.get(timeout=wait_s, propagate=True, disable_sync_subtasks=False)
    except CeleryTimeout:
        raise NoWorker(f"No worker ran the call within {wait_s:g} s, so nothing was run. Try it runs in a Celery "
                       "worker, like a run: start one (python agentops/dev.py up, or celery -A agentops worker) "
                       "and try again.") from None
    return Observation.from_dict(data)


def capability_try_execute(*, version_id: int, arguments: dict, idempotency_key: str | None, trace_id: str,
                           span_id: str, actor_id: int | None) -> dict[str, Any]:
    """The worker's half of try it: the run engine's executor, once. Returns the observation as a dict."""
    version = CapabilityVersion.objects.select_related("capability__mcp_server").get(pk=version_id)
    actor = get_user_model().objects.filter(pk=actor_id).first() if actor_id else None
    spec = version.to_spec()
    executor = capability_executor(actor=actor, context={"try_it": True})
    # A worker takes the call in no project's scope: act in the capability's, as a run's pass acts in its
    # run's, so the rate limit taken is this project's (names are unique within a project only).
    with project_scope(version.capability.project_id):
        observation = as_observation(executor.execute(spec, arguments, idempotency_key=idempotency_key,
                                                      timeout_s=spec.timeout_s, trace_id=trace_id, span_id=span_id))
    return observation.to_dict()

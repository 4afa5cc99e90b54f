"""The runtime's ports, implemented on Django: clock, authorizer, registry view, approval book.

build_controller() assembles them, with the rate-limited executor and the run's planner, into
the one Controller a worker drives; the evaluation runner reuses the same adapters.
"""
from __future__ import annotations

import time

from django.conf import settings
from django.contrib.auth import get_user_model

from capabilities.models import Capability
from capabilities.wiring import capability_executor
from core.choices import ApprovalState
from runs.leases import INFRASTRUCTURE_ERRORS
from runs.models import Approval, Run
from runs.persistence import PassWriter
from runs.planners import planner_for
from runs.runtime.approvals import ApprovalDecision, ApprovalRequest
from runs.runtime.capability import CapabilitySpec
from runs.runtime.controller import Controller
from runs.runtime.ids import RandomIds

# How long an owner's permission answer is reused within one slice of a run.
PERMISSION_RECHECK_SECONDS = 5.0


class WallClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class OwnerAuthorizer:
    """The run owner's permissions, re-read at most every PERMISSION_RECHECK_SECONDS.

    Asked at validation and before every execution; within one slice of a run the
    answer is cached for a few seconds, so a permission removed mid-run takes
    effect at the latest that many seconds later, and a pass costs no query.
    """

    def __init__(self, owner_id: int, recheck_s: float | None = None):
        self.owner_id = owner_id
        self.recheck_s = PERMISSION_RECHECK_SECONDS if recheck_s is None else recheck_s
        self._cache: dict[str, tuple[float, bool]] = {}

    def permits(self, permission: str) -> bool:
        if not permission:
            return True
        cached = self._cache.get(permission)
        if cached is not None and time.monotonic() - cached[0] < self.recheck_s:
            return cached[1]
        user = get_user_model().objects.filter(pk=self.owner_id, is_active=True).first()
        allowed = bool(user and user.has_perm(permission))
        self._cache[permission] = (time.monotonic(), allowed)
        return allowed


class DjangoRegistry:
    """The registry as the runtime sees it: current versions as CapabilitySpecs.

    Specs are cached for the life of the object (one slice of one run) and dropped
    when the registry's version (its latest change, returned with every pass's
    commit) moves, so an edit or a disable takes effect at the next pass.
    """

    def __init__(self):
        self._specs: dict[str, CapabilitySpec | None] = {}
        self.version = None

    def observe_version(self, version) -> None:
        if version != self.version:
            self._specs.clear()
            self.version = version

    def get(self, name: str) -> CapabilitySpec | None:
        if name not in self._specs:
            capability = (Capability.objects.select_related("current_version", "mcp_server")
                          .filter(name=name, current_version__isnull=False).first())
            self._specs[name] = capability.current_version.to_spec() if capability else None
        return self._specs[name]

    def visible(self, authorizer) -> list[CapabilitySpec]:
        specs = [c.current_version.to_spec() for c in Capability.objects.select_related("current_version", "mcp_server")
                 .filter(enabled=True, current_version__isnull=False).order_by("name")]
        # A side-effecting capability the owner may not use is not offered to the planner.
        return [s for s in specs if not (s.changes_state and s.permission) or authorizer.permits(s.permission)]


class DjangoApprovalBook:
    """Answers the controller from the Approval table: exactly this request's decision."""

    def __init__(self, run: Run):
        self.run = run

    def decision_for(self, request: ApprovalRequest) -> ApprovalDecision | None:
        rows = Approval.objects.filter(run=self.run, kind=request.kind, revision__number=request.revision,
                                       state__in=[ApprovalState.APPROVED, ApprovalState.REJECTED])
        if request.kind == "step":
            rows = rows.filter(step__key=request.step_id, arguments_hash=request.arguments_hash or "")
        else:
            rows = rows.filter(plan_hash=request.plan_hash or "")
        approval = rows.select_related("decided_by").order_by("-decided_at").first()
        if approval is None:
            return None
        who = approval.decided_by.get_username() if approval.decided_by else ""
        return ApprovalDecision(approval.state == ApprovalState.APPROVED, approval.comment, who)


def build_controller(run: Run, writer: PassWriter | None = None, registry: DjangoRegistry | None = None) -> Controller:
    return Controller(registry=registry or DjangoRegistry(),
                      executor=capability_executor(context={"run_id": run.pk}), planner=planner_for(run), clock=WallClock(), authorizer=OwnerAuthorizer(run.owner_id),
                      approvals=DjangoApprovalBook(run), ids=RandomIds(),
                      approval_ttl_s=settings.AGENTOPS_APPROVAL_TTL_SECONDS, intents=writer,
                      abandon_on=INFRASTRUCTURE_ERRORS)

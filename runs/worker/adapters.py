"""The runtime's ports, implemented on Django: clock, authorizer, registry view, approval book.

build_controller() assembles them, with the rate-limited executor and the run's planner, into
the one Controller a worker drives; the evaluation runner reuses the same adapters.
"""
from __future__ import annotations

import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from capabilities.executors.fence import Fence
from capabilities.models import Capability
from capabilities.wiring import capability_executor
from core.choices import ApprovalState
from core.db_sessions import SESSION_CHECK_AFTER_S, check_session
from core.projects import active_project_id
from runs.models import Approval, PlanSubmission, Run
from runs.planners import planner_for
from runs.quotas import ProjectQuotas
from runs.trace.calls_in_flight import AnnouncedCalls
from runs.worker.leases import INFRASTRUCTURE_ERRORS, Lease
from runs.worker.persistence import PassWriter
from runtime.approvals import ApprovalDecision, ApprovalRequest
from runtime.capability import CapabilitySpec
from runtime.controller import Controller
from runtime.ids import RandomIds

# How long an owner's permission answer is reused within one slice of a run.
PERMISSION_RECHECK_SECONDS = 5.0


class WallClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class OwnerAuthorizer:
    """The run owner's permissions, re-read at most every PERMISSION_RECHECK_SECONDS; for a plan
    someone else proposed (a lead operator's plan for another user's external run), the
    intersection of the owner's and the proposer's, so nobody acts through another's run with
    permissions they lack (a confused deputy).

    Asked at validation and before every execution; within one slice of a run the
    answer is cached for a few seconds, so a permission removed mid-run takes
    effect at the latest that many seconds later, and a pass costs no query.
    """

    def __init__(self, owner_id: int, recheck_s: float | None = None, *, owner=None,
                 proposer_id: int | None = None):
        """owner: the user row, if the caller has just read it (a worker reads it with the run): the
        first answers come from it instead of a second read. proposer_id: who proposed the plan now
        running (proposed_by() changes it when the planner hands over another's plan)."""
        self.owner_id = owner_id
        self.recheck_s = PERMISSION_RECHECK_SECONDS if recheck_s is None else recheck_s
        self._cache: dict[str, tuple[float, bool]] = {}
        self._users: dict[int, tuple[float, object]] = {}
        if owner is not None and owner.pk == owner_id:
            self._users[owner_id] = (time.monotonic(), owner if owner.is_active else None)
        self.proposer_id: int | None = None
        self.proposed_by(proposer_id)

    def proposed_by(self, user_id: int | None) -> None:
        """The plan being validated and run from now on was proposed by `user_id`."""
        proposer = None if user_id == self.owner_id else user_id
        if proposer != self.proposer_id:
            self.proposer_id = proposer
            self._cache.clear()

    def permits(self, permission: str) -> bool:
        if not permission:
            return True
        now = time.monotonic()
        cached = self._cache.get(permission)
        if cached is not None and now - cached[0] < self.recheck_s:
            return cached[1]
        ids = [self.owner_id] if self.proposer_id is None else [self.owner_id, self.proposer_id]
        allowed = all(self._holds(user_id, permission, now) for user_id in ids)
        self._cache[permission] = (now, allowed)
        return allowed

    def _holds(self, user_id: int, permission: str, now: float) -> bool:
        read = self._users.get(user_id)
        if read is None or now - read[0] >= self.recheck_s:
            # One read of each user (and of their permissions, by has_perm) for every permission
            # asked within the recheck period, not one per permission.
            read = self._users[user_id] = (now, get_user_model().objects.filter(pk=user_id, is_active=True).first())
        user = read[1]
        return bool(user and user.has_perm(permission))


class SharedSpecs:
    """One project's registry specs at one version, shared by every run of that project a worker
    process advances.

    The version is the registry's latest change (every edit, new version or disable goes
    through capabilities.policy, which moves it), read with each claim and each pass's
    commit; so the 64 runs a worker starts at once read the registry once, not 64 times.
    Kept per project: capability names are unique within a project only, so two projects may
    each have a `send_refund` with its own endpoint, approval and side-effect class, and a
    run must never be handed the other project's. Only each project's latest version is kept.
    """

    def __init__(self, version, project_id: int | None = None) -> None:
        self.version = version
        self.project_id = project_id
        self.specs: dict[str, CapabilitySpec | None] = {}
        self.enabled: list[CapabilitySpec] | None = None

    _latest: dict[int | None, SharedSpecs] = {}

    @classmethod
    def forget(cls) -> None:
        cls._latest = {}

    @classmethod
    def at(cls, version, project_id: int | None) -> SharedSpecs:
        latest = cls._latest.get(project_id)
        if latest is None or latest.version != version:
            latest = cls._latest[project_id] = cls(version, project_id)
        return latest


class DjangoRegistry:
    """The registry as the runtime sees it: the current versions of the capabilities of the
    project in scope (core.projects), as CapabilitySpecs.

    Specs are read at the registry's version (its latest change, returned with the claim and
    every pass's commit) and shared by all runs of the project in the process at that version;
    when the version moves, an edit or a disable takes effect at the next pass. Without a
    version (a database that cannot return it) the specs are cached for this object's life only.
    """

    def __init__(self):
        self._shared = SharedSpecs(None, active_project_id())
        self.version = None

    def observe_version(self, version) -> None:
        if version is not None and version != self.version:
            self._shared = SharedSpecs.at(version, self._shared.project_id)
            self.version = version

    def _capabilities(self):
        """The capabilities of the project this registry was made in (every project's, made in none),
        whatever is in scope when they are read: the specs are kept under that project."""
        rows = Capability._base_manager.all()
        project_id = self._shared.project_id
        return rows if project_id is None else rows.filter(project_id=project_id)

    def get(self, name: str) -> CapabilitySpec | None:
        specs = self._shared.specs
        if name not in specs:
            capability = (self._capabilities().select_related("current_version", "mcp_server")
                          .filter(name=name, current_version__isnull=False).first())
            specs[name] = _spec_of(capability) if capability else None
        return specs[name]

    def version_id(self, name: str) -> int | None:
        """The capability's current version (its CapabilityVersion's id), None if it is not registered."""
        spec = self.get(name)
        return spec.version_id if spec is not None else None

    def visible(self, authorizer) -> list[CapabilitySpec]:
        shared = self._shared
        if shared.enabled is None:
            shared.enabled = [_spec_of(c) for c in self._capabilities().select_related("current_version", "mcp_server")
                              .filter(enabled=True, current_version__isnull=False).order_by("name")]
            # The plan's steps are looked up next: they find the specs read here.
            for spec in shared.enabled:
                shared.specs.setdefault(spec.name, spec)
        # A side-effecting capability the owner may not use is not offered to the planner.
        return [s for s in shared.enabled if not (s.changes_state and s.permission) or authorizer.permits(s.permission)]


def _spec_of(capability: Capability) -> CapabilitySpec:
    version = capability.current_version
    version.capability = capability  # already loaded: to_spec() would read it again, once per capability
    return version.to_spec()


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


def lease_is_current(lease: Lease) -> bool:
    """Whether `lease` is still the run's. Inside a transaction the run row is locked until it ends,
    so a takeover (whose claim updates the row) waits for what the caller commits in it."""
    rows = Run.objects.filter(pk=lease.run_id, lease_owner=lease.worker, lease_token=lease.token)
    if connection.in_atomic_block:
        rows = rows.select_for_update()
    return rows.exists()


class FencedExecutor:
    """Gives each state-changing call and lookup of a leased run its fence (lease token + attempt)."""

    def __init__(self, inner, lease: Lease | None):
        self.inner = inner
        self.lease = lease

    def _fence(self, spec: CapabilitySpec, attempt: int | None) -> Fence | None:
        lease = self.lease
        if lease is None or not spec.changes_state:
            return None
        return Fence(lease.run_id, lease.token, attempt or 0, check=lambda: lease_is_current(lease))

    def execute(self, spec: CapabilitySpec, arguments: dict, *, attempt: int | None = None, **kw):
        return self.inner.execute(spec, arguments, attempt=attempt, fence=self._fence(spec, attempt), **kw)

    def lookup_status(self, spec: CapabilitySpec, arguments: dict, *, attempt: int | None = None, **kw):
        return self.inner.lookup_status(spec, arguments, attempt=attempt, fence=self._fence(spec, attempt), **kw)

    def in_flight(self, spec: CapabilitySpec, *, idempotency_key: str | None) -> bool:
        return self.inner.in_flight(spec, idempotency_key=idempotency_key)


class SessionCheckedCalls:
    """Wraps a run's executor: after a call longer than SESSION_CHECK_AFTER_S, check_session()."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):  # lookup_status, in_flight: as the inner executor has them
        return getattr(self.inner, name)

    def execute(self, spec, arguments: dict, **kw):
        began = time.monotonic()
        try:
            return self.inner.execute(spec, arguments, **kw)
        finally:
            if time.monotonic() - began > SESSION_CHECK_AFTER_S:
                check_session()


def build_controller(run: Run, writer: PassWriter | None = None, registry: DjangoRegistry | None = None) -> Controller:
    registry = registry or DjangoRegistry()
    executor = AnnouncedCalls(SessionCheckedCalls(capability_executor(context={"run_id": run.pk},
                                                                      registry_version=registry.version)), run.pk)
    authorizer = OwnerAuthorizer(run.owner_id, owner=run.owner if Run.owner.is_cached(run) else None,
                                 proposer_id=latest_proposer(run))
    return Controller(registry=registry,
                      executor=FencedExecutor(executor, writer.lease if writer is not None else None),
                      planner=planner_for(run, on_proposed=authorizer.proposed_by), clock=WallClock(),
                      authorizer=authorizer,
                      approvals=DjangoApprovalBook(run), ids=RandomIds(),
                      approval_ttl_s=settings.AGENTOPS_APPROVAL_TTL_SECONDS, intents=writer,
                      abandon_on=INFRASTRUCTURE_ERRORS, cancel_requested=cancel_check(run.pk),
                      quotas=ProjectQuotas.for_run(run))


def latest_proposer(run: Run) -> int | None:
    """Who submitted an external run's latest plan (the one running, or the one about to be validated)."""
    if run.planner != "external":
        return None
    return (PlanSubmission.objects.filter(run_id=run.pk).order_by("-revision")
            .values_list("submitted_by_id", flat=True).first())


def cancel_check(run_id: int):
    """Asked when a call returns: a cancel requested while it was in flight stops the run at this
    decision (design.md "Cancel"), not after whatever the observation would have led to."""
    return lambda: Run.objects.filter(pk=run_id, cancel_requested_at__isnull=False).exists()

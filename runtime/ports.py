"""The collaborators the controller takes as arguments, so it runs the same under a
unit test, a scenario file, an in-process run or a Celery task."""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from .approvals import ApprovalDecision, ApprovalRequest
from .capability import CapabilitySpec
from .observation import AdmissionRefused, Observation
from .planning import PlannerCallCeiling, PlanningRequest, PlanProposal


@runtime_checkable
class Authorizer(Protocol):
    def permits(self, permission: str) -> bool:
        """Does the run's owner (and, for a plan someone else proposed, that proposer too) hold this
        permission now? Asked at validation and again immediately before every execution."""


@runtime_checkable
class CapabilityRegistry(Protocol):
    def get(self, name: str) -> CapabilitySpec | None: ...

    def visible(self, authorizer: Authorizer) -> list[CapabilitySpec]:
        """Enabled capabilities the planner may see."""


@runtime_checkable
class Executor(Protocol):
    def execute(self, spec: CapabilitySpec, arguments: dict[str, Any], *, idempotency_key: str | None,
                timeout_s: float, trace_id: str, span_id: str, attempt: int) -> Observation | AdmissionRefused:
        """Run the capability within timeout_s; classify every failure into an Observation, never raise.
        AdmissionRefused: a rate limit did not let the call out (nothing was sent). `attempt`: the
        attempt number the call is recorded as (with the lease, the fencing token the callee sees)."""

    def lookup_status(self, spec: CapabilitySpec, arguments: dict[str, Any], *, idempotency_key: str | None,
                      timeout_s: float, attempt: int) -> Observation | None:
        """Did the operation with this key commit? OK + committed + result, OK + not_committed, or None."""

    # Optional: executors that may leave a call running after its timeout answer
    # in_flight(spec, idempotency_key=...) -> bool (resolution.call_in_flight).


@runtime_checkable
class Planner(Protocol):
    def propose(self, request: PlanningRequest) -> PlanProposal | None:
        """None: the planner has no (further) plan."""


@runtime_checkable
class CallingPlanner(Planner, Protocol):
    """A planner whose every call spends tokens somewhere (an LLM endpoint): its calls are written
    ahead (intents.PlannerCallIntent) so a worker lost mid-call never drops what the call spent."""

    def ceiling(self, request: PlanningRequest) -> PlannerCallCeiling:
        """The most propose(request) may spend."""


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


@runtime_checkable
class IdSource(Protocol):
    def new_id(self) -> str:
        """A fresh id (attempts, spans): random in production, sequential in scenarios."""


@runtime_checkable
class ApprovalBook(Protocol):
    def decision_for(self, request: ApprovalRequest) -> ApprovalDecision | None:
        """The decision for exactly this request, or None while undecided."""


class Quotas(Protocol):
    """A limit the run shares with others (its project's per-day quotas), asked before each pass."""

    def refusal(self, state: Any, *, planning: bool) -> tuple[str, str] | None:
        """(the quota's name, why) when the pass may not go on: a run that has no plan yet is refused when the
        project started its quota of runs today; a planner call (planning=True) when the project spent
        its tokens or cost for the day. None: go on."""
        ...

"""Simulated collaborators for scenario files, evaluation suites and tests: a clock
that only moves when told, capabilities that answer from a script, and scripted
approvals. The controller they drive is the production one."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..approvals import ApprovalDecision, ApprovalRequest
from ..capability import CapabilitySpec
from ..observation import ErrorCode, Observation, SideEffectStatus, error_code_for_http_status


class SimulatedClock:
    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self._now += seconds


class StaticRegistry:
    def __init__(self, specs: Iterable[CapabilitySpec]) -> None:
        self.specs = {s.name: s for s in specs}

    def get(self, name: str) -> CapabilitySpec | None:
        return self.specs.get(name)

    def visible(self, authorizer: Any) -> list[CapabilitySpec]:
        return [s for s in self.specs.values() if s.enabled]


class StaticAuthorizer:
    """permissions None: the owner holds every permission (a scenario's default)."""

    def __init__(self, permissions: Iterable[str] | None = None) -> None:
        self.permissions = None if permissions is None else set(permissions)

    def permits(self, permission: str) -> bool:
        return not permission or self.permissions is None or permission in self.permissions


# In an approvals script: nobody answers this request, and it lapses at its expiry.
EXPIRE = "expire"


class ScriptedApprovals:
    """Answers approval requests in the order they are first asked about; with none
    left, every further request stays undecided. The same request gets the same answer.
    An EXPIRE entry leaves its request undecided and marks it to be let expire."""

    def __init__(self, decisions: Iterable[ApprovalDecision | str]) -> None:
        self.remaining = list(decisions)
        self.answered: dict[str, ApprovalDecision | None] = {}
        self.expire: set[str] = set()
        self.requests: list[ApprovalRequest] = []

    def decision_for(self, request: ApprovalRequest) -> ApprovalDecision | None:
        if request.key in self.expire:
            return None
        if self.answered.get(request.key) is None:
            if request.key not in self.answered:
                self.requests.append(request)
            answer = self.remaining.pop(0) if self.remaining else None
            if isinstance(answer, str):  # EXPIRE, the one word a script holds
                self.expire.add(request.key)
                answer = None
            self.answered[request.key] = answer
        return self.answered[request.key]

    def expiring(self, request: ApprovalRequest) -> bool:
        return request.key in self.expire


class SimulatedCapabilities:
    """An Executor answering from scripted responses, consumed in order per capability
    (the last one repeats), with a truthful record of which side effects committed."""

    def __init__(self, responses: dict[str, list[dict[str, Any]]], clock: SimulatedClock) -> None:
        self.responses = {name: list(items) for name, items in responses.items()}
        self.clock = clock
        self.consumed: dict[str, int] = {}
        self.committed: dict[str, Any] = {}   # idempotency key -> the result it committed
        self.commits = 0
        # Calls whose effect lands after the caller gave up: (lands at, key, output, idempotent).
        self.landing: list[tuple[float, str | None, Any, bool]] = []

    def execute(self, spec: CapabilitySpec, arguments: dict[str, Any], *, idempotency_key: str | None,
                timeout_s: float, trace_id: str = "", span_id: str = "", **_: Any) -> Observation:
        self._land()
        if spec.idempotent and idempotency_key is not None and idempotency_key in self.committed:
            # The callee deduplicates: the first result again, nothing new committed. An exported
            # run records that answer too (one response per call): it is consumed, not replayed.
            self._skip_deduplicated(spec.name)
            return Observation.success(self.committed[idempotency_key], side_effect=SideEffectStatus.COMMITTED,
                                       extra={"deduplicated": True})
        response = self._next(spec.name)
        if response is None:
            return Observation.failure(ErrorCode.NOT_FOUND, f"no simulated responses for {spec.name}")
        writes = spec.changes_state
        # A caller that gave up on a side-effecting call cannot know whether it happened.
        lost = SideEffectStatus.UNKNOWN if writes else SideEffectStatus.NOT_COMMITTED
        if "commit_late_s" in response:
            # The caller gives up at its timeout; the callee commits later all the same.
            sent = self.clock.now()
            self.clock.advance(timeout_s)
            self.landing.append((sent + float(response["commit_late_s"]), idempotency_key, response.get("return"),
                                 spec.idempotent))
            self._land()
            return Observation.failure(ErrorCode.TIMEOUT, f"no answer within {timeout_s:g}s", side_effect=lost)
        if response.get("commit_then_timeout"):
            self.clock.advance(timeout_s)
            self._commit(idempotency_key, response.get("return"), writes)
            return Observation.failure(ErrorCode.TIMEOUT, f"no answer within {timeout_s:g}s", side_effect=lost)
        latency = float(response.get("latency_s", 0.0))
        if latency > timeout_s:
            self.clock.advance(timeout_s)
            return Observation.failure(ErrorCode.TIMEOUT, f"no answer within {timeout_s:g}s", side_effect=lost)
        retry_after = _retry_after(response)
        if "raise" in response:
            code = ErrorCode(response["raise"])
            # A timeout is only seen once the caller has waited the whole timeout.
            self.clock.advance(timeout_s if code is ErrorCode.TIMEOUT and "latency_s" not in response else latency)
            return Observation.failure(code, f"simulated {code.value}", retry_after_s=retry_after,
                                       side_effect=_side_effect_of_failure(code, lost))
        self.clock.advance(latency)
        output = response.get("return")
        if "http_status" in response:
            output = response.get("body")
            http_code = error_code_for_http_status(int(response["http_status"]))
            if http_code is not None:
                return Observation.failure(http_code, f"HTTP {response['http_status']}", output=output,
                                           retry_after_s=retry_after, side_effect=_side_effect_of_failure(http_code, lost),
                                           extra={"http_status": int(response["http_status"])})
        side_effect = SideEffectStatus.NOT_COMMITTED
        if writes:
            self._commit(idempotency_key, output, writes)
            side_effect = SideEffectStatus.COMMITTED
        return Observation.success(output, state_changed=bool(response.get("state_changed", writes)),
                                   side_effect=side_effect)

    def lookup_status(self, spec: CapabilitySpec, arguments: dict[str, Any], *, idempotency_key: str | None,
                      timeout_s: float, **_: Any) -> Observation | None:
        if not spec.status_lookup or idempotency_key is None:
            return None
        self._land()
        if idempotency_key in self.committed:
            return Observation.success(self.committed[idempotency_key], side_effect=SideEffectStatus.COMMITTED)
        return Observation.success(None, side_effect=SideEffectStatus.NOT_COMMITTED)

    def eventual_commits(self) -> int:
        """Every commit, the late ones still to land included: what the callee will have done."""
        for _, key, output, idempotent in sorted(self.landing, key=lambda c: c[0]):
            if not (idempotent and key is not None and key in self.committed):
                self._commit(key, output, True)
        self.landing = []
        return self.commits

    def _land(self) -> None:
        """Commit the late calls whose time has come (a lookup before then truthfully says not committed)."""
        now, due = self.clock.now(), [c for c in self.landing if c[0] <= self.clock.now()]
        self.landing = [c for c in self.landing if c[0] > now]
        for _, key, output, idempotent in due:
            if not (idempotent and key is not None and key in self.committed):   # an idempotent callee dedups
                self._commit(key, output, True)

    def _skip_deduplicated(self, name: str) -> None:
        items, index = self.responses.get(name) or [], self.consumed.get(name, 0)
        if index < len(items) and items[index].get("deduplicated"):
            self.consumed[name] = index + 1

    def _next(self, name: str) -> dict[str, Any] | None:
        items = self.responses.get(name)
        if not items:
            return None
        index = self.consumed.get(name, 0)
        self.consumed[name] = index + 1
        return items[min(index, len(items) - 1)]

    def _commit(self, key: str | None, output: Any, writes: bool) -> None:
        if not writes:
            return
        self.commits += 1
        if key is not None and key not in self.committed:
            self.committed[key] = output


def _side_effect_of_failure(code: ErrorCode, lost: SideEffectStatus) -> SideEffectStatus:
    # Only a timeout leaves the caller not knowing; an error answer means nothing was done.
    return lost if code is ErrorCode.TIMEOUT else SideEffectStatus.NOT_COMMITTED


def _retry_after(response: dict[str, Any]) -> float | None:
    if response.get("retry_after_s") is not None:
        return float(response["retry_after_s"])
    headers = {str(k).lower(): v for k, v in (response.get("headers") or {}).items()}
    if "retry-after" in headers:
        return float(headers["retry-after"])
    return None

"""Export a recorded run as a scenario file, and replay it with one response changed.

The records are read here and handed to the pure runtime.replay, which writes
the scenario. `scenario_what_if` runs an edited copy in-process: scenario runs use
the simulated clock and simulated capabilities, so nothing outside is touched.
"""
from __future__ import annotations

import json
import re
from typing import Any

from django.conf import settings

from capabilities.models import Capability, CapabilityVersion
from core import jsonlimits
from core.errors import InvalidInput
from runs.models import Approval, Attempt, PlanRevision, Run
from runtime import events as ev
from runtime.replay import (
    RecordedApproval,
    RecordedAttempt,
    RecordedPlan,
    scenario_from_record,
)
from runtime.sim.scenario import ScenarioError, load_scenario, run_scenario
from runtime.stop import RunStatus, StopKind, StopReason

_HTTP_STATUS = re.compile(r"^HTTP (\d{3})\b")
EXPECTED_COUNTS = ("tool_calls", "revisions", "retries", "approvals_requested", "tokens", "side_effects_committed")


def run_scenario_export(*, run: Run) -> dict[str, Any]:
    """The scenario (a JSON-ready dict) whose run reproduces this run's decisions and stop."""
    plans = [RecordedPlan(r.number, tuple(r.steps or []), r.accepted, r.tokens, r.cost, r.reason_code, r.reason,
                          r.planner_output) for r in PlanRevision.objects.filter(run=run).order_by("number")]
    specs = _capability_specs(run, plans)
    return scenario_from_record(
        name=f"run {run.pk}: {run.goal[:80]}", goal=run.goal, completion=run.completion or None,
        budgets=run.budgets, capabilities=specs, plans=plans, attempts=list(_attempts(run)),
        approvals=_approvals(run), owner_permissions=_owner_permissions(run, specs),
        require_plan_approval=run.require_plan_approval, expect=_expect(run),
        approval_ttl_s=float(settings.AGENTOPS_APPROVAL_TTL_SECONDS),
        description=f"Exported from run {run.pk} (trace {run.trace_id}, {run.planner} planner); "
                    "capability responses are its recorded observations, the planner plays back its revisions.")


def _capability_specs(run: Run, plans: list[RecordedPlan]):
    """The version each capability ran against (the latest the run used), else the current one."""
    used = {}
    for version in (CapabilityVersion.objects.filter(steps__run=run).select_related("capability__mcp_server")
                    .order_by("number").distinct()):
        used[version.capability.name] = version
    named = {str(s.get("capability")) for p in plans for s in p.steps if isinstance(s, dict)}
    for capability in (Capability.objects.filter(name__in=named - set(used), current_version__isnull=False)
                       .select_related("current_version", "mcp_server")):
        version = capability.current_version
        version.capability = capability
        used[capability.name] = version
    return [used[name].to_spec() for name in sorted(used)]


def _attempts(run: Run):
    for a in Attempt.objects.filter(run=run).select_related("output_ref").order_by("started_at", "id").iterator(
            chunk_size=500):
        output = json.loads(a.output_ref.content) if a.output_ref_id else a.output
        # The HTTP status is not a column; the http executor's message starts with it.
        status = _HTTP_STATUS.match(a.error_message or "")
        yield RecordedAttempt(a.capability_name, a.kind, a.idempotency_key or None, a.status, a.error_code, output,
                              a.state_changed, a.side_effect_status, a.latency_s, a.retry_after_s,
                              int(status.group(1)) if status else None)


def _approvals(run: Run) -> list[RecordedApproval]:
    decided = []
    for approval in Approval.objects.filter(run=run).order_by("requested_at", "id"):
        if approval.state == "expired" and run.stop_reason == StopKind.APPROVAL_EXPIRED:
            decided.append(RecordedApproval(False, expired=True))
        if approval.state not in ("approved", "rejected"):
            break  # undecided: the scenario's run waits there
        decided.append(RecordedApproval(approval.state == "approved", approval.comment))
    return decided


def _owner_permissions(run: Run, specs) -> list[str]:
    return [p for p in sorted({s.permission for s in specs if s.permission}) if run.owner.has_perm(p)]


def _expect(run: Run) -> dict[str, Any]:
    expect: dict[str, Any] = {field: getattr(run, field) for field in EXPECTED_COUNTS}
    # A cancellation, or a project's quota (the day's other runs), came from outside the run: nothing
    # in a scenario replays it.
    outside = run.status == RunStatus.CANCELLED or run.stop_reason.startswith(StopReason.prefix(StopKind.QUOTA_EXHAUSTED))
    if not outside:
        expect["status"] = run.status
        if run.stop_reason:
            expect["stop_reason"] = run.stop_reason
            expect["stall_kind"] = getattr(run, "stall_kind", "") or None
    return expect


def scenario_filename(run: Run) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", run.goal.lower()).strip("-")[:40] or "run"
    return f"run-{run.pk}-{slug}.json"


# -- what if one response had been different? --------------------------------------------------

def response_choices(scenario: dict[str, Any]) -> list[tuple[str, str]]:
    """("name:index", label) for every response of every capability in the scenario."""
    return [(f"{c['name']}:{i}", f"{c['name']} response {i + 1}")
            for c in scenario.get("capabilities", []) for i in range(len(c.get("responses", [])))]


def scenario_what_if(*, scenario: dict[str, Any], response: str, replacement: str) -> dict[str, Any]:
    """Run the scenario with one response replaced; returns the result and its decisions."""
    name, _, index = response.rpartition(":")
    capability = next((c for c in scenario.get("capabilities", []) if c["name"] == name), None)
    if capability is None or not index.isdigit() or int(index) >= len(capability.get("responses", [])):
        raise InvalidInput("Choose one of the recorded responses.", fields={"response": "unknown response"})
    try:  # the project's limits: a 50,000-deep array or a 99,000-digit number is a clear refusal, not a 500
        new = jsonlimits.loads(replacement)
    except jsonlimits.JSONLimitError as exc:
        said = str(exc).removeprefix("Not valid JSON: ")
        message = f"The response is refused: {said}" if isinstance(exc, jsonlimits.JSONTooLarge) else \
            f"The response is not valid JSON: {said}"
        raise InvalidInput(message, fields={"replacement": said}) from None
    edited = json.loads(json.dumps(scenario))
    target = next(c for c in edited["capabilities"] if c["name"] == name)
    target["responses"][int(index)] = new
    edited["expect"] = {}
    try:
        result = run_scenario(load_scenario(edited))
    except ScenarioError as exc:
        raise InvalidInput("The edited scenario is invalid: " + "; ".join(exc.problems),
                           fields={"replacement": "; ".join(exc.problems)}) from None
    decisions = [{"decision": e.decision, "reason": e.reason} for e in result.events
                 if isinstance(e, ev.DecisionMade)]
    return {"result": result.to_dict(), "decisions": decisions, "response": response, "replacement": new}


def scenario_replay(*, scenario: dict[str, Any]) -> dict[str, Any]:
    """The exported scenario as it is: what the runtime decides on the recorded responses."""
    try:
        result = run_scenario(load_scenario(scenario))
    except ScenarioError as exc:  # e.g. a capability policy the scenario format cannot express
        return {"result": None, "decisions": [], "problems": exc.problems}
    return {"result": result.to_dict(),
            "decisions": [{"decision": e.decision, "reason": e.reason} for e in result.events
                          if isinstance(e, ev.DecisionMade)]}

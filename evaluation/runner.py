"""Run a suite in both modes through the production controller, persisting real runs.

Each task runs twice, `direct` then `planning`, each in a fresh simulated world
(prepare_scenario: the real Controller, simulated capabilities answering from the
task's script, a simulated clock) under the task's budgets and deadline. Every
pass is written with runs.worker.persistence.record_transition in its own transaction,
so each result links to a real trace at /runs/<id>/.
"""
from __future__ import annotations

import hashlib
import json
import logging
import random
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from capabilities.wiring import capability_executor
from core.choices import ApprovalState, RunStatus
from core.projects import project_scope
from evaluation.models import Evaluation, EvaluationResult
from evaluation.suites import task_problems, task_scenario
from evaluation.verdicts import Outcome, mode_aggregate, task_verdict, verdict_counts
from runs.models import Approval, Planner, Run, Step
from runs.planners import planner_from
from runs.services import run_finish
from runs.worker.adapters import DjangoRegistry, OwnerAuthorizer, WallClock
from runs.worker.persistence import record_transition
from runtime import events as ev
from runtime.budgets import BudgetName
from runtime.completion import completion_met
from runtime.controller import Controller, Transition
from runtime.observation import SideEffectStatus, Status
from runtime.sim.planners import DirectPlanner, ScriptedPlanner
from runtime.sim.scenario import prepare_scenario
from runtime.sim.simulation import ScriptedApprovals
from runtime.state import RunState
from runtime.stop import StopKind, stop_kind, stop_reason

log = logging.getLogger(__name__)

MODES = ("direct", "planning")
# A task that needs more passes than this is broken, not slow: stop it as an internal error.
MAX_PASSES = 5_000
# While the runner drives a run, it holds the run's lease so no worker (or the overdue
# sweep) ever advances an evaluation run against the real registry.
LEASE = timedelta(hours=1)


def _at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


class TimedPlanner:
    """Wraps the scripted planner: a plan's optional "latency_s" advances the simulated
    clock, so planning mode pays for its planner calls in time as well as tokens."""

    def __init__(self, inner: Any, plans: list[Any], clock: Any) -> None:
        self.inner, self.plans, self.clock = inner, plans, clock

    def propose(self, request):
        proposal = self.inner.propose(request)
        index = request.revision - 1
        raw = self.plans[index] if proposal is not None and 0 <= index < len(self.plans) else None
        latency = raw.get("latency_s") if isinstance(raw, dict) else None
        if isinstance(latency, (int, float)) and not isinstance(latency, bool) and latency > 0:
            self.clock.advance(float(latency))
        return proposal


class WallTimedPlanner:
    """Wraps a live planner (rules, llm): the wall time of each planner call advances the
    simulated clock, so planning mode pays for real model latency."""

    def __init__(self, inner: Any, clock: Any) -> None:
        self.inner, self.clock = inner, clock

    def propose(self, request):
        started = time.perf_counter()
        try:
            return self.inner.propose(request)
        finally:
            self.clock.advance(time.perf_counter() - started)


def _planning_planner(evaluation: Evaluation, rig, scenario) -> Any:
    if evaluation.planning_mode == "scripted":
        return TimedPlanner(rig.controller.planner, list(scenario.plans), rig.clock)

    return WallTimedPlanner(planner_from(evaluation.planning_mode, evaluation.planner_config), rig.clock)


def suite_hash(tasks: list[dict[str, Any]]) -> str:
    """Identifies the exact task list an evaluation ran, so comparisons can tell when it changed."""
    return hashlib.sha256(json.dumps(tasks, sort_keys=True, default=str).encode()).hexdigest()[:16]


# -- one evaluation ----------------------------------------------------------------------

def evaluation_run(*, evaluation_id: int) -> Evaluation | None:
    """Claim a queued evaluation and run it to the end; None if someone else has it.

    At-least-once delivery is harmless: only the caller whose conditional UPDATE
    moves it from queued to running does the work.
    """
    claimed = Evaluation.objects.filter(pk=evaluation_id, status=Evaluation.Status.QUEUED).update(
        status=Evaluation.Status.RUNNING, started_at=timezone.now())
    if not claimed:
        return None
    evaluation = Evaluation.objects.select_related("suite", "suite_version", "started_by").get(pk=evaluation_id)
    try:
        with project_scope(evaluation.project_id):   # its runs, registry and roles are its project's
            _run_all(evaluation)
    except Exception as exc:  # noqa: BLE001 - the page must say why an evaluation failed
        log.exception("evaluation %s failed", evaluation_id)
        Evaluation.objects.filter(pk=evaluation_id).update(
            status=Evaluation.Status.FAILED, finished_at=timezone.now(),
            error=f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc(limit=8)}"[:20_000])
    evaluation.refresh_from_db()
    return evaluation


def evaluation_tasks(evaluation: Evaluation) -> list[dict[str, Any]]:
    """The tasks of the version the evaluation recorded (the suite's own, for one from before versions)."""
    version = evaluation.suite_version
    return list(version.tasks if version is not None else evaluation.suite.tasks)


def _run_all(evaluation: Evaluation) -> None:
    tasks = evaluation_tasks(evaluation)
    problems = task_problems(tasks)
    if problems:
        raise ValueError("the suite is invalid:\n" + "\n".join(problems))
    if evaluation.tasks_total != len(tasks):
        Evaluation.objects.filter(pk=evaluation.pk).update(tasks_total=len(tasks))
    for task in tasks:
        results = {mode: run_task_mode(evaluation=evaluation, task=task, mode=mode) for mode in MODES}
        verdict = task_verdict(_outcome(results["direct"]), _outcome(results["planning"])).to_dict()
        for result in results.values():
            result.details = {**result.details, "verdict": verdict}
            result.save(update_fields=["details"])
        Evaluation.objects.filter(pk=evaluation.pk).update(tasks_done=F("tasks_done") + 1)
    summary = evaluation_summary(evaluation, tasks)
    Evaluation.objects.filter(pk=evaluation.pk).update(status=Evaluation.Status.COMPLETED, summary=summary,
                                                       finished_at=timezone.now())


def _outcome(result: EvaluationResult) -> Outcome:
    return Outcome(success=result.verified_success, stop_reason=result.stop_reason or None,
                   tool_calls=result.tool_calls, tokens=result.tokens, cost=result.cost,
                   latency_s=result.simulated_latency_s, recovered=result.recovered)


def evaluation_summary(evaluation: Evaluation, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    rows = list(EvaluationResult.objects.filter(evaluation=evaluation).order_by("id").values())
    by_mode = {mode: [r for r in rows if r["mode"] == mode] for mode in MODES}
    per_task = []
    expected_by_name = {t.get("name"): t.get("verdict_expected") for t in tasks}
    for row in by_mode["planning"]:
        verdict = (row["details"] or {}).get("verdict") or {}
        per_task.append({"task": row["task"], "verdict": verdict.get("code"),
                         "verdict_expected": expected_by_name.get(row["task"])})
    with_expectation = [t for t in per_task if t["verdict_expected"]]
    counts = verdict_counts(t["verdict"] for t in per_task if t["verdict"])
    return {
        "suite": evaluation.suite.name,
        "suite_hash": suite_hash(tasks),
        "planning_mode": evaluation.planning_mode,
        "modes": {mode: mode_aggregate(by_mode[mode]) for mode in MODES},
        "verdicts": counts,
        "tasks": per_task,
        "expectations_met": sum(1 for t in with_expectation if t["verdict"] == t["verdict_expected"]),
        "expectations_total": len(with_expectation),
        "headline": headline(counts, len(per_task)),
    }


def headline(counts: dict[str, int], total: int) -> str:
    return (f"Planning earned its overhead on {counts.get('planning_earned', 0)} of {total} tasks; "
            f"direct was as good and cheaper on {counts.get('direct_as_good', 0)}; "
            f"planning was as good but cost more on {counts.get('planning_cost_more', 0)}; "
            f"both failed on {counts.get('both_failed', 0)}.")


# -- one task in one mode ------------------------------------------------------------------

@dataclass
class _Harness:
    """What one task in one mode runs on: the real Controller and its collaborators."""

    controller: Controller
    clock: Any
    state: RunState
    commits: Callable[[list], int]


def _simulated(evaluation: Evaluation, scenario, mode: str) -> _Harness:
    rig = prepare_scenario(scenario, mode)
    # Start the simulated clock at the wall time, so the recorded timestamps read naturally.
    rig.clock.advance(time.time())
    if mode == "planning":
        rig.controller.planner = _planning_planner(evaluation, rig, scenario)
    return _Harness(rig.controller, rig.clock, replace(rig.state, started_at=rig.clock.now()),
                    lambda events: rig.executor.eventual_commits())


def _registered(evaluation: Evaluation, scenario, mode: str) -> _Harness:
    """The application's own registry, executors and wall clock: the suite scripts only the approvals."""
    if mode == "direct":
        planner: Any = DirectPlanner(scenario.direct["capability"], scenario.direct.get("arguments", {}))
    elif evaluation.planning_mode == "scripted":
        planner = ScriptedPlanner(list(scenario.plans))
    else:
        planner = planner_from(evaluation.planning_mode, evaluation.planner_config)
    clock = WallClock()
    controller = Controller(DjangoRegistry(), capability_executor(), planner, clock,
                            OwnerAuthorizer(evaluation.started_by_id), ScriptedApprovals(scenario.approvals),
                            rng=random.Random(scenario.seed))
    state = RunState.new(run_id="", goal=scenario.goal, completion=scenario.completion, budgets=scenario.budgets,
                         started_at=clock.now(), require_plan_approval=scenario.require_plan_approval,
                         allow_replan=mode != "direct")
    return _Harness(controller, clock, state, lambda events: sum(
        1 for e in events if isinstance(e, ev.AttemptFinished)
        and e.observation.side_effect is SideEffectStatus.COMMITTED))


def run_task_mode(*, evaluation: Evaluation, task: dict[str, Any], mode: str) -> EvaluationResult:
    scenario = task_scenario(task)
    harness = (_registered if scenario.registered else _simulated)(evaluation, scenario, mode)
    run = _create_run(evaluation, task, scenario, mode)
    state = replace(harness.state, run_id=str(run.pk), trace_id=run.trace_id)
    events: list[ev.Event] = []
    wall_started = time.perf_counter()

    def recorded(transition: Transition) -> None:
        _record(run, transition, evaluation.started_by, harness.clock.now())
        events.extend(transition.events)

    # The controller's own loop, as scenario files run: advance and sleep on its clock until a pause.
    state = harness.controller.run_until_pause(state, on_transition=recorded, max_passes=MAX_PASSES)
    if not state.is_terminal:
        _finish_paused(run, state)
    wall_latency = time.perf_counter() - wall_started
    simulated_latency = harness.clock.now() - state.started_at
    # The trace's times are the simulated ones: started when the clock started, finished when it stopped.
    Run.objects.filter(pk=run.pk).update(started_at=_at(state.started_at), finished_at=_at(harness.clock.now()))
    run.refresh_from_db()
    return _store_result(evaluation, task, scenario, mode, run, state, events, simulated_latency, wall_latency,
                         harness.commits(events))


def _create_run(evaluation: Evaluation, task: dict[str, Any], scenario, mode: str) -> Run:
    if mode == "direct":
        planner, config = Planner.DIRECT, {"direct": scenario.direct}
    elif evaluation.planning_mode == "scripted":
        planner, config = Planner.SCRIPTED, {"plans": list(scenario.plans)}
    else:
        planner, config = evaluation.planning_mode, dict(evaluation.planner_config)
    now = timezone.now()
    return Run.objects.create(
        goal=scenario.goal or scenario.name, completion=task["completion"], budgets=scenario.budgets.to_dict(),
        planner=planner, planner_config={**config, "evaluation_task": scenario.name},
        owner=evaluation.started_by, require_plan_approval=scenario.require_plan_approval, evaluation=evaluation,
        trace_id=uuid.uuid4().hex, deadline_at=now + timedelta(seconds=scenario.budgets.deadline_s),
        lease_owner=f"evaluation:{evaluation.pk}", lease_expires_at=now + LEASE)


def _record(run: Run, transition: Transition, user, now: float) -> None:
    """One pass, one transaction: the scripted approval decisions first, then the pass's records."""
    with transaction.atomic():
        for event in transition.events:
            if isinstance(event, ev.ApprovalDecided):
                _record_scripted_decision(run, event, user, now)
        record_transition(run, transition)


def _record_scripted_decision(run: Run, event: ev.ApprovalDecided, user, now: float) -> None:
    # record_transition leaves decisions to approval_decide(); the suite's script decides
    # here instead, recorded under the evaluation's owner and labelled as scripted.
    request, decision = event.request, event.decision
    rows = Approval.objects.filter(run=run, kind=request.kind, revision__number=request.revision,
                                   state=ApprovalState.PENDING)
    if request.kind == "step":
        rows = rows.filter(step__key=request.step_id)
    state = ApprovalState.APPROVED if decision.approved else ApprovalState.REJECTED
    comment = f"Scripted by the evaluation suite ({decision.decided_by or 'script'}): {decision.comment}".strip()
    for approval in rows:
        Approval.objects.filter(pk=approval.pk).update(state=state, decided_by=user, decided_at=_at(now),
                                                       comment=comment[:5000])
        if approval.step_id:
            Step.objects.filter(pk=approval.step_id).update(approval_state=state)


def _finish_paused(run: Run, state: RunState) -> None:
    with transaction.atomic():
        run.refresh_from_db()
        if run.is_finished:
            return
        if state.status.value == RunStatus.AWAITING_APPROVAL:
            # In production nobody answering means the deadline passes and the sweep stops the run.
            run_finish(run=run, status=RunStatus.STOPPED, stop_reason=stop_reason(StopKind.BUDGET_EXHAUSTED, BudgetName.DEADLINE),
                       detail="Evaluation: the suite's script has no approval decision left, so the deadline "
                              "would pass while awaiting approval.")
        else:
            run_finish(run=run, status=RunStatus.STOPPED, stop_reason=StopKind.INTERNAL_ERROR.value,
                       detail=f"Evaluation: the task did not finish within {MAX_PASSES} passes.")


def _store_result(evaluation, task, scenario, mode, run: Run, state: RunState, events, simulated_latency: float,
                  wall_latency: float, commits: int) -> EvaluationResult:
    attempts = [e for e in events if isinstance(e, ev.AttemptFinished)]
    failed = sum(1 for a in attempts if a.observation.status is not Status.OK)
    repeated = sum(1 for a in attempts if a.repeated_without_progress)
    stop_reason = run.stop_reason
    success = (stop_reason == StopKind.COMPLETED and scenario.completion is not None
               and completion_met(scenario.completion, state.latest_ok_outputs))
    usage = state.usage
    return EvaluationResult.objects.create(
        evaluation=evaluation, task=scenario.name, mode=mode, run=run, verified_success=success,
        status=run.status, stop_reason=stop_reason, tool_calls=usage.tool_calls, repeated_actions=repeated,
        revisions=usage.plans, retries=usage.retries, failed_observations=failed, recovered=success and failed > 0,
        tokens=usage.tokens, cost=usage.cost, simulated_latency_s=round(simulated_latency, 6),
        wall_latency_s=round(wall_latency, 6),
        details={
            "category": task.get("category", ""), "goal": scenario.goal, "description": task.get("description", ""),
            "verdict_expected": task.get("verdict_expected"), "stop_detail": run.stop_detail,
            "completion_expected": task.get("completion_expected"), "source": task.get("source"),
            "repeated_action_rate": repeated / usage.tool_calls if usage.tool_calls else 0.0,
            "stalled": stop_reason == StopKind.STALLED, "budget_stop": stop_kind(stop_reason) is StopKind.BUDGET_EXHAUSTED,
            "polls": usage.polls, "approvals_requested": sum(isinstance(e, ev.ApprovalRequested) for e in events),
            "side_effects_committed": commits,
        })

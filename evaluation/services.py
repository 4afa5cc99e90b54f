"""Writes for evaluations: sync the bundled suites, start an evaluation, run one now."""
from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from capabilities.models import Capability
from core import queue
from core.audit import audit
from core.errors import InvalidInput
from core.models import AuditAction
from core.permissions import require
from evaluation import runner
from evaluation.models import Evaluation, EvaluationSuite
from evaluation.suites import (
    SuiteDefinition,
    bundled_suites,
    planning_problems,
    task_problems,
)

EVALUATION_STARTED = AuditAction.EVALUATION_STARTED
# A suite of simulated tasks runs in seconds; one still "running" after this lost its worker.
STALE_AFTER = timedelta(minutes=30)


@transaction.atomic
def evaluation_suites_sync(*, suites: list[SuiteDefinition] | None = None) -> list[EvaluationSuite]:
    """Create or update a row per bundled suite file. Idempotent: unchanged suites are not written."""
    rows = []
    for suite in bundled_suites() if suites is None else suites:
        row = EvaluationSuite.objects.filter(name=suite.name).first()
        if row is None:
            row = EvaluationSuite.objects.create(name=suite.name, description=suite.description, tasks=suite.tasks,
                                                 planning_mode=suite.planning_mode, bundled=True)
        elif (row.tasks, row.description, row.planning_mode, row.bundled) != (
                suite.tasks, suite.description, suite.planning_mode, True):
            row.tasks, row.description, row.planning_mode, row.bundled = (
                suite.tasks, suite.description, suite.planning_mode, True)
            row.save(update_fields=["tasks", "description", "planning_mode", "bundled", "updated_at"])
        rows.append(row)
    return rows


def _queue(evaluation_id: int) -> None:
    transaction.on_commit(lambda: queue.send("evaluation.run_evaluation", (evaluation_id,)))


def evaluation_create(*, user, suite_id: int, label: str = "", planning_mode: str | None = None,
                      planner_config: dict | None = None) -> Evaluation:
    """Validate the suite and create a queued evaluation (no permission check: callers do it)."""
    suite = EvaluationSuite.objects.filter(pk=suite_id).first()
    if suite is None:
        raise InvalidInput(f"Evaluation suite {suite_id} does not exist.", fields={"suite": "no such suite"})
    if not isinstance(label, str) or len(label) > 200:
        raise InvalidInput("The label may be at most 200 characters.", fields={"label": "at most 200 characters"})
    problems = task_problems(suite.tasks)
    if problems:
        raise InvalidInput(f"Suite {suite.name!r} is invalid: " + "; ".join(problems[:20]),
                           fields={"suite": problems})
    planning_mode = planning_mode or suite.planning_mode
    planner_config = {} if planner_config is None else planner_config
    problems = planning_problems(suite.tasks, planning_mode, planner_config) + _registry_problems(suite.tasks)
    if problems:
        raise InvalidInput(f"Suite {suite.name!r} cannot be evaluated with the {planning_mode} planner: "
                           + "; ".join(problems[:20]), fields={"planning_mode": problems})
    return Evaluation.objects.create(suite=suite, label=label.strip(), planning_mode=planning_mode,
                                     planner_config=planner_config, started_by=user, tasks_total=len(suite.tasks))


@transaction.atomic
def evaluation_start(*, user, suite_id: int, label: str = "", planning_mode: str | None = None,
                     planner_config: dict | None = None) -> Evaluation:
    """Queue an evaluation of a suite; a worker runs it once this commits."""
    require(user, "evaluation.run_evaluation", "start evaluations")
    evaluation = evaluation_create(user=user, suite_id=suite_id, label=label, planning_mode=planning_mode,
                                   planner_config=planner_config)
    audit(actor=user, action=EVALUATION_STARTED, target=evaluation,
          summary=f"Evaluation {evaluation.pk} of suite {evaluation.suite.name} started"[:300],
          details={"suite": evaluation.suite.name, "label": evaluation.label, "tasks": evaluation.tasks_total,
                   "planning_mode": evaluation.planning_mode})
    _queue(evaluation.pk)
    return evaluation


def evaluation_run_now(*, user, suite_id: int, label: str = "", planning_mode: str | None = None,
                       planner_config: dict | None = None) -> Evaluation:
    """Create and run an evaluation in this process (the management command, tests)."""
    evaluation = evaluation_create(user=user, suite_id=suite_id, label=label, planning_mode=planning_mode,
                                   planner_config=planner_config)
    return runner.evaluation_run(evaluation_id=evaluation.pk)


def evaluation_fail_stale(*, now=None) -> int:
    """Mark evaluations whose worker vanished as failed, so their pages stop waiting."""
    now = now or timezone.now()
    return Evaluation.objects.filter(status=Evaluation.Status.RUNNING, started_at__lt=now - STALE_AFTER).update(
        status=Evaluation.Status.FAILED, finished_at=now,
        error=f"The worker running this evaluation stopped before it finished (no result after "
              f"{int(STALE_AFTER.total_seconds() // 60)} minutes). Start the evaluation again.")


def _registry_problems(tasks: list[dict]) -> list[str]:
    """Tasks run against the registry need their direct capability registered and enabled."""
    wanted = {t["direct"]["capability"] for t in tasks if t.get("capabilities") == "registered" and t.get("direct")}
    enabled = set(Capability.objects.filter(name__in=wanted, enabled=True).values_list("name", flat=True))
    return [f"capability {name!r} is not registered and enabled (task runs against the registry)"
            for name in sorted(wanted - enabled)]

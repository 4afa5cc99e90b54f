"""Writes for evaluations: sync the bundled suites, change a suite's tasks (a new version), start an
evaluation, run one now."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from capabilities.models import Capability
from core import queue
from core.audit import audit
from core.errors import Conflict, InvalidInput, NotFound
from core.models import AuditAction
from core.permissions import require
from core.roles import EDIT_SUITES
from evaluation import runner
from evaluation.models import Evaluation, EvaluationSuite, SuiteVersion
from evaluation.suites import (
    MAX_TASKS,
    SuiteDefinition,
    bundled_suites,
    planning_problems,
    task_problems,
    task_source_run,
)

EVALUATION_STARTED = AuditAction.EVALUATION_STARTED
SUITE_CHANGED = AuditAction.SUITE_CHANGED
# A suite of simulated tasks runs in seconds; one still "running" after this lost its worker.
STALE_AFTER = timedelta(minutes=30)


@transaction.atomic
def evaluation_suites_sync(*, suites: list[SuiteDefinition] | None = None) -> list[EvaluationSuite]:
    """Create or update a row per bundled suite file. Idempotent: unchanged suites are not written."""
    rows = []
    for suite in bundled_suites() if suites is None else suites:
        row = EvaluationSuite.objects.select_for_update().filter(name=suite.name).first()
        if row is None:
            row = EvaluationSuite.objects.create(name=suite.name, description=suite.description, tasks=suite.tasks,
                                                 planning_mode=suite.planning_mode, bundled=True)
            SuiteVersion.objects.create(suite=row, number=1, tasks=suite.tasks, summary=f"from {suite.source}"[:300])
        elif (row.tasks, row.description, row.planning_mode, row.bundled) != (
                suite.tasks, suite.description, suite.planning_mode, True):
            tasks_changed = row.tasks != suite.tasks
            before = row.tasks
            row.tasks, row.description, row.planning_mode, row.bundled = (
                suite.tasks, suite.description, suite.planning_mode, True)
            if tasks_changed:   # the file's tasks changed: the next version
                current_version(row)
                row.version += 1
                SuiteVersion.objects.create(suite=row, number=row.version, tasks=suite.tasks,
                                            summary=f"{suite.source} changed"[:300],
                                            changes=_changes(before, suite.tasks))
            row.save(update_fields=["tasks", "description", "planning_mode", "bundled", "version", "updated_at"])
        rows.append(row)
    return rows


# -- versions ---------------------------------------------------------------------------------

def _changes(before: list[dict], after: list[dict]) -> dict[str, list[str]]:
    old = {str(t.get("name")): t for t in before if isinstance(t, dict)}
    new = {str(t.get("name")): t for t in after if isinstance(t, dict)}
    return {"added": [n for n in new if n not in old], "removed": [n for n in old if n not in new],
            "changed": [n for n in new if n in old and new[n] != old[n]]}


def current_version(suite: EvaluationSuite) -> SuiteVersion:
    """The suite's current version row (made from its tasks if a suite written before versions lacks it)."""
    try:
        version, _ = SuiteVersion.objects.get_or_create(suite=suite, number=suite.version,
                                                        defaults={"tasks": suite.tasks})
    except IntegrityError:   # made at the same moment by another request
        version = SuiteVersion.objects.get(suite=suite, number=suite.version)
    return version


def suite_create(*, user, name: str, description: str = "", tasks: list[dict]) -> EvaluationSuite:
    """A suite of the user's own (not bundled), at version 1."""
    require(user, EDIT_SUITES, "change evaluation suites")
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > 120:
        raise InvalidInput("A suite's name is 1 to 120 characters.", fields={"name": "1 to 120 characters"})
    name = name.strip()
    problems = task_problems(tasks)
    if problems:
        raise InvalidInput("The tasks are invalid: " + "; ".join(problems[:20]), fields={"tasks": problems[:50]})
    if EvaluationSuite.objects.filter(name=name).exists():
        raise SuiteExists(f"A suite named {name!r} exists already.")
    with transaction.atomic():
        try:
            with transaction.atomic():
                suite = EvaluationSuite.objects.create(name=name, description=description, tasks=tasks)
        except IntegrityError:   # made by someone else at the same moment
            raise SuiteExists(f"A suite named {name!r} exists already.") from None
        version = SuiteVersion.objects.create(suite=suite, number=1, tasks=tasks, created_by=user,
                                              summary=f"created with {len(tasks)} task{'s' if len(tasks) != 1 else ''}",
                                              changes={"added": [t["name"] for t in tasks]})
        _audit_change(user, suite, version)
    return suite


class SuiteExists(Conflict):
    """suite_create: the name is taken (perhaps a moment ago, by a concurrent request)."""


@dataclass
class SuiteChange:
    suite: EvaluationSuite
    version: SuiteVersion | None          # None: nothing changed, no new version
    added: list[str] = field(default_factory=list)      # task names
    already_present: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def suite_tasks_change(*, user, suite_id: int, add: list[dict] | None = None, remove: list[str] | None = None,
                       summary: str = "") -> SuiteChange:
    """Add and/or remove tasks: one new immutable version (none when nothing changes).

    Idempotent on adds: a task whose name, or whose source run, is in the suite already is not added
    again (reported in `already_present`). The suite's row is locked for the change, so concurrent
    changes make consecutive versions, each on top of the one before, and nothing is lost (the
    unique (suite, number) refuses a version written on a stale read; it is retried)."""
    require(user, EDIT_SUITES, "change evaluation suites")
    for attempt in range(3):
        try:
            with transaction.atomic():
                return _change(user, suite_id, list(add or []), list(remove or []), summary)
        except IntegrityError:
            if attempt == 2:
                raise Conflict("The suite was changed by someone else at the same moment: try again.") from None
    raise AssertionError("unreachable")


def _change(user, suite_id: int, add: list[dict], remove: list[str], summary: str) -> SuiteChange:
    suite = EvaluationSuite.objects.select_for_update().filter(pk=suite_id).first()
    if suite is None:
        raise NotFound(f"No evaluation suite {suite_id}.")
    if suite.bundled:
        raise Conflict(f"Suite {suite.name!r} is bundled with AgentOps and follows its file: add runs to a suite "
                       "of your own (a new name makes one).")
    current_version(suite)
    tasks = list(suite.tasks)
    names = {t.get("name") for t in tasks}
    runs = {task_source_run(t) for t in tasks} - {None}
    unknown = [n for n in remove if n not in names]
    if unknown:
        raise InvalidInput(f"No task {unknown[0]!r} in suite {suite.name!r}.", fields={"remove": unknown[:20]})
    change = SuiteChange(suite=suite, version=None)
    if remove:
        tasks = [t for t in tasks if t.get("name") not in set(remove)]
        change.removed = [n for n in remove if n in names]
    for task in add:
        run = task_source_run(task)
        if task.get("name") in names or (run is not None and run in runs):
            change.already_present.append(str(task.get("name")))
            continue
        tasks.append(task)
        names.add(task.get("name"))
        if run is not None:
            runs.add(run)
        change.added.append(task["name"])
    if not change.added and not change.removed:
        return change
    if len(tasks) > MAX_TASKS:
        raise InvalidInput(f"A suite holds at most {MAX_TASKS} tasks: {suite.name!r} has {len(suite.tasks)}, "
                           f"and {len(change.added)} more would make {len(tasks)}.",
                           fields={"runs": f"at most {MAX_TASKS} tasks in a suite"})
    if not tasks:
        raise Conflict("A suite keeps at least one task.")
    problems = task_problems(tasks)
    if problems:
        raise InvalidInput("The tasks are invalid: " + "; ".join(problems[:20]), fields={"tasks": problems[:50]})
    number = suite.version + 1
    words = summary or "; ".join(part for part in (
        f"added {len(change.added)} task{'s' if len(change.added) != 1 else ''}" if change.added else "",
        f"removed {len(change.removed)}" if change.removed else "") if part)
    version = SuiteVersion.objects.create(suite=suite, number=number, tasks=tasks, created_by=user,
                                          summary=words[:300],
                                          changes={"added": change.added, "removed": change.removed})
    EvaluationSuite.objects.filter(pk=suite.pk).update(tasks=tasks, version=number, updated_at=timezone.now())
    suite.tasks, suite.version = tasks, number
    _audit_change(user, suite, version)
    change.version = version
    return change


def _audit_change(user, suite: EvaluationSuite, version: SuiteVersion) -> None:
    audit(actor=user, action=SUITE_CHANGED, target=suite,
          summary=f"Suite {suite.name} version {version.number}: {version.summary}"[:300],
          details={"suite": suite.name, "version": version.number, **version.changes})


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
    return Evaluation.objects.create(suite=suite, suite_version=current_version(suite), label=label.strip(),
                                     planning_mode=planning_mode, planner_config=planner_config, started_by=user,
                                     tasks_total=len(suite.tasks))


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

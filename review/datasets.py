"""Datasets that feed the evaluation: a reviewed run becomes a task of an evaluation suite.

One converter: the task is the run's export as a scenario (runs.trace.scenario_export: its goal,
completion criteria, budgets, the capabilities it used answering with its recorded observations,
its recorded plans for the scripted planner), plus the direct baseline an evaluation task needs,
plus what the reviewer expects:

- verdict_expected: one of the evaluation's verdicts (optional);
- completion_expected: whether planning mode should verify success (optional);
- expected_from_score: the name of a boolean score config whose question is "was the run's
  outcome right?". The adding reviewer's own score on the run is used (else the newest score by a
  person): yes keeps the run's recorded outcome as the expectation (it completed: it should
  complete), no expects the opposite. A run without that score falls back to completion_expected,
  and without that is refused with the reason.

The run's scores when it was added (the run's own, not its attempts') go with the task, shown beside
it on the evaluation page. Adding the same run to a suite twice adds nothing (idempotent, reported).
Lives in review (above evaluation and runs) because it reads review's scores; a review queue calls
`suite_add_runs` with its items' runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from core.errors import Conflict, InvalidInput, NotFound
from core.permissions import require
from core.roles import EDIT_SUITES
from evaluation import selectors as evaluation_selectors
from evaluation import services as evaluation_services
from evaluation.models import EvaluationSuite, SuiteVersion
from evaluation.suites import MAX_TASKS, task_problems, task_source_run
from evaluation.verdicts import VerdictCode
from review import queues
from review.models import ReviewQueue, Score, ScoreConfig, ScoreKind, ScoreSource
from review.scoring import score_value, shown_value
from runs import bulk
from runs.models import Run
from runs.models_bulk import BulkActionKind
from runs.trace.scenario_export import run_scenario_export
from runtime.stop import RunStatus

MAX_NOTE = 2000
MAX_SCORES = 50


@dataclass(frozen=True)
class Expectation:
    verdict_expected: str | None = None
    completion_expected: bool | None = None
    note: str = ""
    expected_from_score: str = ""


def expectation_clean(*, verdict_expected: Any = None, completion_expected: Any = None, note: Any = "",
                      expected_from_score: Any = "") -> Expectation:
    """The reviewer's expected outcome checked: InvalidInput naming each problem."""
    errors = {}
    if verdict_expected in ("", None):
        verdict_expected = None
    elif verdict_expected not in {v.value for v in VerdictCode}:
        errors["verdict_expected"] = f"one of {', '.join(v.value for v in VerdictCode)}"
    if completion_expected is not None and not isinstance(completion_expected, bool):
        errors["completion_expected"] = "true, false or null"
    if note is None:
        note = ""
    if not isinstance(note, str) or len(note) > MAX_NOTE:
        errors["note"] = f"text of at most {MAX_NOTE} characters"
    if expected_from_score is None:
        expected_from_score = ""
    if not isinstance(expected_from_score, str):
        errors["expected_from_score"] = "a score config's name"
    elif expected_from_score:
        config = ScoreConfig.objects.filter(name=expected_from_score).first()
        if config is None:
            errors["expected_from_score"] = f"no score config {expected_from_score[:60]!r}"
        elif config.kind != ScoreKind.BOOLEAN:
            errors["expected_from_score"] = "a boolean score config (was the run's outcome right? yes or no)"
    if errors:
        raise InvalidInput("The expected outcome is invalid: " + "; ".join(f"{k}: {v}" for k, v in errors.items()),
                           fields=errors)
    return Expectation(verdict_expected, completion_expected, note.strip(), expected_from_score)


def expectation_from(data) -> Expectation:
    """expectation_clean over the fields of a form, an API body or a bulk job's parameters."""
    return expectation_clean(verdict_expected=data.get("verdict_expected"),
                             completion_expected=data.get("completion_expected"), note=data.get("note", ""),
                             expected_from_score=data.get("expected_from_score", ""))


def run_refusal(run: Run) -> str:
    """Why the run cannot become a task ("" when it can): read from the run's row alone."""
    if not run.is_finished:
        return "still live (only a finished run becomes a task)"
    if run.evaluation_id:
        return "an evaluation's own run (its task is in a suite already)"
    if not run.completion:
        return "no completion criteria (an evaluation verifies success, it does not take it on trust)"
    return ""


def _direct_step(run: Run, scenario: dict[str, Any]) -> dict[str, Any] | None:
    """The direct baseline: a direct run's own step; else the first planned call of the capability the
    completion criteria name, else the first planned call."""
    if isinstance((run.planner_config or {}).get("direct"), dict):
        return run.planner_config["direct"]
    steps = [s for plan in scenario.get("planner", {}).get("plans", []) for s in plan.get("steps") or []
             if isinstance(s, dict) and isinstance(s.get("capability"), str)]
    wanted = (run.completion or {}).get("capability") if isinstance(run.completion, dict) else None
    step = next((s for s in steps if s["capability"] == wanted), steps[0] if steps else None)
    if step is None:
        return None
    return {"capability": step["capability"], "arguments": step.get("arguments") or {}}


def _scores(run: Run) -> list[dict[str, Any]]:
    rows = (Score.objects.filter(run=run, attempt__isnull=True).select_related("config", "author")
            .order_by("config__name", "created_at", "id")[:MAX_SCORES])
    return [{"config": s.config.name, "value": score_value(s), "shown": shown_value(s), "source": s.source,
             "author": s.author.get_username() if s.author else (s.source_name or s.source),
             "comment": s.comment[:300]} for s in rows]


def _from_score(run: Run, user, config_name: str) -> bool | None:
    """completion_expected from a boolean "was the outcome right?" score, or None without one."""
    people = Score.objects.filter(run=run, attempt__isnull=True, config__name=config_name,
                                  source=ScoreSource.PERSON, number__isnull=False)
    score = people.filter(author_key=f"user:{user.pk}").first() or people.order_by("-updated_at", "-id").first()
    if score is None:
        return None
    right = score.number == 1.0
    completed = run.status == RunStatus.COMPLETED
    return completed if right else not completed


class Refused(Exception):
    """This run cannot become a task, for the reason given."""


def run_task(run: Run, *, user, expectation: Expectation) -> dict[str, Any]:
    """The evaluation task made from a finished run (raises Refused with the reason when it cannot be)."""
    why = run_refusal(run)
    if why:
        raise Refused(why)
    scenario = run_scenario_export(run=run)
    direct = _direct_step(run, scenario)
    if direct is None:
        raise Refused("no planned step (a direct baseline needs one capability call)")
    if not scenario.get("planner", {}).get("plans"):
        raise Refused("no recorded plan (planning mode replays the run's plans)")
    completion_expected = expectation.completion_expected
    expected_from = None
    if expectation.expected_from_score:
        from_score = _from_score(run, user, expectation.expected_from_score)
        if from_score is not None:
            completion_expected, expected_from = from_score, expectation.expected_from_score
        elif completion_expected is None:
            raise Refused(f"no score {expectation.expected_from_score!r} by a person on this run to take the "
                          "expected outcome from")
    task = {**scenario, "name": f"run-{run.pk}", "direct": direct,
            "category": "from a run",
            "source": {"run": run.pk, "trace_id": run.trace_id, "goal": run.goal[:300], "status": run.status,
                       "stop_reason": run.stop_reason, "added_by": user.get_username(),
                       "added_at": timezone.now().isoformat(), "note": expectation.note,
                       "scores": _scores(run), "expected_from": expected_from}}
    if expectation.verdict_expected:
        task["verdict_expected"] = expectation.verdict_expected
    if completion_expected is not None:
        task["completion_expected"] = completion_expected
    problems = task_problems([task])
    if problems:
        raise Refused("its scenario is not a valid task: " + "; ".join(problems[:5]))
    return task


@dataclass
class AddResult:
    suite: EvaluationSuite
    version: SuiteVersion | None
    added: list[int] = field(default_factory=list)           # run ids
    already_present: list[int] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)    # run id -> why not
    created: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"suite": {"id": self.suite.pk, "name": self.suite.name, "version": self.suite.version},
                "version": self.version.number if self.version else None, "created": self.created,
                "added": self.added, "already_present": self.already_present,
                "refused": [{"run": run, "reason": why} for run, why in self.refused.items()]}


def _suite(ref: Any, create: bool, user) -> tuple[EvaluationSuite | None, bool]:
    suite = evaluation_selectors.suite_get(ref)
    if suite is None and not create:
        raise NotFound(f"No evaluation suite {str(ref)[:120]!r}.", fields={"suite": "no such suite"})
    if suite is not None and suite.bundled:
        raise Conflict(f"Suite {suite.name!r} is bundled with AgentOps and follows its file: add runs to a "
                       "suite of your own (a new name makes one).")
    return suite, suite is None


def suite_add_runs(*, user, suite: Any, run_ids: list[int], expectation: Expectation | None = None,
                   create: bool = False, strict: bool = True) -> AddResult:
    """Add finished runs to a suite as tasks (a new version; none when every run is in it already).

    `suite` is an id or a name; with create=True a name not in use makes a new suite. strict: any run
    missing (or another project's) is NotFound and any refused run a Conflict, nothing added; not
    strict (bulk actions, queues): those runs are listed in `refused` and the rest added."""
    require(user, EDIT_SUITES, "add runs to evaluation suites")
    expectation = expectation or Expectation()
    if not isinstance(run_ids, list) or not run_ids or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in run_ids):
        raise InvalidInput("runs must be a non-empty list of run ids.", fields={"runs": "a list of run ids"})
    if len(run_ids) > MAX_TASKS:
        raise InvalidInput(f"At most {MAX_TASKS} runs at once (a suite holds at most {MAX_TASKS} tasks).",
                           fields={"runs": f"at most {MAX_TASKS}"})
    row, creating = _suite(suite, create, user)
    wanted = list(dict.fromkeys(run_ids))
    runs = {r.pk: r for r in Run.objects.filter(pk__in=wanted).select_related("owner")}
    result_refused: dict[int, str] = {}
    missing = [i for i in wanted if i not in runs]
    if missing and strict:
        raise NotFound(f"No run {missing[0]}.", fields={"runs": f"no run {missing[0]}"})
    result_refused.update({i: "the run no longer exists" for i in missing})
    present = {task_source_run(t) for t in (row.tasks if row else [])}
    tasks, already = [], []
    for run_id in wanted:
        if run_id in missing:
            continue
        if run_id in present:
            already.append(run_id)
            continue
        try:
            tasks.append(run_task(runs[run_id], user=user, expectation=expectation))
        except Refused as exc:
            if strict:
                raise Conflict(f"Run {run_id} cannot become a task: {exc}", fields={"runs": {run_id: str(exc)}}) \
                    from None
            result_refused[run_id] = str(exc)
    if creating:
        if not tasks:
            raise Conflict("None of these runs can become a task, so no suite was made: "
                           + "; ".join(f"run {i}: {why}" for i, why in list(result_refused.items())[:5]))
        try:
            made = evaluation_services.suite_create(
                user=user, name=str(suite), description="Tasks made from runs (Add to suite).", tasks=tasks)
        except evaluation_services.SuiteExists:
            # Made by a concurrent request since we looked: add to it instead (the change sorts out duplicates).
            row, _ = _suite(suite, False, user)
        else:
            return AddResult(suite=made, version=evaluation_selectors.suite_versions(made, limit=1)[0],
                             added=[t["source"]["run"] for t in tasks], already_present=already,
                             refused=result_refused, created=True)
    assert row is not None
    change = evaluation_services.suite_tasks_change(user=user, suite_id=row.pk, add=tasks)
    by_name = {t["name"]: t["source"]["run"] for t in tasks}
    return AddResult(suite=change.suite, version=change.version, added=[by_name[n] for n in change.added],
                     already_present=already + [by_name[n] for n in change.already_present if n in by_name],
                     refused=result_refused)


QUEUE_STATES = ("done", "all", "disagreement")


def suite_add_queue(*, user, queue: ReviewQueue, state: str, suite: Any, expectation: Expectation | None = None,
                    create: bool = False) -> AddResult:
    """Add the runs of a review queue's items (its done ones, all, or those its reviewers disagreed on)
    to a suite, as the runs list's bulk action does: a run that cannot become a task is listed in
    `refused`, the rest added in one version."""
    require(user, EDIT_SUITES, "add runs to evaluation suites")
    if state not in QUEUE_STATES:
        raise InvalidInput(f"state is one of: {', '.join(QUEUE_STATES)}.", fields={"state": "unknown"})
    run_ids = list(queues.results(queue, state="" if state == "all" else state)
                   .values_list("run_id", flat=True)[:MAX_TASKS + 1])
    if not run_ids:
        raise InvalidInput(f"The queue has no {'' if state == 'all' else state + ' '}item to add.",
                           fields={"state": "no item"})
    if len(run_ids) > MAX_TASKS:
        raise InvalidInput(f"The queue has more than {MAX_TASKS} such items, more than a suite holds: add its "
                           "done items, or its disagreements.", fields={"state": f"at most {MAX_TASKS} runs"})
    return suite_add_runs(user=user, suite=suite, run_ids=run_ids, expectation=expectation, create=create,
                          strict=False)


# -- "add to a suite" over the runs a filter selects (runs.bulk's extension) ----------------------

BULK_PARAMETERS = frozenset({"suite", "create", "verdict_expected", "completion_expected", "note",
                             "expected_from_score"})


def bulk_parameters_clean(parameters: dict) -> dict:
    suite = parameters.get("suite")
    if not isinstance(suite, (str, int)) or isinstance(suite, bool) or not str(suite).strip() \
            or len(str(suite)) > 120:
        raise InvalidInput("Name the suite (its id or name; with create, a new name makes one).",
                           fields={"parameters.suite": "a suite's id or name, at most 120 characters"})
    create = parameters.get("create", False)
    if not isinstance(create, bool):
        raise InvalidInput("create must be true or false.", fields={"parameters.create": "true or false"})
    expectation = expectation_from(parameters)
    found = evaluation_selectors.suite_get(suite)
    if found is None and not create:
        raise NotFound(f"No evaluation suite {str(suite)[:120]!r}.", fields={"parameters.suite": "no such suite"})
    if found is not None and found.bundled:
        raise Conflict(f"Suite {found.name!r} is bundled with AgentOps and follows its file: add runs to a "
                       "suite of your own (a new name makes one).")
    return {"suite": str(suite).strip(), "create": create, "verdict_expected": expectation.verdict_expected,
            "completion_expected": expectation.completion_expected, "note": expectation.note,
            "expected_from_score": expectation.expected_from_score}


def bulk_add(user, run_ids: list[int], parameters: dict) -> dict[int, str]:
    """The bulk job's act: every run at once, one new version; run id -> why it was skipped."""
    expectation = Expectation(parameters.get("verdict_expected"), parameters.get("completion_expected"),
                              parameters.get("note", ""), parameters.get("expected_from_score", ""))
    # The selection may hold more runs than a suite (live ones, say): only those that can be tasks are sent.
    rows = {r.pk: r for r in Run.objects.filter(pk__in=run_ids).only("pk", "status", "evaluation_id", "completion")}
    outcomes = {run_id: ("the run no longer exists" if run_id not in rows else run_refusal(rows[run_id]))
                for run_id in run_ids}
    candidates = [run_id for run_id, why in outcomes.items() if not why]
    if not candidates:
        return outcomes
    result = suite_add_runs(user=user, suite=parameters["suite"], run_ids=candidates, expectation=expectation,
                            create=bool(parameters.get("create")), strict=False)
    outcomes.update({run_id: f"already a task of {result.suite.name}" for run_id in result.already_present})
    outcomes.update(result.refused)
    return outcomes


def register_bulk_action() -> None:
    """review's ready(): the runs list's bulk actions offer "add to an evaluation suite"."""
    bulk.register(BulkActionKind.SUITE, bulk.BulkExtension(
        perm=EDIT_SUITES, what="add runs to evaluation suites", parameters=BULK_PARAMETERS,
        clean=bulk_parameters_clean, refusal=run_refusal, act_all=bulk_add, max_runs=MAX_TASKS))

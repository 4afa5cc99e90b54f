"""Evaluation suites: task files in the scenario format, validated as a whole.

A suite file is {"name", "description", "planning_mode", "tasks": [...]}. Each
task is a scenario (design.md, "Scenario files") that must be solvable both ways:
a `direct` step (one capability, one set of arguments) and `planner.plans`, with
application-owned `completion` criteria so success is verified, not claimed.
Tasks may also carry fields only the evaluation reads; they are removed before
the scenario is loaded:

- verdict_expected: the verdict the suite's author expects (tests check it);
- category: a word or two for the page ("simple lookup", "polling", ...);
- completion_expected: whether planning mode is expected to verify success (true/false), e.g. a
  reviewer's expectation for a task made from a run;
- source: where a task made from a run came from ({"run", "trace_id", "added_by", "note",
  "scores", "expected_from"}: review.datasets writes it; the page and the API show it).

Plans may carry "latency_s": the simulated time the planner call takes (the
runner advances the simulated clock by it), next to "tokens" and "cost".
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.verdicts import VerdictCode
from runs.planners import validate_planner_config
from runtime.sim.scenario import Scenario, ScenarioError, load_scenario

SUITES_DIR = Path(__file__).resolve().parent / "suites"
EVALUATION_FIELDS = frozenset({"verdict_expected", "category", "completion_expected", "source"})
SUITE_FIELDS = frozenset({"name", "description", "planning_mode", "tasks"})
PLANNING_MODES = ("scripted", "rules", "llm")
MAX_TASKS = 500


class SuiteError(ScenarioError):
    """An invalid suite; `problems` lists every one of them."""

    what = "suite"


@dataclass(frozen=True)
class SuiteDefinition:
    name: str
    description: str
    tasks: list[dict[str, Any]] = field(default_factory=list)
    planning_mode: str = "scripted"
    source: str = "<dict>"


def scenario_dict(task: dict[str, Any]) -> dict[str, Any]:
    """The task without the evaluation-only fields: a plain scenario."""
    return {k: v for k, v in task.items() if k not in EVALUATION_FIELDS}


def task_scenario(task: dict[str, Any]) -> Scenario:
    return load_scenario(scenario_dict(task))


def task_problems(tasks: Any) -> list[str]:
    """Every problem with a list of tasks, each prefixed with the task it concerns."""
    if not isinstance(tasks, list) or not tasks:
        return ["tasks must be a non-empty list"]
    if len(tasks) > MAX_TASKS:
        return [f"a suite holds at most {MAX_TASKS} tasks, this one has {len(tasks)}"]
    problems: list[str] = []
    seen: set[str] = set()
    for index, task in enumerate(tasks):
        where = f"tasks[{index}]"
        if not isinstance(task, dict):
            problems.append(f"{where} must be an object")
            continue
        name = task.get("name")
        if isinstance(name, str) and name:
            where = f"task {name!r}"
            if name in seen:
                problems.append(f"{where} is defined twice")
            seen.add(name)
            if len(name) > 200:
                problems.append(f"{where}: name may be at most 200 characters")
        try:
            load_scenario(scenario_dict(task))
        except ScenarioError as exc:
            problems.extend(f"{where}: {p}" for p in exc.problems)
        if task.get("completion") is None:
            problems.append(f"{where}: completion criteria are required (success must be verified)")
        if task.get("direct") is None:
            problems.append(f"{where}: a direct step is required (the baseline)")
        expected = task.get("verdict_expected")
        if expected is not None and expected not in set(VerdictCode):
            problems.append(f"{where}: verdict_expected must be one of {', '.join(v.value for v in VerdictCode)}")
        if "category" in task and not isinstance(task["category"], str):
            problems.append(f"{where}: category must be a string")
        if task.get("completion_expected") is not None and not isinstance(task["completion_expected"], bool):
            problems.append(f"{where}: completion_expected must be true or false")
        if task.get("source") is not None and not isinstance(task["source"], dict):
            problems.append(f"{where}: source must be an object")
    return problems


def task_source_run(task: Any) -> int | None:
    """The id of the run a task was made from (None for a hand-written task)."""
    source = task.get("source") if isinstance(task, dict) else None
    run = source.get("run") if isinstance(source, dict) else None
    return run if isinstance(run, int) and not isinstance(run, bool) else None


def parse_suite(data: Any, source: str = "<dict>") -> SuiteDefinition:
    if not isinstance(data, dict):
        raise SuiteError(source, ["a suite is a JSON object"])
    problems: list[str] = []
    unknown = set(data) - SUITE_FIELDS
    if unknown:
        problems.append(f"unknown fields: {', '.join(sorted(unknown))}")
    name = data.get("name")
    if not isinstance(name, str) or not name or len(name) > 120:
        problems.append("name must be a non-empty string of at most 120 characters")
    if not isinstance(data.get("description", ""), str):
        problems.append("description must be a string")
    mode = data.get("planning_mode", "scripted")
    if mode not in PLANNING_MODES:
        problems.append(f"planning_mode must be one of {', '.join(PLANNING_MODES)}")
    problems.extend(task_problems(data.get("tasks")))
    if problems:
        raise SuiteError(source, problems)
    return SuiteDefinition(name=name, description=data.get("description", ""), tasks=list(data["tasks"]),
                           planning_mode=mode, source=source)


def load_suite_file(path: str | Path) -> SuiteDefinition:
    source = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SuiteError(source, [f"cannot read JSON: {exc}"]) from exc
    return parse_suite(data, source)


def bundled_suites(directory: Path = SUITES_DIR) -> list[SuiteDefinition]:
    """Every suite file shipped with AgentOps; an invalid one raises with all its problems."""
    return [load_suite_file(path) for path in sorted(directory.glob("*.json"))]


def planning_problems(tasks: list[dict[str, Any]], planning_mode: str, planner_config: Any) -> list[str]:
    """Why this suite cannot be evaluated with this planner (empty when it can)."""
    if planning_mode not in PLANNING_MODES:
        return [f"planning_mode must be one of {', '.join(PLANNING_MODES)}"]
    if not isinstance(planner_config, dict):
        return ["planner_config must be an object"]
    if planning_mode == "scripted":
        # The scripted planner replays each task's own plans.
        return [f"tasks[{i}] ({task.get('name')}): the scripted planner needs planner.plans"
                for i, task in enumerate(tasks) if not (task.get("planner") or {}).get("plans")]
    return list(validate_planner_config(planning_mode, planner_config).values())

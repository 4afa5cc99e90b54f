"""The runtime's own scores, written when a run ends: what the trace already says, as scores.

Hooked on runs.signals.run_finished (sent once a run's finish has committed, whichever way it
stopped: a worker's pass, a cancel, a sweep). Each is one row per (config, run) by "runtime": a
signal delivered twice writes nothing new. A built-in config an admin disabled is not written.
"""
from __future__ import annotations

import logging
from typing import Any

from core.projects import project_scope
from review.models import Score, ScoreConfig, ScoreKind, ScoreSource
from review.scoring import stored
from runs.models import Run
from runtime.budgets import BudgetName
from runtime.stop import StopKind, StopReason

log = logging.getLogger(__name__)

COMPLETION_VERIFIED = "completion_verified"
STALLED = StopKind.STALLED.value  # the score is named after the stop it records
BUDGET_STOP = "budget_stop"
SIDE_EFFECTS_COMMITTED = "side_effects_committed"
COST = "cost"
NO_BUDGET = "none"
RUNTIME_AUTHOR = "runtime"

# The built-in configs (review/migrations/0002 made them): made again here if missing, e.g. after a
# database was emptied, so a run's finish never goes unscored for want of a row.
BUILTIN: dict[str, dict[str, Any]] = {
    COMPLETION_VERIFIED: {"kind": ScoreKind.BOOLEAN,
                          "description": "The run stopped `completed`: its completion criteria were verified."},
    STALLED: {"kind": ScoreKind.BOOLEAN,
              "description": "The run stopped `stalled` (repeated without progress, or the planner had nothing left)."},
    BUDGET_STOP: {"kind": ScoreKind.CATEGORICAL, "categories": [NO_BUDGET, *(b.value for b in BudgetName)],
                  "description": "Which budget stopped the run (`none`: no budget did)."},
    SIDE_EFFECTS_COMMITTED: {"kind": ScoreKind.NUMERIC, "min_value": 0,
                             "description": "How many side effects the run committed."},
    COST: {"kind": ScoreKind.NUMERIC, "min_value": 0, "description": "What the run's planning cost (its cost counter)."},
}


def automatic_values(run: Run) -> dict[str, Any]:
    """The value of each built-in score for a finished run."""
    reason = StopReason.of(run.stop_reason)
    budget = reason.budget if reason is not None else None
    return {
        COMPLETION_VERIFIED: reason is not None and reason.kind == StopKind.COMPLETED,
        STALLED: reason is not None and reason.kind == StopKind.STALLED,
        BUDGET_STOP: str(budget) if budget is not None else NO_BUDGET,
        SIDE_EFFECTS_COMMITTED: run.side_effects_committed,
        COST: run.cost,
    }


def builtin_configs() -> dict[str, ScoreConfig]:
    """The built-in configs of the project in scope by name, enabled or not (any missing made again: a
    new project gets its own the first time one of its runs finishes)."""
    configs = {c.name: c for c in ScoreConfig.objects.filter(builtin=True)}
    for name in BUILTIN.keys() - configs.keys():
        configs[name], _ = ScoreConfig.objects.get_or_create(name=name, defaults={**BUILTIN[name], "builtin": True})
    return configs


def run_scores_write(*, run_id: int) -> int:
    """Write the run's automatic scores; returns how many it holds. Nothing for a run not finished.

    The values are facts of the finished run, so a score already there is left as it is: a second
    delivery of the signal (or a race with one) inserts nothing (ON CONFLICT DO NOTHING, on the
    unique (config, run, author) of a run's score). Three queries: the run, the configs, one insert."""
    run = Run.objects.filter(pk=run_id, finished_at__isnull=False).only(
        "pk", "project_id", "stop_reason", "side_effects_committed", "cost").first()
    if run is None:
        return 0
    with project_scope(run.project_id):   # a sweep finishes runs in no project's scope
        configs = builtin_configs()
    rows = [Score(config=configs[name], run=run, attempt=None, source=ScoreSource.RUNTIME, author=None,
                  author_key=RUNTIME_AUTHOR, **stored(configs[name], value))
            for name, value in automatic_values(run).items() if configs[name].enabled]
    Score.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def on_run_finished(sender, *, run_id: int, **kwargs) -> None:
    """runs.signals.run_finished."""
    try:
        run_scores_write(run_id=run_id)
    except Exception:  # a score is never worth failing the worker that finished the run
        log.exception("could not write the automatic scores of run %s", run_id)

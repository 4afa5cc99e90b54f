"""The runtime's own scores, written when a run ends: what the trace already says, as scores.

Hooked on runs.signals.run_finished (sent once a run's finish has committed, whichever way it
stopped: a worker's pass, a cancel, a sweep). Each is one row per (config, run) by "runtime",
written with update_or_create, so a signal delivered twice writes nothing new. A built-in config
an admin disabled is not written.
"""
from __future__ import annotations

import logging
from typing import Any

from review.models import Score, ScoreConfig, ScoreSource
from review.scoring import stored
from runs.models import Run
from runtime.stop import StopKind, StopReason

log = logging.getLogger(__name__)

COMPLETION_VERIFIED = "completion_verified"
STALLED = "stalled"
BUDGET_STOP = "budget_stop"
SIDE_EFFECTS_COMMITTED = "side_effects_committed"
COST = "cost"
NO_BUDGET = "none"
RUNTIME_AUTHOR = "runtime"


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


def run_scores_write(*, run_id: int) -> int:
    """Write (or rewrite) the run's automatic scores; returns how many. Nothing for a run not finished."""
    run = Run.objects.filter(pk=run_id, finished_at__isnull=False).only(
        "pk", "stop_reason", "side_effects_committed", "cost").first()
    if run is None:
        return 0
    configs = {c.name: c for c in ScoreConfig.objects.filter(builtin=True, enabled=True)}
    written = 0
    for name, value in automatic_values(run).items():
        config = configs.get(name)
        if config is None:
            continue
        Score.objects.update_or_create(
            config=config, run=run, attempt=None, author_key=RUNTIME_AUTHOR,
            defaults={"source": ScoreSource.RUNTIME, "source_name": "", "author": None, **stored(config, value)})
        written += 1
    return written


def on_run_finished(sender, *, run_id: int, **kwargs) -> None:
    """runs.signals.run_finished."""
    try:
        run_scores_write(run_id=run_id)
    except Exception:  # a score is never worth failing the worker that finished the run
        log.exception("could not write the automatic scores of run %s", run_id)

"""The run's checkpoint as stored: a head on the run row, each step's progress on its Step row.

The runtime's RunState holds the current plan's steps with their progress. Kept whole in the run
row, every pass rewrote every step (a 1,000-step plan made a 400 KB checkpoint per pass). Stored
apart, a pass writes the head (bounded: counters, the history window, what waits) and the rows of
the steps it changed, so its cost does not grow with the plan's length.

A head says so with STEPS_APART; a checkpoint written before (whole, with its steps) still loads.
"""
from __future__ import annotations

from typing import Any

from runs.models import Run, Step
from runtime.state import RunState, StepProgress

STEPS_APART = "steps_apart"


def head(state: RunState) -> dict[str, Any]:
    """What the run row's `state` holds: the checkpoint without its steps' progress."""
    return {**state.to_dict(steps=False), STEPS_APART: True}


def load(run: Run) -> RunState:
    """The run's checkpoint: its head and, when stored apart, the current revision's step rows."""
    data = run.state or {}
    if not data.get(STEPS_APART):
        return RunState.from_dict(data)
    return RunState.from_dict({**data, "steps": step_progress(run.pk, int(data.get("revision") or 0))})


def step_progress(run_id: int, revision: int) -> list[dict[str, Any]]:
    """The steps of a run's accepted revision with their progress, in order (StepProgress.to_dict() each)."""
    if not revision:
        return []
    rows = (Step.objects.filter(run_id=run_id, revision__number=revision).order_by("index")
            .values_list("index", "key", "capability_name", "arguments", "expected_outcome", "depends_on", "progress"))
    return [{**(progress or {}), "index": index,
             "step": {"id": key, "capability": capability, "arguments": arguments,
                      "expected_outcome": expected_outcome, "depends_on": depends_on}}
            for index, key, capability, arguments, expected_outcome, depends_on, progress in rows]


def plan_steps(run: Run) -> list[dict[str, Any]]:
    """The current plan's steps (runtime.plan.Step.to_dict() each), wherever the checkpoint keeps them."""
    data = run.state or {}
    if data.get(STEPS_APART):
        return [p["step"] for p in step_progress(run.pk, int(data.get("revision") or 0))]
    return [p["step"] for p in data.get("steps") or ()]


def fresh_progress(progress: StepProgress) -> bool:
    """Is this progress what a new plan's step starts with (the row's None)?"""
    return progress.progress_dict() == StepProgress(step=progress.step, index=progress.index).progress_dict()

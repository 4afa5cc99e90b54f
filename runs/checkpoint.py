"""The run's checkpoint as stored: a head on the run row, each step's progress on its Step row,
each history entry on its attempt's row.

The runtime's RunState holds the current plan's steps with their progress and a window of recent
attempts. Kept whole in the run row, every pass rewrote every step (a 1,000-step plan made a 400 KB
checkpoint per pass) and every entry of the window (20 of them, 12 KB). Stored apart, a pass writes
the head (counters, what waits, the window as attempt uids), the rows of the steps it changed, and
its attempt's entry once with the attempt: its cost does not grow with the plan or the window.

A head says so with STEPS_APART; its history lists a uid for an entry on this run's attempt row
and the entry itself for one that is not (a fork's inherited calls are another run's attempts).
A checkpoint written before (whole, with its steps and entries) still loads.
"""
from __future__ import annotations

from typing import Any

from runs.models import Attempt, Run, Step
from runtime.state import RunState, StepProgress

STEPS_APART = "steps_apart"
# What the run row's own columns hold from its start (the state is made from them: runs.services,
# runs.forks), so a head leaves them out: a goal may be 10,000 characters.
_ON_THE_RUN = ("run_id", "goal", "completion", "budgets", "trace_id")


def head(state: RunState, on_rows: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    """What the run row's `state` holds: the checkpoint without its steps' progress and what the run's
    columns hold, and its history entries named by uid where `on_rows` says the entry is on this
    run's attempt row."""
    data = {key: value for key, value in state.to_dict(steps=False).items() if key not in _ON_THE_RUN}
    if on_rows:
        data["history"] = [entry.attempt_id if entry.attempt_id in on_rows else entry.to_dict()
                           for entry in state.history]
    return {**data, STEPS_APART: True}


# What an attempt row's history entry leaves out: the row's own columns say it.
_ENTRY_COLUMNS = {"attempt_id": "uid", "capability": "capability_name", "signature": "signature", "kind": "kind"}


def entry_for_row(entry: dict[str, Any], row_output: Any) -> dict[str, Any]:
    """A history entry as its attempt row stores it: without what the row's columns hold (its
    output too, when the row keeps the same one)."""
    stored = {k: v for k, v in entry.items() if k not in _ENTRY_COLUMNS}
    observation = entry["observation"]
    if "output" in observation and observation["output"] == row_output:
        stored["observation"] = {k: v for k, v in observation.items() if k != "output"} | {"output_on_row": True}
    return stored


def _entry_from_row(stored: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    observation = dict(stored["observation"])
    if observation.pop("output_on_row", False):
        observation["output"] = row["output"]
    return {**stored, **{key: row[column] for key, column in _ENTRY_COLUMNS.items()}, "observation": observation}


def history_on_rows(run: Run) -> set[str]:
    """The uids of the history entries the run's stored head keeps on its attempt rows."""
    return {entry for entry in (run.state or {}).get("history") or () if isinstance(entry, str)}


def load(run: Run) -> RunState:
    """The run's checkpoint: its head and, when stored apart, the current revision's step rows and
    the window's entries from the attempt rows."""
    data = run.state or {}
    if not data.get(STEPS_APART):
        return RunState.from_dict(data)
    return RunState.from_dict({**data, "run_id": str(run.pk), "goal": run.goal, "completion": run.completion or None,
                               "budgets": run.budgets, "trace_id": run.trace_id,
                               "steps": step_progress(run.pk, int(data.get("revision") or 0)),
                               "history": history(run)})


def history(run: Run) -> list[dict[str, Any]]:
    """The checkpoint's history window (HistoryEntry.to_dict() each, oldest first), its entries
    read from the attempt rows the head names."""
    window = (run.state or {}).get("history") or []
    uids = [entry for entry in window if isinstance(entry, str)]
    rows = Attempt.objects.filter(run_id=run.pk, uid__in=uids, history_entry__isnull=False).values(
        "history_entry", "output", *_ENTRY_COLUMNS.values()) if uids else []
    stored = {row["uid"]: _entry_from_row(row["history_entry"], row) for row in rows}
    return [stored[entry] if isinstance(entry, str) else entry for entry in window
            if not isinstance(entry, str) or entry in stored]


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

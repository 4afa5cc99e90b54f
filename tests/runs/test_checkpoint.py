"""The checkpoint stored apart: a head on the run row, each step's progress on its row (runs/checkpoint.py).

Driven pass by pass through the real adapter, the way a worker's slice writes (one statement on
PostgreSQL, a transaction elsewhere): after every pass the stored checkpoint loads back as the
pass's state, and what a pass writes does not grow with the plan's length.
"""
import importlib
import json
import re
from dataclasses import replace

import pytest
from django.apps import apps
from django.core.exceptions import FieldDoesNotExist
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs import checkpoint, services
from runs.models import Run, Step
from runs.worker import adapters, leases
from runs.worker.persistence import STOP_FIELDS, PassWriter

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def demo_capabilities(db, manual_advance):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()


def plan_run(owner, steps: int):
    plan = [{"id": f"s{n}", "capability": "search_documents", "arguments": {"q": f"travel {n}"}} for n in range(steps)]
    return services.run_start(owner=owner, goal="checkpoint",
                              completion={"capability": "search_documents", "path": "documents", "equals": "never"},
                              budgets={"deadline_s": 600, "max_plan_steps": max(steps, 10),
                                       "max_tool_calls": 10 * steps, "max_iterations": 10 * steps},
                              planner="scripted", planner_config={"plans": [plan]})


class Slice:
    """One worker's slice, pass by pass, committing each pass as engine.run_advance does."""

    def __init__(self, run_id):
        lease = leases.claim(run_id, "w1")
        assert lease is not None
        run = Run.objects.get(pk=run_id)
        self.writer = PassWriter(run, lease)
        self.controller = adapters.build_controller(run, self.writer)
        self.state = checkpoint.load(run)
        self.writer.previous = self.state

    def step(self):
        transition = self.controller.advance(self.state)
        with CaptureQueriesContext(connection) as queries:
            self.writer.commit(transition)
        self.state = transition.state
        return transition, queries


def stored(run_id):
    return checkpoint.load(Run.objects.get(pk=run_id))


def test_every_pass_loads_back_as_it_was_written(operator, demo_capabilities):
    run = plan_run(operator, 4)
    work = Slice(run.pk)
    passes = 0
    while not work.state.is_terminal:
        work.step()
        passes += 1
        assert stored(run.pk) == work.state
        head = Run.objects.get(pk=run.pk).state
        assert "steps" not in head and head[checkpoint.STEPS_APART]
        assert not {"goal", "budgets", "completion", "trace_id", "run_id"} & set(head)   # the run's columns say them
        # The window names this run's attempts; their entries are on the attempt rows.
        assert head["history"] == [entry.attempt_id for entry in work.state.history]
    assert passes >= 5
    rows = list(Step.objects.filter(run=run).order_by("index").values_list("status", "progress"))
    assert [status for status, _ in rows] == ["succeeded"] * 4
    assert all(progress["attempts"] == 1 and progress["last_observation"]["status"] == "ok" for _, progress in rows)


def test_a_pass_writes_the_steps_it_changed_not_the_plan(operator, demo_capabilities):
    """The head and a pass's statements are the same size for a 10-step and a 1,000-step plan."""
    figures = {}
    for steps in (10, 1000):
        run = plan_run(operator, steps)
        work = Slice(run.pk)
        work.step()                               # the plan
        for _ in range(3):                        # three calls, each on one step
            _transition, queries = work.step()
        written = sum(len(q["sql"]) for q in queries.captured_queries)
        figures[steps] = (len(json.dumps(Run.objects.get(pk=run.pk).state)), written, len(queries))
        assert stored(run.pk) == work.state
        progressed = Step.objects.filter(run=run, progress__isnull=False).count()
        assert progressed == 3   # the steps not reached yet are as the plan left them: nothing stored
    (head_10, sql_10, n_10), (head_1000, sql_1000, n_1000) = figures[10], figures[1000]
    assert n_1000 == n_10
    assert head_1000 < head_10 + 100 and sql_1000 < sql_10 + 100


def test_a_stop_marks_every_step_it_ended_around(operator, demo_capabilities):
    run = plan_run(operator, 6)
    work = Slice(run.pk)
    work.step()
    work.step()
    work.state = replace(work.state, cancel_requested=True)   # as the adapter sets it after a cancel
    while not work.state.is_terminal:
        work.step()
    statuses = list(Step.objects.filter(run=run).order_by("index").values_list("status", flat=True))
    assert statuses[0] == "succeeded" and set(statuses[1:]) == {"skipped"}
    assert stored(run.pk).steps == work.state.steps


def test_a_checkpoint_written_whole_still_loads_and_a_live_one_is_split(operator, demo_capabilities):
    run = plan_run(operator, 3)
    work = Slice(run.pk)
    work.step()
    work.step()
    whole = work.state.to_dict()
    Run.objects.filter(pk=run.pk).update(state=whole)
    Step.objects.filter(run=run).update(progress=None)
    assert stored(run.pk) == work.state            # loads from the whole checkpoint

    migration = importlib.import_module("runs.migrations.0030_step_progress")
    migration.split_live_checkpoints(apps, None)
    head = Run.objects.get(pk=run.pk).state
    assert "steps" not in head and head[checkpoint.STEPS_APART]
    assert stored(run.pk) == work.state            # and from its rows once split
    assert checkpoint.plan_steps(Run.objects.get(pk=run.pk)) == [p.step.to_dict() for p in work.state.steps]


def test_a_forks_inherited_calls_stay_in_its_head_until_the_window_leaves_them(operator, demo_capabilities):
    """A fork's inherited entries are another run's attempts: its head keeps them whole, its own by uid."""
    from runs.forks import run_fork

    source = plan_run(operator, 3)
    work = Slice(source.pk)
    while not work.state.is_terminal:
        work.step()
    fork = run_fork(run_id=source.pk, user=operator, at=3)
    head = Run.objects.get(pk=fork.pk).state
    assert [type(entry) for entry in head["history"]] == [dict, dict]
    forked = Slice(fork.pk)
    assert forked.state == stored(fork.pk)
    while not forked.state.is_terminal:
        forked.step()
        assert stored(fork.pk) == forked.state
    head = Run.objects.get(pk=fork.pk).state
    kinds = [type(entry) for entry in head["history"]]
    assert kinds[:2] == [dict, dict] and set(kinds[2:]) == {str} and len(kinds) > 2


def _indexed_columns(table: str) -> set[str]:
    """The columns an index of `table` names, an expression's (upper(goal) gin_trgm_ops) too."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
        columns = {column for c in constraints.values() if c["index"] or c["unique"] for column in c["columns"]}
        if connection.vendor == "postgresql":
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [table])
            columns |= {name for (definition,) in cursor.fetchall()
                        for name in re.findall(r"upper\((\w+)\)", definition)}
    return columns


def _column(name: str) -> str:
    try:
        return Run._meta.get_field(name).column
    except FieldDoesNotExist:
        return name


def test_a_pass_writes_the_run_rows_indexed_columns_only_when_its_status_changes(operator, demo_capabilities,
                                                                                 monkeypatch):
    """An update that changes a column an index names writes an entry in each of the run row's indexes
    (it cannot be HOT). A pass that neither changes the status nor stops writes none of them; the first
    (queued to running) writes the status, and the stop's indexed fields (the trigram-indexed detail
    too) go in its one UPDATE with the stop attempt, never also in the fenced one before it.
    (What this makes of the updates on PostgreSQL, HOT or not, bench/wal_per_step.py measures: a HOT
    update also needs its page's dead versions pruned, which any older snapshot in the database stops.)"""
    indexed = _indexed_columns("runs_run")
    assert {"status", "stop_reason", "finished_at"} <= indexed   # and stop_detail on PostgreSQL (trigrams)
    fenced, stops = [], []
    run_fields, record_stop = PassWriter._run_fields, PassWriter._record_stop

    def spy_fields(self, transition, now, stopped):
        values, increments = run_fields(self, transition, now, stopped)
        stop_fields = set(STOP_FIELDS) if stopped else set()
        fenced.append({_column(name) for name in (*values, *increments) if name not in stop_fields} & indexed)
        return values, increments

    def spy_stop(self, write, attempt, stop_fields):
        stops.append({_column(name) for name in stop_fields} & indexed)
        return record_stop(self, write, attempt, stop_fields)

    monkeypatch.setattr(PassWriter, "_run_fields", spy_fields)
    monkeypatch.setattr(PassWriter, "_record_stop", spy_stop)
    run = plan_run(operator, 3)
    work = Slice(run.pk)
    statuses = []
    while not work.state.is_terminal:
        before = Run.objects.get(pk=run.pk).status
        work.step()
        statuses.append((before, Run.objects.get(pk=run.pk).status))
    assert statuses[0] == ("queued", "running") and statuses[-1] == ("running", "stopped")
    assert fenced[0] == {"status"}, fenced
    assert all(columns == set() for columns in fenced[1:]), fenced
    assert stops == [{"status", "stop_reason", "stop_detail", "finished_at"} & indexed]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="fillfactor is PostgreSQL's")
def test_a_step_rows_page_keeps_room_for_it_to_grow_in_place():
    """A plan's step rows are inserted without progress and grow once their step runs: their page keeps
    room for that (migration runs.0034), so the update can stay on it and write no index entry (HOT;
    bench/wal_per_step.py measures the share)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'runs_step'")
        (options,) = cursor.fetchone()
    assert any(option.startswith("fillfactor=") and int(option.split("=")[1]) < 100 for option in options or [])

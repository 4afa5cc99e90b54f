"""The checkpoint stored apart: a head on the run row, each step's progress on its row (runs/checkpoint.py).

Driven pass by pass through the real adapter, the way a worker's slice writes (one statement on
PostgreSQL, a transaction elsewhere): after every pass the stored checkpoint loads back as the
pass's state, and what a pass writes does not grow with the plan's length.
"""
import importlib
import json
import time
from dataclasses import replace

import pytest
from django.apps import apps
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from runs import checkpoint, services
from runs.models import Run, Step
from runs.worker import adapters, leases
from runs.worker.persistence import PassWriter

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


def _horizon_settled(patience_s: float = 30.0) -> None:
    """Wait until no other session of this database holds a snapshot (skip, naming them, if one still
    does). An update is HOT only if its row's page has room, and the page has room only once the
    previous passes' dead versions are pruned: an older snapshot anywhere in the database (a session an
    earlier test left in a transaction, an ANALYZE) keeps them, and the measure would be of that, not
    of what a pass writes."""
    deadline = time.monotonic() + patience_s
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT pid, backend_type, application_name, state, left(query, 80) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                           "AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)")
            holders = cursor.fetchall()
        if not holders:
            return
        if time.monotonic() > deadline:
            pytest.skip(f"other sessions of this database hold a snapshot, so dead row versions stay: {holders}")
        time.sleep(0.2)


def _row_updates(table: str = "runs_run") -> tuple[int, int]:
    """This transaction's updates of the table so far, and how many of them were HOT (PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = %s", [table])
        found = cursor.fetchone()
    return (found[0], found[1]) if found else (0, 0)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="HOT updates are PostgreSQL's")
def test_a_pass_changes_the_run_rows_indexed_columns_in_one_update_at_most(operator, demo_capabilities):
    """Every update that changes a column an index names writes an entry in each of the run row's
    indexes (not HOT). A pass that neither changes the status nor stops makes none; the first
    (queued to running) and the stop make one each: the stop's indexed fields (the trigram-indexed
    detail too) go in its one UPDATE with the stop attempt, never also in the fenced one before it."""
    run = plan_run(operator, 3)
    work = Slice(run.pk)
    _horizon_settled()
    not_hot = []
    while not work.state.is_terminal:
        status = Run.objects.get(pk=run.pk).status
        with transaction.atomic():   # the pass's own transaction a savepoint: its counts stay readable
            before = _row_updates()
            work.step()
            after = _row_updates()
        updates, hot = after[0] - before[0], after[1] - before[1]
        assert updates >= 1
        not_hot.append((status, Run.objects.get(pk=run.pk).status, updates - hot))
    assert not_hot[0] == ("queued", "running", 1)
    assert not_hot[-1] == ("running", "stopped", 1)   # the plan done, the completion never met
    assert all(n == 0 for _, _, n in not_hot[1:-1]), not_hot


@pytest.mark.skipif(connection.vendor != "postgresql", reason="HOT updates are PostgreSQL's")
def test_a_step_row_grows_in_place_when_its_step_runs(operator, demo_capabilities):
    """A plan's step rows are inserted without progress and grow once their step runs: their page
    keeps room for that (migration runs.0034), so the update writes no index entry."""
    run = plan_run(operator, 20)
    work = Slice(run.pk)
    _horizon_settled()
    updates = hot = 0
    while not work.state.is_terminal:
        with transaction.atomic():
            before = _row_updates("runs_step")
            work.step()
            after = _row_updates("runs_step")
        updates, hot = updates + after[0] - before[0], hot + after[1] - before[1]
    assert updates >= 20 and hot == updates

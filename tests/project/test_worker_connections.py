"""A worker thread keeps its database session from one task to the next (Celery's Django fixup
would close it around every task), and still drops a broken or CONN_MAX_AGE-old one."""
import time
from types import SimpleNamespace

import pytest
from celery import signals
from celery.fixups.django import DjangoWorkerFixup
from django.db import connection

import agentops.celery as worker_celery
from agentops.celery import app, close_old_database_connections

pytestmark = pytest.mark.django_db(transaction=True)  # outside a test transaction, as in a worker

TASK = SimpleNamespace(request=SimpleNamespace(is_eager=False))


def _session():
    connection.ensure_connection()
    return connection.connection


def test_celery_s_own_fixup_no_longer_closes_the_session_around_a_task():
    fixup = DjangoWorkerFixup(app)
    session = _session()
    connection.close_at = time.monotonic() + 60
    fixup.on_task_prerun(sender=TASK)
    fixup.on_task_postrun(sender=TASK)
    assert connection.connection is session


def test_the_next_task_reuses_the_thread_s_session():
    session = _session()
    connection.close_at = time.monotonic() + 60  # within CONN_MAX_AGE (60 s on PostgreSQL; SQLite's is 0)
    for signal in (signals.task_postrun, signals.task_prerun):
        close_old_database_connections(sender=TASK, signal=signal)
    assert connection.connection is session


def test_a_session_past_conn_max_age_is_closed_between_tasks():
    _session()
    connection.close_at = time.monotonic() - 1
    close_old_database_connections(sender=TASK, signal=signals.task_postrun)
    assert connection.connection is None


def test_a_greenlet_s_sessions_close_with_its_task(monkeypatch):
    monkeypatch.setattr(worker_celery, "_TASKS_IN_NEW_GREENLETS", True)
    _session()
    close_old_database_connections(sender=TASK, signal=signals.task_postrun)
    assert connection.connection is None


def test_the_pool_is_noted_when_the_worker_starts(monkeypatch):
    monkeypatch.setattr(worker_celery, "_TASKS_IN_NEW_GREENLETS", False)
    worker_celery.note_the_pool(sender=SimpleNamespace(pool_cls="gevent"))
    assert worker_celery._TASKS_IN_NEW_GREENLETS
    worker_celery.note_the_pool(sender=SimpleNamespace(pool_cls="threads"))
    assert not worker_celery._TASKS_IN_NEW_GREENLETS


def test_an_eager_task_leaves_the_caller_s_session_alone():
    session = _session()
    connection.close_at = time.monotonic() - 1
    close_old_database_connections(sender=SimpleNamespace(request=SimpleNamespace(is_eager=True)),
                                   signal=signals.task_postrun)
    assert connection.connection is session


@pytest.mark.slow
def test_a_real_worker_advances_its_next_run_on_the_session_it_already_has(operator, own_task_queue, wait_until):
    """Through a real worker (one thread, on a queue of the test's own, so both runs' slices land on
    it): the second run starts no new PostgreSQL session. Before, Celery's fixup closed it around
    every task."""
    import subprocess
    import sys
    from pathlib import Path

    from capabilities.kinds.python.sync import python_capabilities_sync
    from runs import services
    from runs.models import Run

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: SQLite keeps no session (CONN_MAX_AGE 0) and has no pg_stat_activity")
    python_capabilities_sync()

    def run_to_completion():
        run = services.run_start(owner=operator, goal="Find the travel policy", planner="scripted",
                                 planner_config={"plans": [[{"capability": "search_documents",
                                                             "arguments": {"q": "travel"}}]]},
                                 completion={"capability": "search_documents", "path": "documents.0.id",
                                             "exists": True}, budgets={"deadline_s": 60})
        wait_until(lambda: Run.objects.get(pk=run.pk).status == "completed", timeout=60,
                   message=f"run {run.pk} to complete")

    app_name = f"reuse-{time.time_ns()}"

    def sessions():
        """The spawned worker's open sessions (libpq names them by PGAPPNAME): other processes of a
        parallel suite open and close sessions on this database too, so only this worker's count."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT pid, backend_start FROM pg_stat_activity WHERE application_name = %s",
                           [app_name])
            return set(cursor.fetchall())

    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "threads", "--concurrency", "1",
         "--loglevel", "WARNING", "--without-mingle", "--without-gossip", "--hostname", f"{app_name}@%h"],
        cwd=Path(__file__).resolve().parents[2], env={**own_task_queue.env, "PGAPPNAME": app_name},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run_to_completion()
        before = sessions()
        assert before, "the worker's sessions are named by PGAPPNAME"
        run_to_completion()
        assert sessions() == before
    finally:
        worker.terminate()
        worker.wait(timeout=20)

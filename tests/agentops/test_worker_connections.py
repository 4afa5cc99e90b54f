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
    worker_celery.note_the_pool(sender=SimpleNamespace(pool_cls="celery.concurrency.gevent:TaskPool"))
    assert worker_celery._TASKS_IN_NEW_GREENLETS
    worker_celery.note_the_pool(sender=SimpleNamespace(pool_cls=type("TaskPool", (), {"__module__": "celery.concurrency.thread"})))
    assert not worker_celery._TASKS_IN_NEW_GREENLETS


def test_an_eager_task_leaves_the_caller_s_session_alone():
    session = _session()
    connection.close_at = time.monotonic() - 1
    close_old_database_connections(sender=SimpleNamespace(request=SimpleNamespace(is_eager=True)),
                                   signal=signals.task_postrun)
    assert connection.connection is session

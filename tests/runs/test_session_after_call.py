"""A pass that waited on a call checks its database session before writing the call's outcome
(runs/worker/engine.py): a database restart during the call ended the session, and the outcome is
written on a new one instead of being lost with it (the next worker would find it unknown)."""
import time

import psycopg
import pytest
from django.db import connection

from runs import services
from runs.models import Attempt
from runs.worker import engine

pytestmark = [pytest.mark.django_db(transaction=True),   # the worker's own session, outside a test transaction
              pytest.mark.skipif(connection.vendor != "postgresql", reason="a session the server ends is PostgreSQL's")]


def _backend() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def test_a_call_outlasting_the_workers_session_has_its_outcome_written_on_a_new_one(operator, manual_advance,
                                                                                      monkeypatch):
    from capabilities.demo import functions
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    run = services.run_start(owner=operator, goal="Find the travel policy", planner="scripted",
                             planner_config={"plans": [[{"capability": "search_documents", "arguments": {"q": "travel"}}]]},
                             completion={"capability": "search_documents", "path": "documents.0.id", "exists": True},
                             budgets={"deadline_s": 60})
    worker_session = _backend()   # run_advance runs in this thread, on this session
    search = functions.search_documents

    def search_while_the_database_restarts(q: str, limit: int = 5):
        db = connection.settings_dict   # a session of the call's own, outside Django
        with psycopg.connect(dbname=db["NAME"], user=db["USER"], host=db["HOST"] or "127.0.0.1",
                             port=db["PORT"] or 5432, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [worker_session])
        time.sleep(engine.SESSION_CHECK_AFTER_S + 0.2)
        return search(q, limit)

    monkeypatch.setattr(functions, "search_documents", search_while_the_database_restarts)
    engine.run_advance(run_id=run.pk, worker="w1")
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("completed", "completed")
    assert list(Attempt.objects.filter(run=run).values_list("status", flat=True)) == ["ok"]
    assert _backend() != worker_session

"""The event loop's pool threads (the gateway's and the planning long poll's ORM calls: core.db_sessions)
replace a database session the server ended, as a request thread does; without that check a pool
thread failed every call after a database restart until the web process was restarted."""
import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from core.db_sessions import pooled

pytestmark = pytest.mark.django_db(transaction=True)   # outside a test transaction, as in the web process


def _backend() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def _terminate(pid: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a session the server ends is PostgreSQL's")
def test_a_pool_thread_s_next_call_gets_a_new_session_after_the_server_ended_its_own():
    loop = asyncio.new_event_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))   # one pool thread: every call meets its session
    # The loop runs in a thread of its own: this one may have one running already (the browser tests').
    runner = ThreadPoolExecutor(max_workers=1)

    def call(fn):
        return runner.submit(loop.run_until_complete, pooled(fn)()).result(timeout=60)

    try:
        first = call(_backend)
        assert first != _backend()
        _terminate(first)                                          # as a database restart ends every session
        # Checked first (CONN_HEALTH_CHECKS), the ended session is replaced: the call is served.
        second = call(_backend)
        assert second != first
        call(lambda: connection.close())                           # its own thread's session
    finally:
        runner.submit(loop.close).result()
        runner.shutdown()

"""PostgreSQL: the ASGI web server closes a request's database session with the request (agentops/asgi.py).

Each request's synchronous code runs on a thread of its own under ASGI: a session kept for
CONN_MAX_AGE would stay open after its thread, and bursts of requests would pile sessions up to
PostgreSQL's max_connections (a CI run of the API fuzz test met "too many clients")."""
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(connection.vendor != "postgresql", reason="sessions are PostgreSQL's here")]


def sessions() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid()")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_bursts_of_requests_leave_no_sessions_behind(web_server, wait_until):
    server = web_server(layout="uvicorn")
    before = sessions()
    for _ in range(4):   # 30 at once, four times: each request reads the database (the health check)
        with ThreadPoolExecutor(30) as pool:
            statuses = list(pool.map(lambda _: server.get("/healthz", timeout=30)[0], range(30)))
        assert statuses == [200] * 30
    time.sleep(0.5)
    # Two uvicorn workers: a session or two each (the gateway's pool, the sweeps) may stay open.
    assert sessions() <= before + 4, (before, sessions())

"""Pages read from a PostgreSQL streaming replica (`DATABASE_REPLICA_URL`); nothing that must see a write does.

Only a page view marked `reads_from_replica` (the dashboard, the lists, the trace) reads from
the replica, and only for a GET whose reader the replica can serve truthfully:

- the replica has replayed this browser's own last write (its WAL position, kept in a
  cookie when a request wrote), so an operator who approved or cancelled sees it at once;
- the replica is no further behind than `AGENTOPS_REPLICA_MAX_LAG_S`, so nobody reads
  a page older than that;
- the replica answered; a replica that fails is left alone for a while.

Otherwise, and everywhere else (the worker, the API, the gateway, every write and every read
after a write in the same request), reads go to the primary. The state lives in one object per
request, so a write made anywhere below the view (a session saved, a row touched) turns the
rest of the request's reads back to the primary.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from functools import wraps

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

log = logging.getLogger("agentops.replica")

REPLICA = "replica"
# The primary's WAL position after this browser's last write: "16/B374D848".
WROTE_COOKIE = "agentops_wrote_lsn"
_LSN = re.compile(r"^[0-9A-F]{1,8}/[0-9A-F]{1,8}$")
# A replica that failed is not asked again for this long (every page would otherwise wait
# for its connect timeout).
RETRY_AFTER_FAILURE_S = 10.0


@dataclass
class RequestReads:
    """Where this request reads, and whether it wrote: shared by the view, the router and the middleware."""

    reads_from: str = DEFAULT_DB_ALIAS
    wrote: bool = False


_request: ContextVar[RequestReads | None] = ContextVar("agentops_replica_request", default=None)


def configured() -> bool:
    return REPLICA in settings.DATABASES


class ReplicaRouter:
    """Reads go where the request says (the primary unless a page chose the replica); writes, and
    every read after one, go to the primary; migrations run on the primary only."""

    def db_for_read(self, model, **hints) -> str:
        state = _request.get()
        return state.reads_from if state is not None else DEFAULT_DB_ALIAS

    def db_for_write(self, model, **hints) -> str:
        state = _request.get()
        if state is not None:
            state.reads_from, state.wrote = DEFAULT_DB_ALIAS, True
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1, obj2, **hints) -> bool:
        return True   # one database, two copies

    def allow_migrate(self, db, app_label, **hints) -> bool:
        return db == DEFAULT_DB_ALIAS


class _Health:
    """When the replica last failed, per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failed_at = float("-inf")

    def resting(self) -> bool:
        with self._lock:
            return time.monotonic() - self._failed_at < RETRY_AFTER_FAILURE_S

    def failed(self) -> None:
        with self._lock:
            self._failed_at = time.monotonic()


health = _Health()

# One round trip: has the replica replayed up to the reader's last write, and how far behind is it?
# Caught up (everything received is replayed) counts as no lag, however old the last transaction.
_STATE_SQL = """
SELECT pg_is_in_recovery(),
       COALESCE(pg_last_wal_replay_lsn() >= %s::pg_lsn, false),
       CASE WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
            ELSE EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp()) END
"""


def replica_serves(request) -> bool:
    """Whether this GET may read from the replica (see the module's docstring)."""
    if not configured() or request.method not in ("GET", "HEAD") or health.resting():
        return False
    wrote = request.COOKIES.get(WROTE_COOKIE, "")
    try:
        with connections[REPLICA].cursor() as cursor:
            cursor.execute(_STATE_SQL, [wrote if _LSN.match(wrote) else "0/0"])
            in_recovery, has_my_writes, lag = cursor.fetchone()
    except DatabaseError as exc:
        health.failed()
        connections[REPLICA].close()
        log.warning("replica unavailable, pages read from the primary for %.0f s: %s", RETRY_AFTER_FAILURE_S,
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
        return False
    # A promoted replica is no longer a copy of the primary: it is not read from.
    return bool(in_recovery and has_my_writes and lag is not None
                and float(lag) <= settings.AGENTOPS_REPLICA_MAX_LAG_S)


def reads_from_replica(view: Callable) -> Callable:
    """Mark a page view whose reads may come from the replica (see the module's docstring)."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        state = _request.get()
        if state is None or not replica_serves(request):
            return view(request, *args, **kwargs)
        state.reads_from = REPLICA
        try:
            response = view(request, *args, **kwargs)
        finally:
            if state.reads_from == REPLICA:
                state.reads_from = DEFAULT_DB_ALIAS
        if getattr(response, "streaming", False):
            response.streaming_content = _reading_from_replica(state, response.streaming_content)
        return response

    return wrapped


def _reading_from_replica(state: RequestReads, chunks: Iterator) -> Iterator:
    """A streamed download reads as it is sent, after the view (and the middleware) returned: each
    chunk is read from the replica too, unless something wrote meanwhile."""
    iterator = iter(chunks)
    while True:
        token = _request.set(state)
        if not state.wrote:
            state.reads_from = REPLICA
        try:
            chunk = next(iterator)
        except StopIteration:
            return
        finally:
            state.reads_from = DEFAULT_DB_ALIAS
            _request.reset(token)
        yield chunk


class ReplicaMiddleware:
    """Gives each request its reads state; after a request that wrote, tells the browser the
    primary's WAL position, so the replica serves its next pages only once it holds that write."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        state = RequestReads()
        token = _request.set(state)
        try:
            response = self.get_response(request)
            if state.wrote or request.method not in ("GET", "HEAD", "OPTIONS"):
                self._remember_write(response)
            return response
        finally:
            _request.reset(token)

    @staticmethod
    def _remember_write(response) -> None:
        try:
            with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
                cursor.execute("SELECT pg_current_wal_lsn()::text")
                lsn = cursor.fetchone()[0]
        except DatabaseError:
            return   # the response stands; the primary's outage is answered elsewhere
        response.set_cookie(WROTE_COOKIE, lsn, max_age=int(settings.AGENTOPS_REPLICA_MAX_LAG_S) + 60,
                            httponly=True, samesite="Lax", secure=settings.SESSION_COOKIE_SECURE)

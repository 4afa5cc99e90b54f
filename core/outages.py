"""What is down, decided in one place: the web's 503s, their log lines, /healthz and the workers ask here."""
from __future__ import annotations

import errno
import logging
import sqlite3
from dataclasses import dataclass

from django.db import InterfaceError, OperationalError

# The database cannot be used right now (down, restarting, its disk full): nothing was
# decided, so a worker abandons its pass and the web answers 503; trying again later is right.
DATABASE_ERRORS = (OperationalError, InterfaceError)

log = logging.getLogger("agentops.outages")

# PostgreSQL's disk_full ("could not extend file ...: No space left on device").
_PG_DISK_FULL = "53100"
# SQLite: SQLITE_FULL is "database or disk is full"; a connection opened on a full disk
# fails earlier, extending its WAL index (-shm), with SQLITE_IOERR_SHMSIZE ("disk I/O error").
_SQLITE_STORAGE_CODES = {sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR_SHMSIZE}


@dataclass(frozen=True)
class Outage:
    down: str       # what is down, as /healthz's "down" lists it
    code: str       # the API's error code
    summary: str    # for the log line
    message: str    # for the user


DATABASE_UNAVAILABLE = Outage("database", "service_unavailable", "database unavailable",
                              "The database is unavailable; try again shortly.")
STORAGE_FULL = Outage("storage", "storage_full", "storage full",
                      "Storage is full: nothing can be saved until disk space is freed.")


def outage_of(exc: BaseException | None) -> Outage | None:
    """The outage `exc` reports, or None when it is not one (a bug is not an outage)."""
    if exc is None:
        return None
    if any(_is_storage_full(e) for e in (exc, exc.__cause__) if e is not None):
        return STORAGE_FULL
    if isinstance(exc, DATABASE_ERRORS):
        return DATABASE_UNAVAILABLE
    return None


def _is_storage_full(exc: BaseException) -> bool:
    # Django raises its own OperationalError from the driver's, so the driver's is the cause.
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorcode", None) in _SQLITE_STORAGE_CODES:
        return True
    return getattr(exc, "sqlstate", None) == _PG_DISK_FULL


def told(request, response, summary: str, detail: str):
    """`response`, a 503 for an outage, logged once as a warning naming what is down; Django's request
    log (which logs every 5xx as an error) skips a response marked as logged."""
    log.warning("%s: %s %s answered 503 (%s)", summary, request.method, request.path, detail)
    response._has_been_logged = True
    return response

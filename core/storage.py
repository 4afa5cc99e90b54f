"""Whether this instance can still save anything: /healthz asks on every call, so the check is cheap
(a 64 KiB probe file written and removed in each folder we write to, four SQLite PRAGMAs)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from django.conf import settings
from django.db import connection

from core.outages import DATABASE_ERRORS, STORAGE_FULL, outage_of

# With less room than this a run's start (its rows, a broker message) may not fit: that is full.
HEADROOM_BYTES = 64 * 1024


def storage_problem() -> tuple[str, str] | None:
    """("full" or "unwritable", why) when var/ or the SQLite database cannot take HEADROOM_BYTES more."""
    for folder in _folders():
        try:
            _probe_write(folder)
        except OSError as exc:
            return ("full" if outage_of(exc) is STORAGE_FULL else "unwritable"), f"{folder}: {exc.strerror}"
    if connection.vendor == "sqlite":
        return _sqlite_room_problem()
    return None


def _folders() -> list[Path]:
    # var/ holds the embedded broker's messages, results and, by default, the SQLite file.
    folders = [Path(settings.VAR_DIR)]
    if connection.vendor == "sqlite":
        folders.append(Path(connection.settings_dict["NAME"]).resolve().parent)
    return list(dict.fromkeys(folders))


def _probe_write(folder: Path) -> None:
    # The write itself, not free-space figures: it fails exactly when ours would (quotas, root's reserve).
    fd, path = tempfile.mkstemp(prefix=".healthz-", dir=folder)
    try:
        os.write(fd, bytes(HEADROOM_BYTES))
    finally:
        os.close(fd)
        os.unlink(path)


def _sqlite_room_problem() -> tuple[str, str] | None:
    """SQLite can be full before its disk is: PRAGMA max_page_count caps the file."""
    try:
        with connection.cursor() as cursor:
            pragmas = {}
            for name in ("page_size", "page_count", "max_page_count", "freelist_count"):
                cursor.execute(f"PRAGMA {name}")
                pragmas[name] = cursor.fetchone()[0]
    except DATABASE_ERRORS:
        return None  # the database check reports it
    room = (pragmas["max_page_count"] - pragmas["page_count"] + pragmas["freelist_count"]) * pragmas["page_size"]
    return ("full", f"the SQLite database has room for {room} more bytes") if room < HEADROOM_BYTES else None

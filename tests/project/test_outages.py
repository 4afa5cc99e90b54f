"""Outages told truthfully: what is down (core.outages), the 503 and its log line, /healthz on a full disk."""
import errno
import logging
import sqlite3
import subprocess
from contextlib import contextmanager

import psycopg.errors
import pytest
from django.db import OperationalError, connection
from rest_framework.test import APIClient

from core.outages import DATABASE_UNAVAILABLE, STORAGE_FULL, outage_of

START = {"goal": "g" * 9000, "completion": {"capability": "search_documents", "path": "documents.0.id", "exists": True}}


def django_error_from(driver_error: Exception) -> OperationalError:
    """What Django raises for a driver's error: its own, with the driver's as the cause."""
    try:
        try:
            raise driver_error
        except Exception as exc:
            raise OperationalError(str(exc)) from exc
    except OperationalError as wrapped:
        return wrapped


def real_sqlite_full_error() -> sqlite3.OperationalError:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (b BLOB)")
    db.execute("PRAGMA max_page_count = 2")
    try:
        db.execute("INSERT INTO t VALUES (zeroblob(100000))")
    except sqlite3.OperationalError as exc:
        return exc
    raise AssertionError("SQLite took the blob")


class TestOutageOf:
    def test_it_names_a_full_sqlite_database_storage_full(self):
        error = real_sqlite_full_error()
        assert "database or disk is full" in str(error)
        assert outage_of(django_error_from(error)) is STORAGE_FULL

    def test_it_names_postgresqls_disk_full_storage_full(self):
        error = psycopg.errors.DiskFull('could not extend file "base/16384/2619": No space left on device')
        assert outage_of(django_error_from(error)) is STORAGE_FULL

    def test_it_names_a_full_folder_storage_full(self):
        assert outage_of(OSError(errno.ENOSPC, "No space left on device")) is STORAGE_FULL

    def test_it_names_other_database_errors_database_unavailable(self):
        error = psycopg.errors.ConnectionFailure("connection to server at 127.0.0.1 failed: Connection refused")
        assert outage_of(django_error_from(error)) is DATABASE_UNAVAILABLE

    def test_a_bug_is_not_an_outage(self):
        assert outage_of(ValueError("no")) is None
        assert outage_of(OSError(errno.EACCES, "Permission denied")) is None


def api(user) -> APIClient:
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(user)
    return client


def assert_logged_as_a_warning(caplog, summary: str):
    warnings = [r for r in caplog.records if r.name == "agentops.outages" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].getMessage().startswith(summary), caplog.text
    assert not [r for r in caplog.records if r.name == "django.request" and r.levelno >= logging.ERROR], caplog.text


@pytest.mark.django_db
class TestDatabaseDown:
    def test_it_answers_503_and_logs_a_warning_naming_the_database(self, operator, caplog):
        def refuse(execute, sql, params, many, context):
            raise OperationalError("connection to server at 127.0.0.1, port 5432 failed: Connection refused")

        with caplog.at_level(logging.INFO), connection.execute_wrapper(refuse):
            response = api(operator).post("/api/runs/start/", START, format="json")
        assert response.status_code == 503 and response["Retry-After"]
        assert response.json()["error"]["code"] == "service_unavailable" and response.json()["down"] == ["database"]
        assert_logged_as_a_warning(caplog, "database unavailable: POST /api/runs/start/")


@contextmanager
def sqlite_filled_up():
    """The SQLite file capped at its size (PRAGMA max_page_count, this connection's) and its free pages
    used up, so the next write needing a page fails as on a full disk: "database or disk is full".
    Autocommitted (SQLite may roll back a whole transaction on SQLITE_FULL): transactional tests only."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE filler (b BLOB)")
        cursor.execute("PRAGMA max_page_count")
        unlimited = cursor.fetchone()[0]
        cursor.execute("PRAGMA page_count")
        cursor.execute(f"PRAGMA max_page_count = {cursor.fetchone()[0]}")
        try:
            with pytest.raises(OperationalError, match="database or disk is full"):
                while True:
                    cursor.execute("INSERT INTO filler VALUES (zeroblob(1000))")
            yield
        finally:
            cursor.execute(f"PRAGMA max_page_count = {unlimited}")
            cursor.execute("DROP TABLE filler")


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="PRAGMA max_page_count is SQLite's")
class TestSqliteFull:
    def test_the_api_says_storage_full(self, operator, caplog):
        with caplog.at_level(logging.INFO), sqlite_filled_up():
            response = api(operator).post("/api/runs/start/", START, format="json")
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "storage_full" and response.json()["down"] == ["storage"]
        assert_logged_as_a_warning(caplog, "storage full: POST /api/runs/start/")

    def test_healthz_answers_503_naming_storage(self, client):
        with sqlite_filled_up():
            response = client.get("/healthz")
        assert response.status_code == 503
        body = response.json()
        assert body["storage"] == "full" and "storage" in body["down"] and body["database"] == "ok"
        assert client.get("/healthz").status_code == 200


@pytest.fixture
def full_folder(tmp_path):
    """A real filesystem with no space left (a 256 KiB tmpfs, filled): needs root to mount."""
    folder = tmp_path / "full"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={folder / 'filler'}", "bs=4k"], capture_output=True)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.slow  # mounts a filesystem (mount, dd, umount)
@pytest.mark.django_db
def test_healthz_answers_503_when_var_is_full(client, settings, full_folder, caplog):
    settings.VAR_DIR = full_folder
    with caplog.at_level(logging.INFO):
        response = client.get("/healthz")
    assert_logged_as_a_warning(caplog, "storage full: GET /healthz answered 503")
    assert response.status_code == 503
    body = response.json()
    assert body["storage"] == "full" and body["down"] == ["storage"], body
    assert "No space left on device" in body["storage_error"]
    (full_folder / "filler").unlink()
    assert client.get("/healthz").status_code == 200

"""Stop detail text search (`stop_detail__icontains`, the runs list's `q`) by trigram index on PostgreSQL.

The runs list's q is goal OR stop detail OR an attempt matching: with the goal's trigram index
(migration 0009) alone, the OR left a scan of every run for the stop detail (290 ms at 1M runs to
count a rare word's 2,000 runs). With this one PostgreSQL ORs the two indexes and the run ids.
Written once, at the stop (whose update is not HOT anyway). As 0009, it is skipped with a warning
when the pg_trgm extension cannot be created; SQLite has none.
"""
import logging

from django.db import migrations, transaction

log = logging.getLogger(__name__)
INDEX = "run_stop_detail_upper_trgm_idx"


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {INDEX} ON runs_run "
                                  "USING gin (UPPER(stop_detail) gin_trgm_ops)")
    except Exception as exc:  # no privilege for the extension: search works without the index
        log.warning("stop detail search index not created (%s); stop detail search will scan", exc)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("runs", "0030_step_progress")]

    operations = [migrations.RunPython(create, drop)]
